"""Pretrain the arithmetic LM (:mod:`agentpost.models.arith_lm`) on GSM8K-derived arithmetic, evaluate, save.

Training data: the **train** expressions of :func:`agentpost.data.gsm8k.arithmetic_split` only, each step a batch
of (prompt, target) pairs drawn with replacement; the loss is next-token NLL on the target tokens (response and
``<eos>``; completion-only). Prompt kinds, with the mixture weights in :class:`Hyper`: student prompt -> a response
in a random style; teacher prompt (either layout) -> a response in a random style (the reference line makes the
result copyable, so the one network learns to act as the privileged teacher); refinement prompt with a previous
response (its final value wrong with probability ``rewrite_wrong``) -> the concise rewrite of that final value.

Evaluation (receipt): greedy decoding on validation and held-out test expressions from the student prompt
(exact match of the final box, mean response tokens, share with "Wait"), from the assistant-side teacher prompt,
and the rewrite of the model's own student responses (share shorter, share keeping the final value).

The committed checkpoint is one run on one CPU thread (about 11 wall-minutes on the shared 2-core machine, under
contention; ``receipt.json``)::

    nice -n 10 python -m agentpost.models.train_arith_lm --steps 1000
    # writes agentpost/models/assets/gsm8k-arith-lm/

It is right on about a third of the held-out items (the receipt's greedy accuracy), inside the 30-60% band where
the OPSD chapter's arms can move accuracy either way. A second phase (``--init`` that checkpoint ``--steps 1000
--lr 0.002 --warmup-steps 10 --seed 1``, 20 more minutes) reached 0.69 test / 0.73 validation accuracy, above the
band, and is not committed. Training is deterministic for a given seed, thread count and torch build: the example
stream comes from numpy's seeded generator and the initial weights from ``torch.manual_seed``.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from agentpost.data import files_read
from agentpost.data.gsm8k import arithmetic_split
from agentpost.models import arith_lm as A
from agentpost.models.schedules import warmup_cosine
from agentpost.models.receipt import write_model_receipt
from agentpost.models.trainer import save_checkpoint


@dataclass
class Hyper:
    seed: int = 0
    threads: int = 1
    steps: int = 500
    batch: int = 24
    lr: float = 4e-3
    warmup_steps: int = 30
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    p_student: float = 0.55
    p_teacher_assistant: float = 0.15
    p_teacher_user: float = 0.1
    p_rewrite: float = 0.2
    style_weights: str = "0.4,0.2,0.25,0.15"  # concise, verbose, corrected, rebox
    rewrite_wrong: float = 0.25
    max_new_tokens: int = 160
    eval_items: int = 200  # first this-many validation/test expressions (0: all)
    log_every: int = 25


def draw_kind(rng: np.random.Generator, hp: Hyper) -> int:
    """Prompt kind of one batch: 0 student, 1 teacher (assistant side), 2 teacher (user side), 3 refinement.
    A batch holds one kind so that short student rows are not padded to the width of long refinement rows."""
    kinds = np.array([hp.p_student, hp.p_teacher_assistant, hp.p_teacher_user, hp.p_rewrite])
    return int(rng.choice(4, p=kinds / kinds.sum()))


def example(expr, kind: int, rng: np.random.Generator, hp: Hyper) -> tuple[str, str]:
    """One (prompt, target) pair of prompt kind ``kind`` (:func:`draw_kind`) in a random response style."""
    style_p = np.array([float(x) for x in hp.style_weights.split(",")])
    style = A.STYLES[rng.choice(len(A.STYLES), p=style_p / style_p.sum())]
    resp = A.response(expr, style, rng)
    if kind == 0:
        return A.student_prompt(expr), resp
    if kind in (1, 2):
        return A.teacher_prompt(expr, A.LAYOUTS[kind - 1]), resp
    final = expr.result
    if rng.random() < hp.rewrite_wrong:
        final = A.wrong_value(expr.result, rng)
        resp = resp.replace(A.boxed(expr.result), A.boxed(final))
    return A.refine_prompt(expr, resp), A.concise_rewrite(expr, final)


def batch_tensors(tok, pairs: list[tuple[str, str]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded ``input_ids``, ``attention_mask`` and a target mask (1 on target tokens incl. ``<eos>``)."""
    rows, masks = [], []
    for prompt, target in pairs:
        p = tok(prompt, add_special_tokens=False).input_ids
        t = tok(target, add_special_tokens=False).input_ids + [tok.eos_token_id]
        rows.append(p + t)
        masks.append([0] * len(p) + [1] * len(t))
    width = max(map(len, rows))
    ids = torch.full((len(rows), width), tok.pad_token_id, dtype=torch.long)
    tmask = torch.zeros((len(rows), width))
    for i, (r, m) in enumerate(zip(rows, masks)):
        ids[i, : len(r)] = torch.tensor(r)
        tmask[i, : len(m)] = torch.tensor(m, dtype=torch.float32)
    return ids, (ids != tok.pad_token_id).long(), tmask


