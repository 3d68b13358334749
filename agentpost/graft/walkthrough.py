"""GRAFT turned by hand: the trajectory graph, its Bellman values and the step advantages as rollouts are added.

Six hand-written rollouts of one task over abstract states (synthetic, for the mechanism only); the first three are
the chapter's worked example (spec test 1). :func:`step_table` is what the chapter's "Turn it by hand" section
renders, through :func:`agentpost.book.walkthrough.turn_by_hand`.
"""

from __future__ import annotations

import pandas as pd

from agentpost.book.walkthrough import fixed_figure
from agentpost.graft.advantages import node_normalise, td0_advantages
from agentpost.graft.figures import plot_group_graph
from agentpost.graft.graph import Trajectory, build_graph
from agentpost.graft.values import bellman_values

#: (states, actions, reward); rollouts 1-3 are the worked example of the chapter and of tests/unit (gamma 0.9).
ROLLOUTS = (
    Trajectory(("s0", "s1", "win"), ("a", "b"), 1.0),
    Trajectory(("s0", "s2", "lose"), ("c", "d"), 0.0),
    Trajectory(("s0", "s1", "lose"), ("a", "e"), 0.0),
    Trajectory(("s0", "s2", "s3", "win"), ("c", "f", "g"), 1.0),
    Trajectory(("s0", "s1", "win"), ("a", "b"), 1.0),
    Trajectory(("s0", "s2", "s3", "lose"), ("c", "f", "h"), 0.0),
)
#: Where each abstract state is drawn.
POSITIONS = {"s0": (0, 1), "s1": (1, 0), "s2": (1, 2), "s3": (2, 2), "win": (3, 0), "lose": (3, 2)}


def _rollouts(n_rollouts: int) -> tuple:
    if not 1 <= n_rollouts <= len(ROLLOUTS):
        raise ValueError(f"n_rollouts must be in 1..{len(ROLLOUTS)}, got {n_rollouts}")
    return ROLLOUTS[:n_rollouts]


def step_table(n_rollouts: int, gamma: float) -> pd.DataFrame:
    """One row per executed step of the first ``n_rollouts`` rollouts: V(s_t) (eq. 5), the TD(0) advantage
    gamma V(s_{t+1}) - V(s_t) (eq. 8) and its node-group normalisation (eq. 11, population std)."""
    if not 0.0 < gamma <= 1.0:
        raise ValueError(f"gamma must be in (0, 1], got {gamma}")
    group = _rollouts(n_rollouts)
    graph = build_graph(group)
    values = bellman_values(graph, gamma=gamma).values
    td0 = td0_advantages(graph, values, gamma=gamma)
    norm = node_normalise(graph, td0)
    return pd.DataFrame(
        {
            "rollout": graph.traj + 1,
            "t": graph.t,
            "reward R": [group[i].reward for i in graph.traj],
            "step": [
                f"{graph.labels[u]} -{a}-> {graph.labels[v]}" for u, a, v in zip(graph.src, graph.action, graph.dst)
            ],
            "V(s_t)": values[graph.src],
            "V(s_t+1)": values[graph.dst],
            "TD(0) A_t": td0,
            "normalised A": norm,
        }
    ).round(4)


def render(n_rollouts: int, gamma: float) -> list:
    """The graph drawn with its values (the chapter's own figure function) and the step table."""
    group = _rollouts(n_rollouts)
    fig = fixed_figure(5.2, 3.0, left=0.02, right=0.98, bottom=0.04, top=0.92)
    ax = fig.add_subplot()
    _, _, sc = plot_group_graph(group, [[POSITIONS[s] for s in tr.states] for tr in group], gamma=gamma, ax=ax)
    fig.colorbar(sc, ax=ax, label="V (eq. 5)")
    for state in {s for tr in group for s in tr.states}:  # abstract states: name them, no grid axes
        ax.annotate(state, POSITIONS[state], xytext=(0, -17), textcoords="offset points", ha="center", fontsize=8)
    ax.set_xlabel("")
    ax.set_ylabel("")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.margins(0.15)
    return [fig, step_table(n_rollouts, gamma)]
