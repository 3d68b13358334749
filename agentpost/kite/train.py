"""Training and evaluation for the KITE diagnostic on WikiText-2 with the shared tokenizer.

Schedule (the third-party reading; the paper leaves it open): stage 1 trains the Prefiller alone as a dense LM; stage 2
expands it (:func:`agentpost.kite.expansion.expand`) and trains both towers with a fresh AdamW (optimizer restart).
The dense baselines get the same number of optimizer updates and the SST's training FLOPs within 1%
(:func:`agentpost.kite.flops.match_budget` sets their sequences per update). Everything runs on CPU with a fixed
thread count, so a seed gives the same numbers every time.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F

from agentpost.record.outcomes import init_fingerprint
from agentpost.kite.expansion import expand
from agentpost.kite.flops import match_budget, relative_budget_error, training_flops_per_sequence
from agentpost.kite.model import DenseLM, SSTLM, build
from agentpost.models.schedules import warmup_cosine

ARMS = ("sst", "dense_flops", "dense_kv")
_DENSE_KEYS = ("vocab_size", "d_model", "n_heads", "n_prefill", "n_decode", "d_ff", "attention")


@dataclass(frozen=True)
class TrainSpec:
    """Budget of one arm: ``batch_size`` sequences of ``seq_len`` tokens per update (the SST's), stage 1 and stage 2
    update counts (the baselines train for their sum), linear warmup then cosine decay to 10% in each stage."""

    seq_len: int = 64
    batch_size: int = 8
    stage1_updates: int = 100
    stage2_updates: int = 100
    warmup: int = 10
    weight_decay: float = 0.1
    clip: float = 1.0
    threads: int = 1
    expansion_init: str = "copy"
    device: str = "cpu"  # CPU runs are deterministic for a seed (fixed threads); CUDA runs need not be

    def __post_init__(self) -> None:
        for name in ("seq_len", "batch_size", "stage1_updates", "stage2_updates", "threads"):
            if getattr(self, name) < 1:
                raise ValueError(f"TrainSpec.{name} must be >= 1, got {getattr(self, name)}")

    @property
    def updates(self) -> int:
        return self.stage1_updates + self.stage2_updates


@functools.lru_cache(maxsize=8)
def token_stream(split: str, max_chars: int | None = None) -> torch.Tensor:
    """A WikiText-2 split (optionally its first ``max_chars`` characters) as one id tensor (shared tokenizer)."""
    from agentpost.data.wikitext2 import read_split
    from agentpost.models.tokenizer import load_tokenizer

    text = read_split(split)
    ids = load_tokenizer()(text[:max_chars] if max_chars else text)["input_ids"]
    return torch.tensor(ids, dtype=torch.long)


@functools.lru_cache(maxsize=8)
def article_chunks(split: str, seq_len: int, chunks_per_article: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Each article's first ``chunks_per_article`` non-overlapping windows of ``seq_len + 1`` tokens.

    Returns (windows (n, seq_len+1), article index per window); articles shorter than one window are skipped.
    """
    from agentpost.data.wikitext2 import articles
    from agentpost.models.tokenizer import load_tokenizer

    tok = load_tokenizer()
    windows, owner = [], []
    for i, text in enumerate(articles(split)):
        ids = tok(text)["input_ids"]
        n = min(chunks_per_article, (len(ids) - 1) // seq_len)
        for c in range(n):
            windows.append(ids[c * seq_len : c * seq_len + seq_len + 1])
            owner.append(i)
    if not windows:
        raise ValueError(f"no {split} article has {seq_len + 1} tokens")
    return torch.tensor(windows, dtype=torch.long), torch.tensor(owner, dtype=torch.long)


def sample_windows(stream: torch.Tensor, n: int, seq_len: int, gen: torch.Generator) -> torch.Tensor:
    """``n`` random windows of ``seq_len + 1`` tokens (inputs + next-token targets)."""
    if stream.numel() <= seq_len + 1:
        raise ValueError(f"the training stream ({stream.numel()} tokens) is shorter than a window ({seq_len + 1})")
    starts = torch.randint(0, stream.numel() - seq_len - 1, (n,), generator=gen)
    return torch.stack([stream[s : s + seq_len + 1] for s in starts.tolist()])


def fit(
    model: torch.nn.Module,
    stream: torch.Tensor,
    batch_sizes: list[int],
    lr: float,
    spec: TrainSpec,
    gen: torch.Generator,
) -> list[float]:
    """One stage: AdamW (fresh) over ``len(batch_sizes)`` updates; returns the training loss per update."""
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95), weight_decay=spec.weight_decay)
    model.train()
    losses = []
    for step, b in enumerate(batch_sizes):
        for group in opt.param_groups:
            group["lr"] = warmup_cosine(step, len(batch_sizes), lr, spec.warmup)
        batch = sample_windows(stream, b, spec.seq_len, gen).to(spec.device)
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), spec.clip)
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses


