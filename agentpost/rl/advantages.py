"""Group-normalised advantage estimators (rl-primitives.md, section 1), registered by name.

References (semantics only): verl ``verl/trainer/ppo/core_algos.py::compute_grpo_outcome_advantage`` (unbiased
std, eps 1e-6, singleton group -> mean 0 / std 1, ``norm_adv_by_std_in_grpo=False`` = Dr.GRPO); TRL
``trl/trainer/grpo_trainer.py::_generate_and_score_completions`` (``scale_rewards in {group, batch, none}``);
OpenRLHF ``experience_maker.py`` (``rloo``).
"""

from __future__ import annotations

from typing import Sequence

import torch

from agentpost.registry import Registry

#: name -> advantage estimator ``f(rewards, group_ids, **kw) -> advantages``.
ADVANTAGE_ESTIMATORS = Registry("advantage estimator")
register_advantage = ADVANTAGE_ESTIMATORS.register
get_advantage = ADVANTAGE_ESTIMATORS.lookup


def _as_inputs(rewards, group_ids) -> tuple[torch.Tensor, torch.Tensor]:
    r = torch.as_tensor(rewards, dtype=torch.float64) if not torch.is_tensor(rewards) else rewards.to(torch.float64)
    g = torch.as_tensor(group_ids) if not torch.is_tensor(group_ids) else group_ids
    if r.ndim != 1 or g.ndim != 1 or r.shape != g.shape:
        raise ValueError(
            f"rewards and group_ids must be 1-D of equal length, got {tuple(r.shape)} and {tuple(g.shape)}"
        )
    if not torch.isfinite(r).all():
        raise ValueError("rewards contain non-finite values")
    return r, g


def group_stats(values: torch.Tensor, *, std_ddof: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and standard deviation along dim 0 (``std_ddof`` = 1 is Bessel's correction). Works column-wise."""
    if std_ddof not in (0, 1):
        raise ValueError(f"std_ddof must be 0 or 1, got {std_ddof}")
    mean = values.mean(dim=0)
    n = values.shape[0]
    if n - std_ddof <= 0:
        return mean, torch.full_like(mean, float("nan"))
    var = ((values - mean) ** 2).sum(dim=0) / (n - std_ddof)
    return mean, var.sqrt()


@register_advantage("grpo")
def group_advantage(
    rewards: Sequence[float] | torch.Tensor,
    group_ids: Sequence | torch.Tensor,
    *,
    scale: str = "group",
    std_ddof: int = 1,
    eps: float = 1e-6,
    singleton: str = "zero_mean_unit_std",
) -> torch.Tensor:
    """A_i = (r_i - mean_g r) / (std r + eps), the std taken over the group (``group``), the batch (``batch``) or
    not at all (``none``, the "no std" / Dr.GRPO variant). ``singleton``: a one-rollout group gets mean 0 / std 1
    (verl, so A = r) or advantage 0 (``zero``). Returns float64 of the rewards' shape.
    """
    if scale not in ("group", "batch", "none"):
        raise ValueError(f"scale must be one of group/batch/none, got {scale!r}")
    if singleton not in ("zero_mean_unit_std", "zero"):
        raise ValueError(f"singleton must be 'zero_mean_unit_std' or 'zero', got {singleton!r}")
    r, g = _as_inputs(rewards, group_ids)
    adv = torch.zeros_like(r)
    batch_std = group_stats(r, std_ddof=std_ddof)[1] if scale == "batch" else None
    for gid in torch.unique(g):
        idx = (g == gid).nonzero(as_tuple=True)[0]
        rg = r[idx]
        if rg.numel() == 1:
            adv[idx] = rg if singleton == "zero_mean_unit_std" else 0.0
            continue
        mean, std = group_stats(rg, std_ddof=std_ddof)
        centred = rg - mean
        if scale == "group":
            adv[idx] = centred / (std + eps)
        elif scale == "batch":
            adv[idx] = centred / (batch_std + eps)  # type: ignore[operator]  # set when scale == "batch"
        else:
            adv[idx] = centred
    return adv


@register_advantage("grpo_no_std")
def dr_grpo_advantage(rewards, group_ids, *, singleton: str = "zero_mean_unit_std") -> torch.Tensor:
    """Mean-centred only: A_i = r_i - mean_g r (Dr.GRPO; verl ``norm_adv_by_std_in_grpo=False``).

    A one-rollout group follows verl ``verl/trainer/ppo/core_algos.py::compute_grpo_outcome_advantage``
    (mean 0, std 1 for a group of one, so A = r); ``singleton="zero"`` gives it advantage 0 instead.
    """
    return group_advantage(rewards, group_ids, scale="none", singleton=singleton)


@register_advantage("rloo")
def rloo_advantage(rewards, group_ids) -> torch.Tensor:
    """Leave-one-out baseline: A_i = r_i - (1/(G-1)) sum_{j != i} r_j; a singleton group gets 0."""
    r, g = _as_inputs(rewards, group_ids)
    adv = torch.zeros_like(r)
    for gid in torch.unique(g):
        idx = (g == gid).nonzero(as_tuple=True)[0]
        n = idx.numel()
        if n > 1:
            rg = r[idx]
            adv[idx] = rg - (rg.sum() - rg) / (n - 1)
    return adv
