"""MaD-RL turned by hand: the reward table r(c) of every divergence as the target distribution p* moves.

The group is the chapter's worked example (G = 10 samples with categories 6/3/1, so p_hat = (0.6, 0.3, 0.1));
the reader sets the target's unnormalised weights. :func:`reward_table` is what the chapter's "Turn it by hand"
section renders, through :func:`agentpost.book.walkthrough.turn_by_hand`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from agentpost.book.walkthrough import fixed_figure
from agentpost.madrl.rewards import DIVERGENCES, as_distribution, category_reward, empirical_distribution, smooth_target

#: The worked example's group: 6, 3 and 1 samples of categories 0, 1, 2.
GROUP = torch.tensor([0] * 6 + [1] * 3 + [2])


def reward_table(w0: float, w1: float, w2: float, *, target_smoothing: float = 1e-6, eps: float = 1e-6) -> pd.DataFrame:
    """One row per category: the target p* = w / sum(w) (smoothed as in ``matching_rewards``), the group's p_hat and
    the table reward r(c) of each divergence (the chapter's reward table, mad-rl.md)."""
    weights = torch.tensor([w0, w1, w2], dtype=torch.float64)
    if (weights < 0).any() or not float(weights.sum()) > 0:
        raise ValueError(f"target weights must be >= 0 and not all 0, got {weights.tolist()}")
    p_star = smooth_target(as_distribution(weights / weights.sum(), "target"), target_smoothing)
    p_hat = empirical_distribution(GROUP, 3, eps=eps)
    table = {"category": [0, 1, 2], "p*": p_star.numpy(), "p_hat": p_hat.numpy()}
    table.update({f"r {name}": category_reward(p_hat, p_star, name).numpy() for name in DIVERGENCES})
    return pd.DataFrame(table).round(4)


def render(w0: float, w1: float, w2: float) -> list:
    """Grouped bars of r(c) per divergence, and the table."""
    table = reward_table(w0, w1, w2)
    fig = fixed_figure(5.2, 2.6, left=0.14, right=0.98, bottom=0.2, top=0.97)
    ax = fig.add_subplot()
    width = 0.8 / len(DIVERGENCES)
    for k, name in enumerate(DIVERGENCES):
        ax.bar(np.arange(3) + (k - 1.5) * width, table[f"r {name}"], width, label=name)
    ax.axhline(0, color="0.3", lw=0.6)
    ax.set_xticks(
        range(3), [f"c={c}\np*={p:.2f}, p̂={q:.1f}" for c, p, q in zip(table["category"], table["p*"], table["p_hat"])]
    )
    ax.set_ylabel("reward r(c)")
    reach = float(table[[f"r {name}" for name in DIVERGENCES]].abs().to_numpy().max())
    ax.set_ylim(-max(1.0, 1.25 * reach), max(1.0, 1.5 * reach))  # room for the legend
    ax.legend(fontsize=7, ncols=4, loc="upper center")
    return [fig, table]
