"""Train the DeltaS chapter's hybrid LM (:mod:`agentpost.deltas.hybrid`) on WikiText-2 with the shared BPE tokenizer.

Random windows of ``seq_len`` tokens of WikiText-2 train (next-token loss on every token; the gated-DeltaNet layers
run the project's chunked gated delta rule), AdamW with linear warmup and cosine decay
(:mod:`agentpost.models.schedules`, :mod:`agentpost.models.trainer`). Evaluation: validation and test perplexity over
non-overlapping ``eval_len`` windows (per BPE token and per WikiText word) and, as the floor it must clear, the
add-one unigram model of the train tokens on the same validation tokens. Saves ``save_pretrained`` output
(``config.json`` + ``model.safetensors``) and ``receipt.json``.

Run::

    python -m agentpost.deltas.train_hybrid          # ~25 min on one contended CPU thread (the committed run); writes agentpost/deltas/assets/wikitext2-hybrid/
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from agentpost.deltas.hybrid import HybridConfig, HybridForCausalLM
from agentpost.evidence.environment import package_versions
from agentpost.models.schedules import warmup_cosine
from agentpost.models.trainer import lm_loss, optimizer_step, perplexity, random_windows

ASSET_DIR = Path(__file__).parent / "assets" / "wikitext2-hybrid"
SPLITS = ("train", "validation", "test")


@dataclass
class Hyper:
    seed: int = 0
    threads: int = 1
    steps: int = 600
    batch: int = 4
    seq_len: int = 512
    lr: float = 3e-3
    warmup_steps: int = 30
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    eval_len: int = 512
    eval_max_tokens: int = 65536  # per split: the first this-many tokens (CPU budget); 0 = whole split
    log_every: int = 25
    device: str = "cpu"

    def __post_init__(self):
        for name in ("threads", "steps", "batch", "seq_len", "eval_len", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"Hyper.{name} must be >= 1, got {getattr(self, name)}")


def wikitext_ids(split: str) -> np.ndarray:
    """A WikiText-2 split as one array of shared-tokenizer ids."""
    from agentpost.data.wikitext2 import read_split
    from agentpost.models.tokenizer import load_tokenizer

    return np.array(load_tokenizer()(read_split(split), add_special_tokens=False).input_ids, dtype=np.int64)


def unigram_ppl(train: np.ndarray, ids: np.ndarray, vocab_size: int) -> float:
    """Per-token perplexity of ``ids`` under the add-one unigram model of ``train`` (the floor to clear)."""
    counts = np.bincount(train, minlength=vocab_size) + 1.0
    logp = np.log(counts / counts.sum())
    return float(math.exp(-logp[ids].mean()))


def train(hp: Hyper = Hyper(), config: HybridConfig | None = None, wiki: dict | None = None,
          log=print) -> tuple[HybridForCausalLM, dict]:
    """Train one hybrid LM; returns (model in eval mode, receipt dict). ``wiki`` maps split -> token ids (tests pass
    a small stream); by default the three WikiText-2 splits are tokenised here."""
    torch.set_num_threads(hp.threads)
    torch.manual_seed(hp.seed)
    rng = np.random.default_rng(hp.seed)
    t0 = time.time()
    wiki = wiki if wiki is not None else {s: wikitext_ids(s) for s in SPLITS}
    config = config or HybridConfig()
    model = HybridForCausalLM(config).to(hp.device)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"hybrid LM: {n_params:,} parameters, layers {config.layer_types}")
    opt = torch.optim.AdamW(model.parameters(), lr=hp.lr, weight_decay=hp.weight_decay, betas=(0.9, 0.95))
    model.train()
    losses = []
    for step in range(hp.steps):
        for g in opt.param_groups:
            g["lr"] = warmup_cosine(step, hp.steps, hp.lr, hp.warmup_steps)
        loss = lm_loss(model, random_windows(wiki["train"], rng, hp.batch, hp.seq_len).to(hp.device))
        optimizer_step(model, opt, loss, hp.grad_clip)
        losses.append(loss.item())
        if step % hp.log_every == 0 or step == hp.steps - 1:
            log(f"[{time.time() - t0:7.1f}s] step {step + 1}/{hp.steps} loss {loss.item():.3f}")
    train_s = time.time() - t0
    model.eval()
    evaluation = {}
    for split in ("validation", "test"):
        ids = wiki[split][: hp.eval_max_tokens or None]
        ppl = perplexity(model, ids, hp.eval_len, n_words=max(1, len(ids)))
        evaluation[split] = {"token_ppl": ppl["token_ppl"], "tokens": ppl["tokens"]}
    evaluation["unigram_validation_token_ppl"] = unigram_ppl(wiki["train"], wiki["validation"][: hp.eval_max_tokens or None],
                                                             config.vocab_size)
    receipt = {
        "artifact": "wikitext2-hybrid: gated-DeltaNet + full-attention hybrid causal LM trained from scratch on "
                    "WikiText-2 train (shared wikitext2-bpe tokenizer)",
        "script": "agentpost/deltas/train_hybrid.py",
        "hyperparameters": asdict(hp),
        "architecture": config.to_diff_dict() | {"layer_types": config.layer_types},
        "params": n_params,
        "train_tokens_seen": hp.steps * hp.batch * hp.seq_len,
        "train_wall_s": round(train_s, 1),
        "first_loss": round(float(np.mean(losses[:10])), 4),
        "final_loss": round(float(np.mean(losses[-10:])), 4),
        "evaluation": evaluation,
        "versions": package_versions(),
    }
    return model, receipt


def save(model: HybridForCausalLM, receipt: dict, out_dir: Path = ASSET_DIR) -> dict:
    """``save_pretrained`` + receipt (with the data hashes and the weights' size and hash)."""
    from agentpost.data import data_file
    from agentpost.evidence.hashing import sha256_file

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out_dir))
    weights = out_dir / "model.safetensors"
    receipt = receipt | {
        "data": {f"wikitext-2/{f}": sha256_file(data_file("wikitext-2", f)) for f in ("train.txt", "valid.txt", "test.txt")},
        "tokenizer": "agentpost/models/assets/wikitext2-bpe",
        "weights_mb": round(weights.stat().st_size / 2**20, 2),
        "weights_sha256": sha256_file(weights),
    }
    (out_dir / "receipt.json").write_text(json.dumps(receipt, indent=2) + "\n")
    return receipt


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    defaults = Hyper()
    for name, value in asdict(defaults).items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=value)
    parser.add_argument("--hidden-size", type=int, default=HybridConfig().hidden_size)
    parser.add_argument("--layer-types", default=",".join(HybridConfig().layer_types),
                        help="comma-separated linear_attention / full_attention")
    parser.add_argument("--out", type=Path, default=ASSET_DIR)
    args = vars(parser.parse_args(argv))
    out, hidden, layers = args.pop("out"), args.pop("hidden_size"), args.pop("layer_types").split(",")
    model, receipt = train(Hyper(**args), HybridConfig(hidden_size=hidden, layer_types=layers))
    receipt["command"] = " ".join(["python -m agentpost.deltas.train_hybrid", *(argv or [])])
    print(json.dumps(save(model, receipt, out), indent=2))


if __name__ == "__main__":
    import sys

    main(sys.argv[1:])
