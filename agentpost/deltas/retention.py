"""Which full-attention KV entries a stream keeps under a budget (spec ``papers/deltas.md``, "Retention").

Every policy keeps the attention sinks (the first ``n_sinks`` positions) and a recent window (the last
``n_recent`` entries) and fills the rest of the budget by its score. DeltaS (third-party reading of Algorithm 1)
scores each entry by the drift of the chunk it arrived in and fills the quota **per time bucket** (the middle
entries split by chunk arrival into ``buckets`` equal spans, ``quota // buckets`` each), then gives the quota left
unused by under-full buckets to the global top scores (``retention="bucketed"``, the default; ``"global"`` is plain
top-k). The alternatives share the interface: recency, random, key-norm (keep the *lowest* key norms, Devoto et al.
2024, "A Simple and Effective L2 Norm-Based Strategy for KV Cache Compression") and attention from the final query
(query-aware, an upper reference, not a streaming policy). Kept entries keep their original positions.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from agentpost.kv_retention import knorm_scores, select_top_b
from agentpost.registry import Registry

RETENTION_MODES = ("bucketed", "global")


@dataclass(frozen=True)
class CacheEntries:
    """What a policy may see of the ``N`` cached full-attention entries, in cache order."""

    positions: torch.Tensor              # [N] original positions (int64)
    chunk_ids: torch.Tensor              # [N] arrival chunk of each entry (int64)
    drift: torch.Tensor                  # [N] the drift of the entry's chunk
    key_norm: torch.Tensor               # [N] L2 norm of the entry's key (mean over heads and layers)
    attention: torch.Tensor | None = None  # [N] attention mass from the final query (query-aware reference only)

    def __post_init__(self):
        n = self.positions.numel()
        for name in ("chunk_ids", "drift", "key_norm") + (("attention",) if self.attention is not None else ()):
            if getattr(self, name).numel() != n:
                raise ValueError(f"CacheEntries.{name} has {getattr(self, name).numel()} entries, positions has {n}")

    def __len__(self) -> int:
        return self.positions.numel()

    def take(self, keep: torch.Tensor) -> "CacheEntries":
        pick = lambda x: None if x is None else x[keep]  # noqa: E731
        return CacheEntries(self.positions[keep], self.chunk_ids[keep], self.drift[keep], self.key_norm[keep],
                            pick(self.attention))


def _top(scores: torch.Tensor, candidates: torch.Tensor, k: int) -> torch.Tensor:
    """The ``k`` candidates (ascending indices) with the highest score; ties go to the later entry
    (:func:`agentpost.kv_retention.select_top_b`)."""
    if k <= 0 or candidates.numel() == 0:
        return candidates[:0]
    return candidates[select_top_b(scores[candidates], k)]


def select(entries: CacheEntries, budget: int, scores: torch.Tensor, *, n_sinks: int, n_recent: int,
           buckets: int | None = None) -> torch.Tensor:
    """Sorted indices of the kept entries: sinks + recent window + the best-scored middle entries.

    With ``buckets``, the middle quota is split over time buckets first and the unused part topped up globally.
    """
    n = len(entries)
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    if n <= budget:
        return torch.arange(n)
    sinks = torch.nonzero(entries.positions < entries.positions.min() + n_sinks).flatten()[:n_sinks]
    recent = torch.arange(max(0, n - n_recent), n)
    protected = torch.unique(torch.cat([sinks, recent]))
    if protected.numel() >= budget:  # the budget cannot even hold sinks + window: keep sinks, then the newest
        keep = torch.cat([sinks[:budget], torch.arange(n - max(0, budget - sinks[:budget].numel()), n)])
        return torch.unique(keep)[:budget]
    is_middle = torch.ones(n, dtype=torch.bool)
    is_middle[protected] = False
    middle = torch.nonzero(is_middle).flatten()
    quota = budget - protected.numel()
    chosen = middle[:0]
    if buckets:
        ids = entries.chunk_ids[middle]
        lo, hi = int(ids.min()), int(ids.max()) + 1
        edges = torch.linspace(lo, hi, buckets + 1)
        per_bucket = quota // buckets
        for b in range(buckets):
            in_bucket = middle[(ids >= edges[b]) & ((ids < edges[b + 1]) if b < buckets - 1 else (ids < hi))]
            chosen = torch.cat([chosen, _top(scores, in_bucket, per_bucket)])
    rest = middle[~torch.isin(middle, chosen)]
    chosen = torch.cat([chosen, _top(scores, rest, quota - chosen.numel())])
    return torch.sort(torch.cat([protected, chosen])).values


class RetentionPolicy:
    """Base: ``keep(entries, budget)`` -> sorted kept indices. Subclasses define :meth:`scores`."""

    name = "base"
    query_aware = False

    def __init__(self, *, n_sinks: int = 4, n_recent: int = 64):
        if n_sinks < 0 or n_recent < 0:
            raise ValueError(f"n_sinks and n_recent must be >= 0, got {n_sinks}, {n_recent}")
        self.n_sinks, self.n_recent = n_sinks, n_recent

    def scores(self, entries: CacheEntries) -> torch.Tensor:
        raise NotImplementedError

    def buckets(self) -> int | None:
        return None

    def keep(self, entries: CacheEntries, budget: int) -> torch.Tensor:
        return select(entries, budget, self.scores(entries), n_sinks=self.n_sinks, n_recent=self.n_recent,
                      buckets=self.buckets())


class DriftRetention(RetentionPolicy):
    """DeltaS: chunk drift, per-time-bucket quotas plus global top-up (spec ambiguity 5)."""

    name = "drift"

    def __init__(self, *, buckets: int = 4, retention: str = "bucketed", **kw):
        super().__init__(**kw)
        if retention not in RETENTION_MODES:
            raise ValueError(f"retention must be one of {RETENTION_MODES}, got {retention!r}")
        if buckets < 1:
            raise ValueError(f"buckets must be >= 1, got {buckets}")
        self.n_buckets, self.retention = buckets, retention

    def scores(self, entries):
        return entries.drift.float()

    def buckets(self):
        return self.n_buckets if self.retention == "bucketed" else None


class RecencyRetention(RetentionPolicy):
    name = "recency"

    def scores(self, entries):
        return entries.positions.float()


class RandomRetention(RetentionPolicy):
    name = "random"

    def __init__(self, *, seed: int = 0, **kw):
        super().__init__(**kw)
        self.generator = torch.Generator().manual_seed(seed)

    def scores(self, entries):
        return torch.rand(len(entries), generator=self.generator)


class KeyNormRetention(RetentionPolicy):
    """Keep the lowest key norms (Devoto et al. 2024; :func:`agentpost.kv_retention.knorm_scores`, which ActKV's
    ``knorm`` baseline uses too)."""

    name = "key_norm"

    def scores(self, entries):
        return knorm_scores(entries.key_norm.float()[:, None]).float()


class AttentionRetention(RetentionPolicy):
    """Attention mass from the final query: query-aware, so only an upper reference for a streaming policy."""

    name = "attention"
    query_aware = True

    def scores(self, entries):
        if entries.attention is None:
            raise ValueError("attention retention needs CacheEntries.attention (the final query's attention)")
        return entries.attention.float()


POLICIES = Registry("retention policy", {p.name: p for p in (DriftRetention, RecencyRetention, RandomRetention,
                                                               KeyNormRetention, AttentionRetention)})


def make_policy(name: str, **kwargs) -> RetentionPolicy:
    """A retention policy by registry name (``drift``, ``recency``, ``random``, ``key_norm``, ``attention``)."""
    return POLICIES.lookup(name)(**kwargs)
