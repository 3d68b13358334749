"""Which full-attention KV entries a stream keeps under a budget (spec ``papers/deltas.md``, "Retention").

Every policy keeps the attention sinks (the first ``n_sinks`` entries, the first positions of the stream) and a
recent window (the last ``n_recent`` entries) and fills the rest of the budget by its score: the policies are
scorers of the one KV-retention core (:class:`agentpost.kv_retention.Scorer`, context ``"deltas"``, registered in
:data:`agentpost.kv_retention.SCORERS`) and its one selector (:func:`agentpost.kv_retention.select`) keeps the
entries. DeltaS (third-party reading of Algorithm 1) scores each entry by the drift of the chunk it arrived in and fills the quota **per time bucket** (the middle
entries split by chunk arrival into ``buckets`` equal spans, ``quota // buckets`` each), then gives the quota left
unused by under-full buckets to the global top scores (``retention="bucketed"``, the default; ``"global"`` is plain
top-k). The alternatives share the interface: recency, random, key-norm (keep the *lowest* key norms, Devoto et al.
2024, "A Simple and Effective L2 Norm-Based Strategy for KV Cache Compression") and attention from the final query
(query-aware, an upper reference, not a streaming policy). Kept entries keep their original positions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import torch

from agentpost.kv_retention import Scorer, knorm_scores, make_scorer, register

RETENTION_MODES = ("bucketed", "global")


@dataclass(frozen=True)
class CacheEntries:
    """What a policy may see of the ``N`` cached full-attention entries, in cache order."""

    positions: torch.Tensor  # [N] original positions (int64)
    chunk_ids: torch.Tensor  # [N] arrival chunk of each entry (int64)
    drift: torch.Tensor  # [N] the drift of the entry's chunk
    key_norm: torch.Tensor  # [N] L2 norm of the entry's key (mean over heads and layers)
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
        return CacheEntries(
            self.positions[keep], self.chunk_ids[keep], self.drift[keep], self.key_norm[keep], pick(self.attention)
        )

    def extend(self, new: "CacheEntries") -> "CacheEntries":
        """These entries followed by ``new`` (a chunk's arrivals; no attention reference on either)."""
        if self.attention is not None or new.attention is not None:
            raise ValueError("CacheEntries.extend: entries with an attention reference cannot be extended")
        return CacheEntries(
            *(torch.cat([getattr(self, f), getattr(new, f)]) for f in ("positions", "chunk_ids", "drift", "key_norm"))
        )


@dataclass(eq=False, kw_only=True)
class RetentionPolicy(Scorer):
    """Base of this chapter's scorers (context ``"deltas"``): ``keep(entries, budget)`` -> sorted kept indices;
    subclasses define :meth:`score`. ``n_sinks`` / ``n_recent``: the entries every policy keeps."""

    context: ClassVar[str] = "deltas"
    query_aware: ClassVar[bool] = False
    n_sinks: int = 4
    n_recent: int = 64

    def __post_init__(self) -> None:
        if self.n_sinks < 0 or self.n_recent < 0:
            raise ValueError(f"n_sinks and n_recent must be >= 0, got {self.n_sinks}, {self.n_recent}")

    def score(self, entries: CacheEntries) -> torch.Tensor:
        raise NotImplementedError

    def protect(self, n, budget):
        return self.n_sinks, self.n_recent

    def keep(self, entries: CacheEntries, budget: int) -> torch.Tensor:
        return self.select(self.score(entries), budget, bucket_ids=entries.chunk_ids)


@register
@dataclass(eq=False, kw_only=True)
class DriftRetention(RetentionPolicy):
    """DeltaS: chunk drift, per-time-bucket quotas plus global top-up (our reading of the paper's budget split, which it
    leaves open)."""

    name: ClassVar[str] = "drift"
    buckets: int = 4
    retention: str = "bucketed"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.retention not in RETENTION_MODES:
            raise ValueError(f"retention must be one of {RETENTION_MODES}, got {self.retention!r}")
        if self.buckets < 1:
            raise ValueError(f"buckets must be >= 1, got {self.buckets}")

    def score(self, entries):
        return entries.drift.float()

    def bucket_count(self):
        return self.buckets if self.retention == "bucketed" else None


@register
@dataclass(eq=False, kw_only=True)
class RecencyRetention(RetentionPolicy):
    name: ClassVar[str] = "recency"

    def score(self, entries):
        return entries.positions.float()


@register
@dataclass(eq=False, kw_only=True)
class RandomRetention(RetentionPolicy):
    name: ClassVar[str] = "random"
    seed: int = 0
    generator: torch.Generator = field(init=False, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.generator = torch.Generator().manual_seed(self.seed)

    def score(self, entries):
        return torch.rand(len(entries), generator=self.generator)


@register
@dataclass(eq=False, kw_only=True)
class KeyNormRetention(RetentionPolicy):
    """Keep the lowest key norms (Devoto et al. 2024; :func:`agentpost.kv_retention.knorm_scores`, which ActKV's
    ``knorm`` baseline uses too)."""

    name: ClassVar[str] = "key_norm"

    def score(self, entries):
        return knorm_scores(entries.key_norm.float()[:, None]).float()


@register
@dataclass(eq=False, kw_only=True)
class AttentionRetention(RetentionPolicy):
    """Attention mass from the final query: query-aware, so only an upper reference for a streaming policy."""

    name: ClassVar[str] = "attention"
    query_aware: ClassVar[bool] = True

    def score(self, entries):
        if entries.attention is None:
            raise ValueError("attention retention needs CacheEntries.attention (the final query's attention)")
        return entries.attention.float()


def make_policy(name: str, **kwargs) -> RetentionPolicy:
    """A retention policy by registry name (``drift``, ``recency``, ``random``, ``key_norm``, ``attention``)."""
    return make_scorer(name, "deltas", **kwargs)
