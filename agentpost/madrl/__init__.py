"""MaD-RL (mad-rl.md): per-sample rewards whose policy gradient minimises a divergence between the generated
category distribution and a target, the softmax-bandit mechanism check, and the GSM8K-prompted diagnostic with a
character GRU or a Hugging Face causal LM as the policy (one training loop, :mod:`agentpost.madrl.train`)."""

from agentpost.madrl.rewards import (
    ARMS,
    DIVERGENCES,
    KNOB_ARMS,
    arm_rewards,
    category_reward,
    divergence,
    empirical_distribution,
    matching_rewards,
    neg_gradient,
    smooth_target,
)

__all__ = [
    "ARMS",
    "DIVERGENCES",
    "KNOB_ARMS",
    "arm_rewards",
    "category_reward",
    "divergence",
    "empirical_distribution",
    "matching_rewards",
    "neg_gradient",
    "smooth_target",
]
