"""Shared RL primitives for every RL chapter (rl-primitives.md): group-normalised advantages, clipped policy
objectives with dual clip, KL estimators, loss aggregation modes, full-distribution divergences (OPSD, MaD-RL) and
segment utilities, all pure functions with explicit masks; advantage estimators, aggregations and divergences are
registered by name (TRL / verl style, :class:`agentpost.registry.Registry`).

Project defaults (rl-primitives.md, "Specification"): group scale, ddof 1, eps 1e-6, token ratio, eps 0.2/0.2,
no dual clip unless a spec asks, k3 in the loss when KL is used, token_mean aggregation.
"""

from agentpost.rl.advantages import (
    ADVANTAGE_ESTIMATORS,
    dr_grpo_advantage,
    get_advantage,
    group_advantage,
    group_stats,
    register_advantage,
    rloo_advantage,
)
from agentpost.rl.divergence import DIVERGENCES, forward_kl, generalized_jsd, jsd, kl, reverse_kl
from agentpost.rl.losses import (
    AGGREGATIONS,
    EMPTY_ROWS,
    aggregate,
    clip_fraction,
    clipped_policy_loss,
    kl_estimate,
    policy_objective,
    register_aggregation,
)
from agentpost.rl.segments import (
    SegmentMismatch,
    broadcast_segment_values,
    broadcast_sequence_values,
    segment_ids,
)

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AGGREGATIONS",
    "DIVERGENCES",
    "EMPTY_ROWS",
    "SegmentMismatch",
    "aggregate",
    "broadcast_segment_values",
    "broadcast_sequence_values",
    "clip_fraction",
    "clipped_policy_loss",
    "dr_grpo_advantage",
    "forward_kl",
    "generalized_jsd",
    "get_advantage",
    "group_advantage",
    "group_stats",
    "jsd",
    "kl",
    "kl_estimate",
    "policy_objective",
    "register_advantage",
    "register_aggregation",
    "reverse_kl",
    "rloo_advantage",
    "segment_ids",
]
