"""Roles from one model and the DCE distillation loss (Recursive OPSD §3.1, eqs. 2-4).

The student context is ``[x; y]`` and the teacher context ``[C(x, g, tau); y]``: the same sampled response
tokens ``y`` after two different prompts. :func:`response_logits` runs one model on ``prompt + response`` rows and
returns the logits that predict each response token, aligned across the two contexts, with a response mask (0 on
padding). :func:`distill_loss` takes the per-position divergence over the full vocabulary and aggregates it with
:func:`agentpost.rl.aggregate`; the default ``seq_mean_token_mean`` is eq. 4's per-sequence mean (1/m) sum_t
followed by the batch mean. The paper leaves the support open (``kl_support``): the divergence runs over the full
vocabulary (the paper's main runs) or over the teacher's ``topk`` most likely tokens at each position, both
distributions renormalised over them (:func:`restrict_support`).
"""

from __future__ import annotations

import torch

from agentpost.opsd.divergence import divergence
from agentpost.rl import aggregate

DCE_POSITIONS = ("all", "exclude_eos")
KL_SUPPORTS = ("full", "topk")


def pack(prompts: list[list[int]], responses: list[list[int]], pad_id: int):
    """Right-padded ``prompt + response`` rows: ``(input_ids, attention_mask, prompt_lengths, response_lengths)``."""
    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses")
    rows = [p + r for p, r in zip(prompts, responses)]
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r, dtype=torch.long)
        attn[i, : len(r)] = 1
    return ids, attn, [len(p) for p in prompts], [len(r) for r in responses]


def response_logits(model, prompts: list[list[int]], responses: list[list[int]], pad_id: int):
    """Logits predicting each response token, shape ``[B, max_m, V]``, and the response mask ``[B, max_m]``.

    Row ``i``, column ``t`` is the distribution over response token ``t`` given the prompt and ``y_{<t}``."""
    ids, attn, plen, rlen = pack(prompts, responses, pad_id)
    dev = next(model.parameters()).device
    logits = model(input_ids=ids.to(dev), attention_mask=attn.to(dev)).logits
    m = max(rlen)
    pos = torch.zeros((len(prompts), m), dtype=torch.long)
    mask = torch.zeros((len(prompts), m))
    for i, (p, r) in enumerate(zip(plen, rlen)):
        pos[i, :r] = torch.arange(p - 1, p - 1 + r)
        mask[i, :r] = 1.0
    out = logits.gather(1, pos[:, :, None].expand(-1, -1, logits.shape[-1]).to(dev))
    return out, mask.to(dev)


def response_mask(responses: list[list[int]], eos_id: int, positions: str = "all") -> torch.Tensor:
    """Mask of retained response positions (``dce_positions``, which the paper leaves open): ``all`` generated tokens up
    to and including EOS, or ``exclude_eos``; padding is always 0."""
    if positions not in DCE_POSITIONS:
        raise ValueError(f"unknown dce_positions {positions!r}; use one of {DCE_POSITIONS}")
    m = max(map(len, responses))
    mask = torch.zeros((len(responses), m))
    for i, r in enumerate(responses):
        n = len(r) - (1 if positions == "exclude_eos" and r and r[-1] == eos_id else 0)
        mask[i, :n] = 1.0
    return mask


def restrict_support(
    teacher_logits: torch.Tensor, student_logits: torch.Tensor, kl_support: str = "full", topk: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Both logits on the support of the divergence (``kl_support``): ``full`` unchanged; ``topk`` gathered at the
    teacher's ``topk`` largest logits per position (a softmax over them renormalises both distributions there)."""
    if kl_support not in KL_SUPPORTS:
        raise ValueError(f"unknown kl_support {kl_support!r}; use one of {KL_SUPPORTS}")
    if kl_support == "full":
        return teacher_logits, student_logits
    if not 1 <= topk <= teacher_logits.shape[-1]:
        raise ValueError(f"kl_support='topk' needs 1 <= topk <= vocabulary size {teacher_logits.shape[-1]}, got {topk}")
    idx = teacher_logits.detach().topk(topk, dim=-1).indices
    return teacher_logits.gather(-1, idx), student_logits.gather(-1, idx)


def distill_loss(
    teacher_logits: torch.Tensor,
    student_logits: torch.Tensor,
    mask: torch.Tensor,
    *,
    divergence_name: str = "forward_kl",
    agg: str = "seq_mean_token_mean",
    kl_support: str = "full",
    topk: int = 0,
) -> torch.Tensor:
    """L_G (eq. 4): per-position divergence(teacher, student) over the vocabulary (or the teacher's top-k tokens,
    :func:`restrict_support`), aggregated over ``mask``."""
    teacher_logits, student_logits = restrict_support(teacher_logits, student_logits, kl_support, topk)
    per_pos = divergence(divergence_name, teacher_logits, student_logits)
    return aggregate(per_pos * mask, mask, agg)
