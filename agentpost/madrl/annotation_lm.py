"""The MaD-RL chapter's small causal LM: GSM8K question tail -> first calculator annotation (the GRU's task).

Why not the shared GSM8K-arithmetic LM (:mod:`agentpost.models.arith_lm`): its only prompt is
``Compute 48/2.``, which *names* the operation, so the operation of what it writes is the prompt's, not the model's
choice, and its greedy arithmetic is right on 1.5% of held-out expressions (its receipt), too rare for a
correctness reward. This model uses the same Qwen3 architecture and character-level tokenizer
(:func:`agentpost.models.arith_lm.config`, :func:`~agentpost.models.arith_lm.build_tokenizer`) and is trained on
the task of :mod:`agentpost.madrl.task`: prompt = :func:`~agentpost.madrl.task.prompt_text` (the question's last 32
characters and a newline), target = the reference solution's first annotation and ``<eos>``. Training data: GSM8K
train minus the validation split (:func:`~agentpost.madrl.task.split_validation`); completion-only next-token loss
(:func:`agentpost.models.train_arith_lm.target_nll`). Train and write the committed checkpoint
(``assets/gsm8k-annotation-lm/``)::

    python -m agentpost.madrl.annotation_lm
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

ASSET_DIR = Path(__file__).parent / "assets" / "gsm8k-annotation-lm"
TRAIN_COMMAND = "python -m agentpost.madrl.annotation_lm"
PROMPT_CHARS = 32
#: Architecture of the committed checkpoint (overrides of :data:`agentpost.models.arith_lm.ARCH`): a smaller
#: Qwen3 (3 layers, hidden 64, GQA 4 query / 2 KV heads) so that the smoke profile's RL runs fit 2 shared cores.
ARCH = dict(
    hidden_size=64,
    intermediate_size=192,
    num_hidden_layers=3,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
)


def train(
    out_dir: Path | None,
    *,
    steps: int,
    batch: int,
    lr: float,
    seed: int,
    threads: int = 1,
    arch: dict | None = None,
    device: str = "cpu",
) -> tuple[object, object, dict]:
    """Pretrain (AdamW, warmup-cosine, clip 1.0) a Qwen3 of :data:`ARCH` (or ``arch``), evaluate the completion NLL on GSM8K test, save to ``out_dir``
    (unless None) with ``receipt.json``; returns (model, tokenizer, receipt)."""
    from tqdm.auto import tqdm
    from transformers import Qwen3ForCausalLM

    from agentpost.data import files_read
    from agentpost.record.hashing import sha256_file
    from agentpost.madrl.task import load_problems, prompt_text, split_validation
    from agentpost.models import arith_lm
    from agentpost.models.schedules import warmup_cosine
    from agentpost.models.train_arith_lm import batch_tensors, target_nll
    from agentpost.models.trainer import optimizer_step, save_checkpoint

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    t0 = time.time()
    tok = arith_lm.build_tokenizer()
    rl_train, validation = split_validation(load_problems("train"))
    test = load_problems("test")
    cfg = arith_lm.config(**(ARCH if arch is None else arch))
    cfg._attn_implementation = "sdpa"
    model = Qwen3ForCausalLM(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, betas=(0.9, 0.95))
    pairs = lambda items: [(prompt_text(p.question, PROMPT_CHARS), p.first_annotation) for p in items]  # noqa: E731
    train_pairs = pairs(rl_train)
    model.train()
    losses = []
    bar = tqdm(range(steps), desc="pretrain annotation LM", mininterval=5)
    for step in bar:
        for g in opt.param_groups:
            g["lr"] = warmup_cosine(step, steps, lr, max(1, steps // 20))
        ids, attn, tmask = batch_tensors(tok, [train_pairs[i] for i in rng.integers(0, len(train_pairs), batch)])
        loss = target_nll(model, ids.to(device), attn.to(device), tmask.to(device))
        optimizer_step(model, opt, loss, 1.0)
        losses.append(loss.item())
        if step % 50 == 0:
            bar.set_postfix(loss=f"{np.mean(losses[-50:]):.3f}")
    model.eval()
    with torch.no_grad():
        nll = {}
        for name, items in (("validation", validation), ("test", test)):
            ids, attn, tmask = batch_tensors(tok, pairs(items))
            nll[name] = round(float(target_nll(model, ids.to(device), attn.to(device), tmask.to(device))), 4)
    receipt = {
        "artifact": "gsm8k-annotation-lm: Qwen3-architecture causal LM (GQA), character-level tokenizer, trained "
        "from scratch on GSM8K question tail -> first calculator annotation",
        "script": "agentpost/madrl/annotation_lm.py",
        "command": TRAIN_COMMAND + f" --steps {steps} --batch {batch} --lr {lr} --seed {seed}",
        "format": {
            "prompt": prompt_text(rl_train[0].question, PROMPT_CHARS),
            "target": rl_train[0].first_annotation,
            "end_of_response": "<eos>",
        },
        "splits": {
            "train (GSM8K train minus validation)": len(rl_train),
            "validation (held out)": len(validation),
            "test (GSM8K test)": len(test),
        },
        "steps": steps,
        "batch": batch,
        "lr": lr,
        "seed": seed,
        "architecture": {
            k: getattr(cfg, k)
            for k in (
                "vocab_size",
                "hidden_size",
                "intermediate_size",
                "num_hidden_layers",
                "num_attention_heads",
                "num_key_value_heads",
                "head_dim",
            )
        },
        "parameters": sum(p.numel() for p in model.parameters()),
        "final_train_loss": round(float(np.mean(losses[-50:])), 4),
        "completion_nll_nats_per_token": nll,
        "data": {k: sha256_file(v) for k, v in sorted(files_read().items())},
        "wall_s": round(time.time() - t0, 1),
        "device": f"cpu ({threads} threads)" if device == "cpu" else device,
        "torch": torch.__version__,
    }
    if out_dir is not None:
        receipt["checkpoint"] = save_checkpoint(model, tok, out_dir)
        (Path(out_dir) / "receipt.json").write_text(json.dumps(receipt, indent=2) + "\n")
    return model, tok, receipt


def load_annotation_lm(path: str | Path = ASSET_DIR, *, dtype: torch.dtype = torch.float32):
    """(model, tokenizer) of the committed checkpoint (:func:`agentpost.models.arith_lm.load`), eval mode."""
    from agentpost.models import arith_lm

    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"no annotation-LM checkpoint at {path}; train it with `{TRAIN_COMMAND}`")
    return arith_lm.load(path, dtype=dtype)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ASSET_DIR)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    _, _, receipt = train(
        args.out, steps=args.steps, batch=args.batch, lr=args.lr, seed=args.seed, threads=args.threads
    )
    print(json.dumps(receipt, indent=2))


if __name__ == "__main__":
    main()
