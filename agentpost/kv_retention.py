"""The one KV-retention core both KV chapters use (in the spirit of NVIDIA kvpress: one small class per method behind
one interface, one registry): the selector, the scorer base and the scorer registry.

- :func:`select` — the one selector. It owns the budget, the attention sinks (the first ``n_sinks`` entries), the
  recent window (the last ``n_recent``), the tie rule and ``+inf`` forcing; DeltaS's per-time-bucket quotas are an
  option of it. :func:`select_top_b` is its top-B step.
- :class:`Scorer` — the base of every scorer: a dataclass holding the method's parameters that scores entries
  (higher = keep) and tells the selector how many sinks and recent entries to protect (:meth:`Scorer.protect`).
  A scorer scores one chapter's *view* of a cache (``context``): ``"actkv"`` one layer of a live decoding cache
  (:class:`agentpost.actkv.policies.KVPolicy`: StreamingLLM, H2O, SnapKV, R-KV, key norm, ActKV's LRFU),
  ``"deltas"`` the cut of a stream's cache (:class:`agentpost.deltas.retention.RetentionPolicy`: drift, recency,
  random, key norm, attention).
- :data:`SCORERS` — the one registry every scorer name resolves through (:func:`make_scorer`); the scorers register
  themselves when their chapter's module is imported.
- :func:`knorm_scores` — the key-norm score both chapters use (Devoto et al. 2024, kvpress ``KnormPress``).

Tie rule (neither paper gives one; ActKV's and DeltaS's retention keep the same): keep the ``budget`` highest scores;
among equal scores the later entry (higher index, the more recent one while index order is recency order) wins; ``+inf``
forces an entry in. kvpress (``kvpress/presses/scorer_press.py::ScorerPress``) keeps ``topk`` of its scores the same
way but leaves ties to ``torch.topk``; here they are fixed so that runs are reproducible across devices.
"""

from __future__ import annotations

from typing import ClassVar, TypeVar

import torch

from agentpost.registry import Registry, UnknownName


def select_top_b(scores: torch.Tensor, budget: int) -> torch.Tensor:
    """Indices (ascending) of the ``budget`` highest ``scores`` along the last dim; ties keep more recent entries.

    ``scores`` is ``(..., N)``; returns ``(..., min(budget, N))``. ``+inf`` forces an entry in.
    """
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    n = scores.shape[-1]
    if budget >= n:
        return torch.arange(n, device=scores.device).expand(*scores.shape[:-1], n).clone()
    rev = torch.flip(scores, dims=[-1])  # stable sort on the reversed row puts later indices first among ties
    _, order = torch.sort(rev, dim=-1, descending=True, stable=True)
    keep = n - 1 - order[..., :budget]
    return torch.sort(keep, dim=-1).values


def protected_mask(n: int, n_sinks: int, n_recent: int) -> torch.Tensor:
    """``(N,)`` mask of the entries :func:`select` protects: the first ``n_sinks`` and the last ``n_recent``."""
    if n_sinks < 0 or n_recent < 0:
        raise ValueError(f"n_sinks and n_recent must be >= 0, got {n_sinks}, {n_recent}")
    mask = torch.zeros(n, dtype=torch.bool)
    mask[: min(n_sinks, n)] = True
    mask[max(0, n - n_recent) :] = True
    return mask


def _top(scores: torch.Tensor, candidates: torch.Tensor, k: int) -> torch.Tensor:
    """The ``k`` ``candidates`` (ascending) with the highest ``scores`` ``(N,)``, by :func:`select_top_b`."""
    if k <= 0 or candidates.numel() == 0:
        return candidates[:0]
    return candidates[select_top_b(scores[candidates], k)]


