"""Training prefixes, the training loop, full-catalogue evaluation and the popularity baseline.

Every training prefix (user, t) with t >= 1 is one example: history x_1..x_t (the newest ``window`` kept,
left-padded), positives x_{t+1..t+K} (muser.md section 6). Ranking is over the **whole catalogue** with the user's
already-seen items removed (no sampled candidates); ties are broken by item index (lower first), so a constant
score ranks deterministically and never optimistically.

Device: training and evaluation run on ``device`` ("cpu", the default, or "cuda"). The model is built and
fingerprinted on the CPU and then moved, batches are cut on the CPU and moved, and the sampled negatives are drawn
from a CPU generator and moved, so a seed gives the same initial weights, batch order and negatives on both devices
(dropout masks come from the device's own generator, so CUDA results match the CPU's within float tolerance, not
bit for bit). On the CPU nothing is moved: the results are the ones this module gave before it had a device.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch
from tqdm.auto import tqdm

from agentpost.record.outcomes import init_fingerprint
from agentpost.muser.interests import orthogonality_penalty
from agentpost.muser.loss import NEGATIVES, alignment_infonce, next_k_contrastive
from agentpost.muser.model import MuSeRConfig, build_model


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 2
    batch_size: int = 256
    lr: float = 3e-3
    next_k: int = 3  # K positives per prefix
    negatives: str = "both"  # in_batch, sampled, both or full
    n_sampled: int = 256  # uniformly sampled negatives per batch (shared by its rows)
    align_tau: float = 0.1

    def __post_init__(self):
        if self.negatives not in NEGATIVES:
            raise ValueError(f"negatives must be one of {NEGATIVES}, got {self.negatives!r}")
        if min(self.epochs, self.batch_size, self.next_k) < 1 or self.lr <= 0:
            raise ValueError("epochs, batch_size, next_k must be >= 1 and lr > 0")


def resolve_device(device) -> torch.device:
    """``device`` ("cpu", "cuda", "cuda:N" or a :class:`torch.device`) checked: CUDA must be available if asked for."""
    dev = torch.device(device)
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"device must be cpu or cuda, got {device!r}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for, but torch.cuda.is_available() is False on this machine")
    return dev


def model_device(model: torch.nn.Module) -> torch.device:
    """Where a model's weights are (every model here has parameters)."""
    return next(model.parameters()).device


def windows(seqs: list[np.ndarray], users: np.ndarray, ends: np.ndarray, window: int) -> np.ndarray:
    """(B, window) item ids: the ``window`` items before position ``ends`` of each user's sequence, left-padded."""
    out = np.zeros((len(users), window), dtype=np.int64)
    for r, (u, e) in enumerate(zip(users, ends)):
        h = seqs[u][max(0, e - window) : e]
        if len(h):
            out[r, window - len(h) :] = h
    return out


def history_windows(histories: list[np.ndarray], window: int) -> np.ndarray:
    """(B, window) left-padded windows of explicit histories."""
    return windows(histories, np.arange(len(histories)), np.array([len(h) for h in histories]), window)


