"""Code-based skills turned by hand: how much of a random controller's choice goes to skills in the mixed space,
and what that leaves of a decision budget.

The mixed space holds the first ``n_skills`` of the default skills and the first ``n_primitives`` primitives;
:meth:`agentpost.codeskills.controllers.RandomController.probabilities` gives the choice. :func:`selection_table`
is what the chapter's "Turn it by hand" section renders, through :func:`agentpost.book.walkthrough.turn_by_hand`.
"""

from __future__ import annotations

import pandas as pd

from agentpost.book.walkthrough import fixed_figure
from agentpost.codeskills.controllers import RandomController
from agentpost.codeskills.env import PRIMITIVE_KEYS
from agentpost.codeskills.runtime import DEFAULT_SKILLS, ActionSpace


def mixed_space(n_skills: int, n_primitives: int) -> ActionSpace:
    if not 1 <= n_skills <= len(DEFAULT_SKILLS) or not 0 <= n_primitives <= len(PRIMITIVE_KEYS):
        raise ValueError(f"n_skills must be in 1..{len(DEFAULT_SKILLS)} and n_primitives in 0..{len(PRIMITIVE_KEYS)}, "
                         f"got {n_skills}, {n_primitives}")
    return ActionSpace(skills=DEFAULT_SKILLS[:n_skills], primitives=tuple(PRIMITIVE_KEYS)[:n_primitives])


def selection_table(n_skills: int, n_primitives: int, mode: str, decisions: int) -> pd.DataFrame:
    """Per random-controller mode: the probability mass m on skills per decision, the expected skill calls within
    ``decisions`` decisions (D m) and the probability that none of them is a skill ((1 - m)^D)."""
    if decisions < 1:
        raise ValueError(f"decisions must be >= 1, got {decisions}")
    space = mixed_space(n_skills, n_primitives)
    rows = []
    for m in ("uniform", "equal_mass"):
        mass = float(RandomController.probabilities(space, m)[:n_skills].sum())
        rows.append({"mode": m + (" (chosen)" if m == mode else ""), "actions": len(space), "skill mass m": mass,
                     f"skill calls in {decisions} decisions": decisions * mass,
                     "P(no skill call)": (1.0 - mass) ** decisions})
    return pd.DataFrame(rows).round(4)


def render(n_skills: int, n_primitives: int, mode: str, decisions: int) -> list:
    """The chosen mode's probability of each action (skills first), and the table of both modes."""
    space = mixed_space(n_skills, n_primitives)
    p = RandomController.probabilities(space, mode)
    fig = fixed_figure(6.4, 2.4, left=0.11, right=0.99, bottom=0.36, top=0.9)
    ax = fig.add_subplot()
    ax.bar(range(len(space)), p, color=["tab:blue"] * n_skills + ["tab:gray"] * n_primitives)
    ax.set_xticks(range(len(space)), space.names, rotation=90, fontsize=6)
    ax.set_ylabel("P(action)")
    ax.set_title(f"{mode}: skills (blue) get {p[:n_skills].sum():.3f} of each decision", fontsize=8)
    return [fig, selection_table(n_skills, n_primitives, mode, decisions)]
