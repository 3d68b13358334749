"""The EOS-vs-reflection probe (Recursive OPSD eq. 8, claim C5).

On a fixed set of incorrect trajectories the probe reads, under the student context (the problem only) and the
teacher context (the problem plus the privileged reference), two probabilities:

* ``p_eos``: p(EOS) at the endpoint of an incorrect trajectory (arithmetic: ``"a+b = w. The answer is
  \\boxed{w}."``; GSM8K: the reference steps then ``The answer is \\boxed{w}.``);
* ``p_cue``: p(reflection cue) at a revision point, the probability of the whole cue string (``"Wait"``, the
  product of its tokens' probabilities) right after the wrong statement (arithmetic ``"a+b = w. "``).

The trajectories are built, not sampled (the task's ``probe_texts``): a wrong value ``w`` (the task's
``wrong_answer``, fixed seed), the same for every arm and every step, so the curves over training measure only the
model.
"""

from __future__ import annotations

import numpy as np
import torch

from agentpost.opsd.loss import response_logits
from agentpost.opsd.tasks import ARITHMETIC


def fixed_incorrect(items, n: int, seed: int = 0, task=ARITHMETIC) -> list[tuple]:
    """``n`` (item, wrong answer) pairs, the first ``n`` items with a seeded wrong answer."""
    rng = np.random.default_rng(seed)
    return [(e, task.wrong_answer(e, rng)) for e in list(items)[:n]]


@torch.no_grad()
def _mean_prob(model, tok, prompts: list[str], prefixes: list[str], target: str | None) -> float:
    """Mean over rows of p(target | prompt + prefix); ``target`` None means EOS."""
    enc = lambda s: tok(s, add_special_tokens=False).input_ids
    tgt = [tok.eos_token_id] if target is None else enc(target)
    logits, _ = response_logits(model, [enc(p) for p in prompts], [enc(x) + tgt for x in prefixes], tok.pad_token_id)
    logp = torch.log_softmax(logits.float(), -1).cpu()
    out = []
    for i, x in enumerate(prefixes):
        start = len(enc(x))
        out.append(float(sum(logp[i, start + j, t] for j, t in enumerate(tgt)).exp()))
    return float(np.mean(out))


def probe(
    model,
    tok,
    items,
    *,
    layout: str = "assistant",
    cue: str = "Wait",
    roles: tuple[str, ...] = ("student", "teacher"),
    task=ARITHMETIC,
) -> dict[str, float]:
    """``{role}_p_eos`` and ``{role}_p_cue`` for each of ``roles`` (``student``: the problem only; ``teacher``: with
    the reference in ``layout``) on the fixed incorrect trajectories ``items`` (:func:`fixed_incorrect`)."""
    was = model.training
    model.eval()
    out = {}
    texts = [task.probe_texts(e, w) for e, w in items]
    ends, revisions = [t[0] for t in texts], [t[1] for t in texts]
    contexts = {"student": task.student_prompt, "teacher": lambda e: task.teacher_prompt(e, layout)}
    for role in roles:
        prompt = contexts[role]
        prompts = [prompt(e) for e, _ in items]
        out[f"{role}_p_eos"] = _mean_prob(model, tok, prompts, ends, None)
        out[f"{role}_p_cue"] = _mean_prob(model, tok, prompts, revisions, cue)
    model.train(was)
    return out