def prefixes(train: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """All (user, t) with 1 <= t < len(sequence): history x_1..x_t, next item x_{t+1}."""
    users = np.concatenate([np.full(max(len(s) - 1, 0), u) for u, s in enumerate(train)]).astype(np.int64)
    ends = np.concatenate([np.arange(1, len(s)) for s in train if len(s) > 1]).astype(np.int64)
    return users, ends


def next_items(train: list[np.ndarray], users: np.ndarray, ends: np.ndarray, k: int) -> np.ndarray:
    """(B, k) items x_{t+1..t+k}; 0 where the sequence ends."""
    out = np.zeros((len(users), k), dtype=np.int64)
    for r, (u, e) in enumerate(zip(users, ends)):
        nxt = train[u][e : e + k]
        out[r, : len(nxt)] = nxt
    return out


def batch_loss(
    model, hist: torch.Tensor, pos: torch.Tensor, cfg: MuSeRConfig, tc: TrainConfig, gen: torch.Generator
) -> tuple[torch.Tensor, dict]:
    """Next-K contrastive loss (+ orthogonality + alignment) of one batch (on the device of ``hist``/``pos``; the
    sampled negatives are drawn from ``gen``, a CPU generator, and moved there)."""
    u = model(hist)
    n = cfg.n_items
    pos_mask = pos > 0
    if tc.negatives == "full":
        neg_ids = torch.arange(1, n + 1, device=pos.device)
    else:
        parts = []
        if tc.negatives in ("in_batch", "both"):
            parts.append(pos[pos_mask].unique())
        if tc.negatives in ("sampled", "both"):
            parts.append(torch.randint(1, n + 1, (tc.n_sampled,), generator=gen).to(pos.device))
        neg_ids = torch.cat(parts)
    item_vecs = model.items(torch.cat([pos.reshape(-1), neg_ids]))
    pos_vecs = item_vecs[: pos.numel()].view(*pos.shape, -1)
    neg_vecs = item_vecs[pos.numel() :]
    s_pos = model.score(u, pos_vecs)
    s_neg = model.score(u, neg_vecs)
    neg_mask = ~(neg_ids[None, None, :] == pos[:, :, None]).any(1)  # a user's own positives are not negatives
    loss = next_k_contrastive(s_pos, s_neg, pos_mask, neg_mask)
    parts = {"next_k": loss.item()}
    if cfg.kind == "muser" and cfg.ortho_lambda > 0 and cfg.num_interests > 1:
        ortho = orthogonality_penalty(u, cfg.ortho_form)
        loss = loss + cfg.ortho_lambda * ortho
        parts["ortho"] = ortho.item()
    if cfg.kind == "muser" and cfg.align_weight > 0:
        ids = torch.cat([pos[pos_mask], hist[hist > 0]]).unique()
        a, b = model.items.views(ids)
        align = alignment_infonce(a, b, tc.align_tau)
        loss = loss + cfg.align_weight * align
        parts["align"] = align.item()
    return loss, parts


class Trained(NamedTuple):
    """A trained arm: the model (eval mode), per-epoch mean losses, wall seconds, the optimiser steps actually
    made and the fingerprint of the weights it started from (the arm facts of :func:`record_outcomes`)."""

    model: torch.nn.Module
    history: list[dict]
    wall_s: float
    updates: int
    checkpoint: str


def train_model(
    cfg: MuSeRConfig,
    tc: TrainConfig,
    train: list[np.ndarray],
    seed: int,
    semantic=None,
    progress: bool = True,
    device="cpu",
) -> Trained:
    """Train one arm from scratch at ``seed`` (initialisation, batch order and sampled negatives) on ``device``; the
    trained model stays there."""
    dev = resolve_device(device)
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    gen = torch.Generator().manual_seed(seed)
    model = build_model(cfg, semantic)
    checkpoint = init_fingerprint(model, seed)  # what determines the starting weights, not their floats
    model.to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=tc.lr)
    users, ends = prefixes(train)
    if len(users) == 0:
        raise ValueError("no training prefixes: every training sequence has fewer than 2 items")
    hist_all = windows(train, users, ends, model.window)
    pos_all = next_items(train, users, ends, tc.next_k)
    steps = tc.epochs * int(np.ceil(len(users) / tc.batch_size))
    history, updates, t0 = [], 0, time.perf_counter()
    model.train()
    with tqdm(total=steps, desc=f"train {cfg.kind}", disable=not progress, leave=False) as bar:
        for epoch in range(tc.epochs):
            order = rng.permutation(len(users))
            sums: dict[str, float] = {}
            for start in range(0, len(order), tc.batch_size):
                idx = order[start : start + tc.batch_size]
                loss, parts = batch_loss(
                    model, torch.from_numpy(hist_all[idx]).to(dev), torch.from_numpy(pos_all[idx]).to(dev), cfg, tc, gen
                )
                opt.zero_grad()
                loss.backward()
                opt.step()
                updates += 1
                for k, v in parts.items():
                    sums[k] = sums.get(k, 0.0) + v * len(idx)
                bar.update(1)
            history.append({"epoch": epoch + 1, **{k: v / len(users) for k, v in sums.items()}})
    model.eval()
    return Trained(model, history, time.perf_counter() - t0, updates, checkpoint)


def target_ranks(scores: torch.Tensor, targets: torch.Tensor, seen: list[np.ndarray]) -> np.ndarray:
    """0-based rank of each target among all items 1..N (``scores`` (B, N) for items 1..N), seen items removed,
    ties broken by item index. Computed on the device of ``scores``; the ranks come back to the CPU (numpy) here,
    the one place where evaluation leaves the device."""
    s = scores.clone()
    for r, h in enumerate(seen):
        if len(h):
            s[r, torch.as_tensor(h - 1, device=s.device)] = float("-inf")
    t = targets.to(s.device) - 1
    st = s.gather(1, t[:, None])
    idx = torch.arange(s.shape[1], device=s.device)[None, :]
    better = (s > st) | ((s == st) & (idx < t[:, None]))
    return better.sum(1).cpu().numpy()


def ranking_metrics(ranks: np.ndarray, ks=(10, 50)) -> dict[str, np.ndarray]:
    """Per-user Recall@K = 1[rank < K] and NDCG@K = 1[rank < K] / log2(rank + 2) (one relevant item)."""
    ranks = np.asarray(ranks)
    out = {}
    for k in ks:
        hit = ranks < k
        out[f"recall@{k}"] = hit.astype(np.float64)
        out[f"ndcg@{k}"] = np.where(hit, 1.0 / np.log2(ranks + 2.0), 0.0)
    return out


@torch.no_grad()
def evaluate(
    model, histories: list[np.ndarray], targets: np.ndarray, *, batch_size: int = 512, ks=(10, 50)
) -> dict[str, np.ndarray]:
    """Full-catalogue per-user metrics of a trained model, computed on the model's device."""
    dev = model_device(model)
    items = model.items.all_items()
    ranks = []
    for s in range(0, len(targets), batch_size):
        h = histories[s : s + batch_size]
        u = model(torch.from_numpy(history_windows(h, model.window)).to(dev))
        ranks.append(target_ranks(model.score(u, items), torch.as_tensor(targets[s : s + batch_size]), h))
    return ranking_metrics(np.concatenate(ranks), ks)


def popularity_metrics(
    train: list[np.ndarray], n_items: int, histories: list[np.ndarray], targets: np.ndarray, ks=(10, 50)
) -> dict[str, np.ndarray]:
    """Popularity baseline: score = training interaction count, same full-catalogue ranking."""
    counts = np.bincount(np.concatenate(train), minlength=n_items + 1)[1:].astype(np.float64)
    ranks = []
    for s in range(0, len(targets), 1024):
        h = histories[s : s + 1024]
        sc = torch.from_numpy(np.tile(counts, (len(h), 1)))
        ranks.append(target_ranks(sc, torch.as_tensor(targets[s : s + 1024]), h))
    return ranking_metrics(np.concatenate(ranks), ks)