def target_nll(model, ids, attn, tmask) -> torch.Tensor:
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1]
    nll = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), ids[:, 1:].reshape(-1), reduction="none")
    w = tmask[:, 1:].reshape(-1)
    return (nll * w).sum() / w.sum()


def evaluate(model, tok, exprs, max_new_tokens: int) -> dict:
    """Greedy student accuracy / length / reflection share, teacher accuracy, and rewrite statistics."""
    student = A.generate(model, tok, [A.student_prompt(e) for e in exprs], max_new_tokens=max_new_tokens)
    teacher = A.generate(model, tok, [A.teacher_prompt(e) for e in exprs], max_new_tokens=max_new_tokens)
    rewrite = A.generate(
        model, tok, [A.refine_prompt(e, s["text"]) for e, s in zip(exprs, student)], max_new_tokens=max_new_tokens
    )
    acc = lambda outs: float(np.mean([A.final_answer(o["text"]) == e.result for o, e in zip(outs, exprs)]))
    return {
        "items": len(exprs),
        "student_accuracy": acc(student),
        "student_mean_tokens": float(np.mean([len(o["ids"]) for o in student])),
        "student_eos_rate": float(np.mean([o["eos"] for o in student])),
        "student_wait_share": float(np.mean(["Wait" in o["text"] for o in student])),
        "teacher_accuracy": acc(teacher),
        "rewrite_shorter_share": float(np.mean([len(r["ids"]) < len(s["ids"]) for r, s in zip(rewrite, student)])),
        "rewrite_keeps_final_share": float(
            np.mean([A.final_answer(r["text"]) == A.final_answer(s["text"]) for r, s in zip(rewrite, student)])
        ),
        "examples": [{"expr": e.line, "student": s["text"]} for e, s in list(zip(exprs, student))[:5]],
    }