def _bucketed(
    scores: torch.Tensor, middle: torch.Tensor, quota: int, bucket_ids: torch.Tensor, buckets: int
) -> torch.Tensor:
    """DeltaS's quota fill for one row ``scores`` ``(N,)`` (our reading of the paper's budget split, which it leaves
    open): the ``middle`` entries split by ``bucket_ids`` (arrival chunk) into ``buckets`` equal spans, ``quota //
    buckets`` best of each, then the quota left unused by under-full buckets to the best of the rest."""
    ids = bucket_ids[middle]
    lo, hi = int(ids.min()), int(ids.max()) + 1
    edges = torch.linspace(lo, hi, buckets + 1)
    chosen = middle[:0]
    for b in range(buckets):
        in_bucket = middle[(ids >= edges[b]) & ((ids < edges[b + 1]) if b < buckets - 1 else (ids < hi))]
        chosen = torch.cat([chosen, _top(scores, in_bucket, quota // buckets)])
    rest = middle[~torch.isin(middle, chosen)]
    return torch.cat([chosen, _top(scores, rest, quota - chosen.numel())])


def select(
    scores: torch.Tensor,
    budget: int,
    *,
    n_sinks: int = 0,
    n_recent: int = 0,
    bucket_ids: torch.Tensor | None = None,
    buckets: int | None = None,
) -> torch.Tensor:
    """The one selector: indices (ascending) of the entries kept under ``budget``, ``(..., min(budget, N))`` for
    ``scores`` ``(..., N)`` (one keep set per row, e.g. per KV head).

    The first ``n_sinks`` and the last ``n_recent`` entries are protected; the rest of the budget goes to the best
    ``scores`` of the others by :func:`select_top_b` (ties to the later entry, ``+inf`` forced), or, with
    ``buckets``, per time bucket of ``bucket_ids`` ``(N,)`` first (:func:`_bucketed`). A budget that cannot hold
    all protected entries keeps the sinks first, then the newest entries.
    """
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    if buckets is not None and (buckets < 1 or bucket_ids is None):
        raise ValueError(f"buckets must be >= 1 and come with bucket_ids, got buckets={buckets}")
    n, lead = scores.shape[-1], scores.shape[:-1]
    protected = protected_mask(n, n_sinks, n_recent).to(scores.device)
    if n <= budget:
        return select_top_b(scores, budget)
    n_protected = int(protected.sum())
    if n_protected >= budget:  # the budget cannot even hold sinks + window: keep the sinks, then the newest
        sinks = min(n_sinks, budget)
        keep = torch.cat([torch.arange(sinks), torch.arange(n - (budget - sinks), n)]).to(scores.device)
        return keep.expand(*lead, budget).clone()
    kept = torch.nonzero(protected).flatten()
    middle = torch.nonzero(~protected).flatten()
    quota = budget - n_protected
    if buckets is None:
        chosen = middle[select_top_b(scores[..., middle], quota)]
    else:
        rows = scores.reshape(-1, n)
        chosen = torch.stack([_bucketed(row, middle, quota, bucket_ids.to(scores.device), buckets) for row in rows])  # type: ignore[union-attr]  # given with buckets
        chosen = chosen.reshape(*lead, quota)
    return torch.sort(torch.cat([kept.expand(*lead, n_protected), chosen], dim=-1), dim=-1).values


def knorm_scores(keys: torch.Tensor) -> torch.Tensor:
    """Key-norm retention score: minus the L2 norm of each key over the last dim, so the *lowest* norms are kept
    (Devoto et al. 2024; kvpress ``kvpress/presses/knorm_press.py::KnormPress.score``). ``keys`` ``(..., N, d)``
    -> ``(..., N)``; a precomputed norm ``(..., N)`` passes as ``keys=norm[..., None]``."""
    return -keys.to(torch.float64).norm(dim=-1)


# ---------------------------------------------------------------------------------------------- scorers
class Scorer:
    """Base of every retention scorer; subclasses are dataclasses of the method's parameters.

    ``score(*view)`` returns ``(G, N)`` or ``(N,)`` scores (higher = keep) of the entries of its context's view
    (``context``: ``"actkv"`` ``score(layer, keys)``, ``"deltas"`` ``score(entries)``); :meth:`protect` says how
    many sinks and recent entries :func:`select` protects; :meth:`select` keeps the top of the scores under it.
    """

    name: ClassVar[str] = ""
    context: ClassVar[str] = ""

    def score(self, *view) -> torch.Tensor:
        raise NotImplementedError

    def protect(self, n: int, budget: int) -> tuple[int, int]:
        """``(n_sinks, n_recent)`` protected among ``n`` scored entries at ``budget``; none by default."""
        return 0, 0

    def bucket_count(self) -> int | None:
        """Time buckets the quota is spread over (DeltaS's budget split); ``None``: one global top-k."""
        return None

    def select(self, scores: torch.Tensor, budget: int, bucket_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The entries :func:`select` keeps of ``scores`` ``(..., N)`` at ``budget`` with this scorer's protection."""
        n_sinks, n_recent = self.protect(scores.shape[-1], budget)
        buckets = self.bucket_count()
        return select(
            scores,
            budget,
            n_sinks=n_sinks,
            n_recent=n_recent,
            buckets=buckets,
            bucket_ids=bucket_ids if buckets else None,
        )


SCORERS = Registry("KV retention scorer")
S = TypeVar("S", bound=type[Scorer])


def register(cls: S) -> S:
    """Class decorator: register a scorer in :data:`SCORERS` under its ``name``."""
    return SCORERS.register(cls.name)(cls)


def scorers(context: str) -> dict[str, type[Scorer]]:
    """The registered scorers of one ``context`` (``"actkv"``, ``"deltas"``), name -> class."""
    return {name: cls for name, cls in sorted(SCORERS.items()) if cls.context == context}


def make_scorer(name: str, context: str, **kwargs) -> Scorer:
    """A scorer of ``context`` by its registry name, built with ``kwargs``; a name of another context (or none)
    raises :class:`agentpost.registry.UnknownName` listing the context's names."""
    cls = SCORERS.lookup(name)
    if cls.context != context:
        raise UnknownName(
            f"KV retention scorer {name!r} scores {cls.context} caches, not {context}; "
            f"{context} scorers: {sorted(scorers(context))}"
        )
    return cls(**kwargs)