def sst_budget(model: SSTLM, spec: TrainSpec) -> float:
    """Training FLOPs of the two-stage SST schedule: stage 1 at the Prefiller's cost, stage 2 at the SST's."""
    return spec.batch_size * (
        spec.stage1_updates * training_flops_per_sequence(model.cfg.prefiller, spec.seq_len)
        + spec.stage2_updates * training_flops_per_sequence(model.cfg, spec.seq_len)
    )


def train_arm(
    kind: str, stream: torch.Tensor, spec: TrainSpec, lr: float, seed: int, **model_kwargs
) -> tuple[torch.nn.Module, dict]:
    """Train one arm (``sst``, ``dense_flops`` or ``dense_kv``) at the SST's training budget; returns (model, info).

    ``seed`` sets the initialisation and the stream of training windows (the same windows, in the same order,
    for every arm). ``info["init"]`` fingerprints what determines the weights the arm started from
    (:func:`agentpost.record.outcomes.init_fingerprint`: the SST's stage-1 Prefiller, which is the same
    initialisation as ``dense_kv`` at the same seed); ``info["updates"]`` counts the
    optimizer steps actually made.
    """
    if kind not in ARMS:
        raise ValueError(f"unknown arm {kind!r}; use one of {ARMS}")
    torch.set_num_threads(spec.threads)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed + 1)
    sst = build("sst", **model_kwargs).to(spec.device)
    budget = sst_budget(sst, spec)
    if kind == "sst":
        torch.manual_seed(seed)
        stage1 = DenseLM(sst.cfg.prefiller).to(spec.device)
        init = init_fingerprint(stage1, seed)
        losses = fit(stage1, stream, [spec.batch_size] * spec.stage1_updates, lr, spec, gen)
        model = expand(stage1, sst, spec.expansion_init)
        losses += fit(model, stream, [spec.batch_size] * spec.stage2_updates, lr, spec, gen)
        sizes, spent = [spec.batch_size] * spec.updates, budget
    else:
        torch.manual_seed(seed)
        model = build(kind, **{k: v for k, v in model_kwargs.items() if k in _DENSE_KEYS}).to(spec.device)
        init = init_fingerprint(model, seed)
        per_seq = training_flops_per_sequence(model.cfg, spec.seq_len)
        sizes = match_budget(budget, per_seq, spec.updates)
        losses = fit(model, stream, sizes, lr, spec, gen)
        spent = sum(sizes) * per_seq
    info = {
        "arm": kind,
        "lr": lr,
        "seed": seed,
        "init": init,
        "updates": len(losses),
        "sequences": sum(sizes),
        "train_flops": float(spent),
        "budget_error": relative_budget_error(budget, spent / sum(sizes), sizes),
        "final_train_loss": float(np.mean(losses[-10:])),
        "params": sum(p.numel() for p in model.parameters()),
        "spec": asdict(spec),
    }
    return model, info


@torch.no_grad()
def per_article_nll(model: torch.nn.Module, windows: torch.Tensor, owner: torch.Tensor, batch: int = 64) -> np.ndarray:
    """Mean next-token NLL (nats/token) per article over its windows (items of the paired comparison), in the
    order of ``torch.unique(owner)`` (the article indices: :func:`article_ids`)."""
    model.eval()
    device = next(model.parameters()).device
    per_window = []
    for i in range(0, windows.shape[0], batch):
        w = windows[i : i + batch].to(device)
        logits = model(w[:, :-1])
        nll = F.cross_entropy(logits.transpose(1, 2), w[:, 1:], reduction="none").mean(dim=1)
        per_window.append(nll)
    per_window = torch.cat(per_window).cpu()
    return np.array([float(per_window[owner == a].mean()) for a in article_ids(owner)])


def article_ids(owner: torch.Tensor) -> list[int]:
    """The article indices scored, in :func:`per_article_nll`'s order (stable item ids across seeds)."""
    return torch.unique(owner).tolist()