def train(
    out_dir: Path = A.ASSET_DIR,
    hp: Hyper = Hyper(),
    arch: dict | None = None,
    device: str = "cpu",
    init: Path | None = None,
) -> dict:
    """Pretrain, save and evaluate (module docstring); ``arch`` overrides :data:`arith_lm.ARCH` (larger models for
    the GPU profiles), ``device`` is where training runs (the committed checkpoint: CPU); ``init`` continues from
    a saved checkpoint of this script (a second phase; its receipt is kept under ``previous_phases``)."""
    from tqdm.auto import tqdm
    from transformers import Qwen3ForCausalLM

    torch.set_num_threads(hp.threads)
    torch.manual_seed(hp.seed)
    rng = np.random.default_rng(hp.seed)
    t0 = time.time()
    tok = A.build_tokenizer()
    splits = {s: arithmetic_split(s) for s in ("train", "validation", "test")}
    cfg = A.config(**(arch or {}))
    cfg._attn_implementation = "sdpa"
    previous = []
    if init is not None:
        model = Qwen3ForCausalLM.from_pretrained(str(init)).to(device)
        cfg = model.config
        old = json.loads((Path(init) / "receipt.json").read_text())
        previous = old.get("previous_phases", []) + [
            {k: old[k] for k in ("command", "hyperparameters", "tokens_seen", "final_train_loss", "wall_s")}
        ]
        rng = np.random.default_rng(hp.seed + 1000 * len(previous))  # a fresh example stream for the new phase
    else:
        model = Qwen3ForCausalLM(cfg).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=hp.lr, weight_decay=hp.weight_decay, betas=(0.9, 0.95))
    train_exprs = splits["train"]
    model.train()
    tokens = 0
    losses = []
    bar = tqdm(range(hp.steps), desc="pretrain arith LM", mininterval=5)
    for step in bar:
        for g in opt.param_groups:
            g["lr"] = warmup_cosine(step, hp.steps, hp.lr, hp.warmup_steps)
        kind = draw_kind(rng, hp)
        pairs = [example(train_exprs[i], kind, rng, hp) for i in rng.integers(0, len(train_exprs), size=hp.batch)]
        ids, attn, tmask = batch_tensors(tok, pairs)
        loss = target_nll(model, ids.to(device), attn.to(device), tmask.to(device))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), hp.grad_clip)
        opt.step()
        tokens += int(attn.sum())
        losses.append(loss.item())
        if step % hp.log_every == 0:
            bar.set_postfix(loss=f"{np.mean(losses[-hp.log_every :]):.3f}")
    train_s = time.time() - t0

    out_dir = Path(out_dir)
    checkpoint = save_checkpoint(model, tok, out_dir)

    t_ev = time.time()
    model.eval()
    ev = {}
    for s in ("validation", "test"):
        exprs = splits[s][: hp.eval_items] if hp.eval_items else splits[s]
        ev[s] = evaluate(model, tok, exprs, hp.max_new_tokens)
    return write_model_receipt(
        out_dir,
        artifact="gsm8k-arith-lm: Qwen3-architecture causal LM (GQA), character-level tokenizer, pretrained from "
        "scratch on GSM8K-derived arithmetic (train-split calculator annotations; synthetic response "
        "format over real expressions)",
        script="agentpost/models/train_arith_lm.py",
        command=" ".join(
            ["python -m agentpost.models.train_arith_lm"]
            + ([f"--init {init}"] if init else [])
            + [f"--{k.replace('_', '-')} {v}" for k, v in asdict(hp).items() if v != getattr(Hyper, k)]
        ),
        formats={
            "student_prompt": A.student_prompt(splits["train"][0]),
            "teacher_prompt_assistant": A.teacher_prompt(splits["train"][0], "assistant"),
            "teacher_prompt_user": A.teacher_prompt(splits["train"][0], "user"),
            "refine_prompt": A.refine_prompt(splits["train"][0], "{previous response}"),
            "responses": {s: A.response(splits["train"][0], s, wrong="23") for s in A.STYLES},
            "end_of_response": "<eos>",
        },
        task={
            "splits": {s: len(v) for s, v in splits.items()},
            "max_digits": 3,
            "validation_percent": 10,
            "test_excludes_train_expressions": True,
            "trained_on": "train only",
        },
        data=files_read(),
        config=cfg,
        hyperparameters=asdict(hp),
        parameters=n_params,
        previous_phases=previous,
        tokens_seen=tokens,
        final_train_loss=float(np.mean(losses[-hp.log_every :])),
        evaluation_greedy=ev,
        wall_s={
            "train": round(train_s, 1),
            "eval": round(time.time() - t_ev, 1),
            "total": round(time.time() - t0, 1),
        },
        device=f"cpu ({hp.threads} threads)" if device == "cpu" else device,
        checkpoint=checkpoint,
    )


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=A.ASSET_DIR)
    parser.add_argument("--init", type=Path, default=None, help="continue from this checkpoint folder")
    for name, default in asdict(Hyper()).items():
        parser.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    args = vars(parser.parse_args(argv))
    out, init = args.pop("out"), args.pop("init")
    receipt = train(out, Hyper(**args), init=init)
    print(json.dumps({k: receipt[k] for k in ("evaluation_greedy", "wall_s", "parameters")}, indent=2))
    return receipt


if __name__ == "__main__":
    main()
