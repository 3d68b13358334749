"""Figures of the GRAFT chapter: the trajectory graph of one group, drawn on the room's grid."""

from __future__ import annotations

import numpy as np

from agentpost.graft.graph import build_graph
from agentpost.graft.values import bellman_values


def plot_group_graph(trajectories, positions, *, gamma: float, ax, title: str = ""):
    """Nodes at the agent's (x, y), coloured by their Bellman value V (eq. 5); an arrow per distinct edge with width
    proportional to its count; sinks ringed (green: reward 1, red: reward 0). Self-loops (bumping into a wall) are
    counted in the title, not drawn; a state without a position (a time-out sink) is drawn beside the room.
    Returns the graph, its values and the scatter artist."""
    graph = build_graph(trajectories)
    values = bellman_values(graph, gamma=gamma).values
    pos = {}
    for nodes, ps in zip(graph.node_of, positions):
        for n, p in zip(nodes, ps):
            if p is not None:
                pos.setdefault(n, p)
    known = np.asarray(list(pos.values()), dtype=float)
    for k, n in enumerate(n for n in range(graph.n_nodes) if n not in pos):  # e.g. a time-out sink: beside the room
        pos[n] = (known[:, 0].max() + 1.5, known[:, 1].min() + k)
    loops = 0
    for (u, _, v), count in graph.edge_counts().items():
        if u == v or pos[u] == pos[v]:
            loops += count
            continue
        (x0, y0), (x1, y1) = pos[u], pos[v]
        ax.annotate(
            "",
            xy=(x1, y1),
            xytext=(x0, y0),
            arrowprops={
                "arrowstyle": "-|>",
                "lw": 0.6 + 0.5 * count,
                "color": "0.45",
                "alpha": 0.7,
                "shrinkA": 9,
                "shrinkB": 9,
            },
        )
    xy = np.asarray([pos[n] for n in range(graph.n_nodes)], dtype=float)
    sc = ax.scatter(
        xy[:, 0], xy[:, 1], c=values, cmap="viridis", vmin=0, vmax=1, s=260, zorder=3, edgecolors="k", linewidths=0.5
    )
    for f, r in graph.sink_value.items():
        ax.scatter(*pos[f], s=520, facecolors="none", edgecolors="green" if r > 0 else "red", linewidths=2, zorder=2)
    for n in range(graph.n_nodes):
        ax.text(*pos[n], f"{values[n]:.2f}", ha="center", va="center", fontsize=6, color="w", zorder=4)
    ax.invert_yaxis()
    ax.set_aspect("equal")
    ax.set_xlabel("x (agent column)")
    ax.set_ylabel("y (agent row)")
    ax.set_title(
        f"{title}{len(trajectories)} rollouts, {graph.n_nodes} nodes, {graph.n_edges} steps; "
        f"{loops} self-loop steps not drawn",
        fontsize=8,
    )
    return graph, values, sc
