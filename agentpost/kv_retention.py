"""The shared core of KV-cache retention: the one top-B selector with its tie rule, used by ActKV (Algorithm 1's
keep set, its baselines and the paged kernels' keep mask) and DeltaS (the scored middle of its retention policies),
and the scorers both chapters use (the key-norm scorer of Devoto et al. 2024, kvpress ``KnormPress``).

Rule (actkv.md ambiguity 8; DeltaS's retention keeps the same): keep the ``budget`` highest scores; among equal
scores the later entry (higher index, the more recent one while index order is recency order) wins; ``+inf``
forces an entry in. kvpress (``kvpress/presses/scorer_press.py::ScorerPress``) keeps ``topk`` of its scores the same
way but leaves ties to ``torch.topk``; here they are fixed so that runs are reproducible across devices.
"""

from __future__ import annotations

import torch


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


def knorm_scores(keys: torch.Tensor) -> torch.Tensor:
    """Key-norm retention score: minus the L2 norm of each key over the last dim, so the *lowest* norms are kept
    (Devoto et al. 2024; kvpress ``kvpress/presses/knorm_press.py::KnormPress.score``). ``keys`` ``(..., N, d)``
    -> ``(..., N)``; a precomputed norm ``(..., N)`` passes as ``keys=norm[..., None]``."""
    return -keys.to(torch.float64).norm(dim=-1)
