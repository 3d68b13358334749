"""Event-level credit on tokens and the clipped loss (toolsearcher.md, eqs. 6-7), built on :mod:`agentpost.rl`.

Each maximal run of 1s in a rollout's loss mask is one assistant turn; search turn t gets A_search[t], the answer
turn gets the gated A_sel; tool-response tokens have mask 0, so they carry no advantage and enter neither the
policy-gradient nor the KL term. Defaults follow the official verl fork: per-token ratio, eps 0.2, dual clip
c = 3, k3 KL in the loss as verl's ``low_var_kl`` (exponent clamped to +-20, value to +-10) with beta = 0.001,
token-mean aggregation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch

from agentpost.rl import SegmentMismatch, broadcast_segment_values, clipped_policy_loss, segment_ids


@dataclass(frozen=True)
class LossConfig:
    clip_eps: float = 0.2
    dual_clip_c: float | None = 3.0
    kl_coef: float = 0.001
    kl_kind: str = "low_var_kl"  # the official config's kl_loss_type; "k3" is the unclamped estimator
    kl_clamp: float | None = None  # None: the kind's own (10 for low_var_kl, none for k3)
    agg_mode: str = "token_mean"
    ratio_level: str = "token"  # the paper leaves it open: "token" (official code) or "segment"


def token_advantages(
    mask: torch.Tensor, factors: Sequence[Sequence[float]], on_mismatch: str = "drop"
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Step 6: place each rollout's factor list on its assistant segments.

    Returns (advantages [R, T], the mask with dropped rows zeroed, number of dropped rows). ``on_mismatch``
    (the paper does not say what happens then): ``drop`` removes a rollout whose segment count differs from its factor
    count and counts it; ``raise`` re-raises :class:`agentpost.rl.SegmentMismatch`.
    """
    if on_mismatch not in ("drop", "raise"):
        raise ValueError(f"on_mismatch must be 'drop' or 'raise', got {on_mismatch!r}")
    adv = torch.zeros(mask.shape, dtype=torch.float64)
    keep = mask.clone()
    dropped = 0
    for i, row in enumerate(factors):
        try:
            adv[i] = broadcast_segment_values(mask[i : i + 1], [row])[0]
        except SegmentMismatch:
            if on_mismatch == "raise":
                raise SegmentMismatch(f"rollout {i}: segments do not match its {len(row)} credit factors") from None
            keep[i] = 0
            dropped += 1
    return adv, keep, dropped


def event_level_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    logp_ref: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    cfg: LossConfig,
) -> tuple[torch.Tensor, dict]:
    """Eq. 7: -token_mean(clipped objective with dual clip) + beta * token_mean(k3 KL), over masked tokens only
    (the KL as configured: ``low_var_kl`` by default)."""
    return clipped_policy_loss(
        logp,
        logp_old,
        logp_ref,
        adv.to(logp.dtype),
        mask,
        eps_low=cfg.clip_eps,
        eps_high=cfg.clip_eps,
        dual_clip_c=cfg.dual_clip_c,
        kl_coef=cfg.kl_coef,
        kl_kind=cfg.kl_kind,
        kl_clamp=cfg.kl_clamp,
        agg_mode=cfg.agg_mode,
        ratio_level=cfg.ratio_level,
        segment_ids=segment_ids(mask) if cfg.ratio_level == "segment" else None,
    )
