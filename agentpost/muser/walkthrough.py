"""MuSeR turned by hand: candidate-adaptive interest selection as the candidate item and the temperature move.

Two interests u_1 = (1, 0), u_2 = (0, 1) and a candidate e = (cos a, sin a); at a = atan2(0.8, 0.6) (53.13 degrees)
and tau = 0.1 this is the chapter's worked example. :func:`interest_table` is what the chapter's "Turn it by hand"
section renders, through :func:`agentpost.book.walkthrough.turn_by_hand`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from agentpost.book.walkthrough import fixed_figure
from agentpost.muser.interests import adaptive_score, interest_cosines, interest_weights

INTERESTS = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]], dtype=torch.float64)


def _candidates(angles_deg) -> torch.Tensor:
    a = torch.deg2rad(torch.as_tensor(angles_deg, dtype=torch.float64).reshape(-1))
    return torch.stack([torch.cos(a), torch.sin(a)], dim=-1)


def interest_table(angle_deg: float, tau: float) -> pd.DataFrame:
    """Per interest m: cos(u_m, e), alpha_m(e) (softmax over interests of cos / tau) and the item's score s(u, e)
    with softmax aggregation (eq. of section 5) and with ``max``."""
    if not tau > 0:
        raise ValueError(f"tau must be > 0, got {tau}")
    cos = interest_cosines(INTERESTS, _candidates(angle_deg))  # (1, 2, 1)
    alpha = interest_weights(cos, tau)
    return pd.DataFrame(
        {
            "interest": ["u_1 = (1, 0)", "u_2 = (0, 1)"],
            "cos(u_m, e)": cos[0, :, 0].numpy(),
            "alpha_m": alpha[0, :, 0].numpy(),
            "score s (softmax)": float(adaptive_score(cos, tau)[0, 0]),
            "score s (max)": float(adaptive_score(cos, tau, "max")[0, 0]),
        }
    ).round(4)


def render(angle_deg: float, tau: float) -> list:
    """alpha_m and the score against the candidate's angle (current angle marked), and the table."""
    grid = np.linspace(0.0, 90.0, 91)
    cos = interest_cosines(INTERESTS, _candidates(grid))
    alpha = interest_weights(cos, tau)[0].numpy()
    fig = fixed_figure(6.4, 2.5, left=0.1, right=0.99, bottom=0.19, top=0.97, wspace=0.35)
    left, right = fig.subplots(1, 2)
    left.plot(grid, alpha[0], label="α_1 (u_1)")
    left.plot(grid, alpha[1], label="α_2 (u_2)")
    left.set_ylabel("interest weight α_m")
    right.plot(grid, adaptive_score(cos, tau)[0].numpy(), label="softmax")
    right.plot(grid, adaptive_score(cos, tau, "max")[0].numpy(), ls="--", label="max")
    right.set_ylabel("score s(u, e)")
    for ax in (left, right):
        ax.axvline(angle_deg, color="0.3", lw=0.8)
        ax.set_xlabel("candidate angle (degrees)")
        ax.legend(fontsize=7)
    return [fig, interest_table(angle_deg, tau)]
