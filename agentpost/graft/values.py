"""Bellman value iteration on the trajectory graph (graft.md, eqs. 5-7).

Sinks: V(f) = R(f). Other nodes: V(u) = sum_a pi_hat(a|u) sum_v P_hat(v|u,a) gamma V(v) with the empirical
pi_hat (eq. 6) and P_hat (eq. 7); with ``value_weighting="count"`` (the default; the paper leaves the weighting open)
pi_hat P_hat = count(u -a-> v) / count(u -> .), i.e. V(u) is the mean of gamma V(v) over u's raw out-edge instances;
``uniform_actions`` averages over distinct actions first. Solved by Gauss-Seidel sweeps in order of reverse-BFS
distance to the nearest sink; nodes that cannot reach a sink keep V = 0; stop when max_u |V^(k+1) - V^(k)| < eps
or after k_max = ceil(log eps / log gamma) + 50 sweeps.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

import numpy as np

from agentpost.graft.graph import TrajectoryGraph


@dataclass
class ValueResult:
    values: np.ndarray
    sweeps: int
    converged: bool
    k_max: int
    order: np.ndarray  # the Gauss-Seidel sweep order (non-sink nodes that reach a sink)
    distance: np.ndarray  # reverse-BFS hops to the nearest sink (-1: cannot reach one)


def default_k_max(gamma: float, tol: float) -> int:
    """k_max = ceil(log eps / log gamma) + 50 (1883 for gamma = 0.99, eps = 1e-8)."""
    if not 0.0 < gamma < 1.0:
        raise ValueError(f"the default k_max needs 0 < gamma < 1, got gamma={gamma}; pass k_max explicitly")
    return math.ceil(math.log(tol) / math.log(gamma)) + 50


def sink_distances(graph: TrajectoryGraph) -> np.ndarray:
    """Hops from each node to its nearest sink along edge direction (BFS on reversed edges); -1 if none."""
    preds: list[set] = [set() for _ in range(graph.n_nodes)]
    for u, v in zip(graph.src.tolist(), graph.dst.tolist()):
        preds[v].add(u)
    dist = np.full(graph.n_nodes, -1, dtype=np.int64)
    queue = deque()
    for f in graph.sink_value:
        dist[f] = 0
        queue.append(f)
    while queue:
        v = queue.popleft()
        for u in preds[v]:
            if dist[u] < 0:
                dist[u] = dist[v] + 1
                queue.append(u)
    return dist


def bellman_values(
    graph: TrajectoryGraph,
    *,
    gamma: float,
    tol: float = 1e-8,
    k_max: int | None = None,
    value_weighting: str = "count",
) -> ValueResult:
    """Solve eq. 5 on ``graph`` by Gauss-Seidel in reverse-BFS order (see the module docstring)."""
    if not 0.0 < gamma <= 1.0:
        raise ValueError(f"gamma must lie in (0, 1], got {gamma}")
    if not tol > 0:
        raise ValueError(f"tol must be positive, got {tol}")
    if value_weighting not in ("count", "uniform_actions"):
        raise ValueError(f"value_weighting must be 'count' or 'uniform_actions', got {value_weighting!r}")
    k_max = default_k_max(gamma, tol) if k_max is None else int(k_max)
    values = np.zeros(graph.n_nodes, dtype=np.float64)
    for f, r in graph.sink_value.items():
        values[f] = r
    dist = sink_distances(graph)
    out = graph.out_edges()
    order = np.asarray(
        [u for u in np.argsort(dist, kind="stable") if dist[u] > 0 and u not in graph.sink_value], dtype=np.int64
    )
    # Per node: target nodes of its out-edge instances and their weights (they sum to 1).
    plan = []
    for u in order:
        edges = out[u]
        targets = graph.dst[edges]
        if value_weighting == "count":
            weights = np.full(edges.size, 1.0 / edges.size)
        else:
            acts = [graph.action[e] for e in edges]
            n_act = {a: acts.count(a) for a in set(acts)}
            weights = np.asarray([1.0 / (len(n_act) * n_act[a]) for a in acts])
        plan.append((u, targets, weights))
    sweeps, converged = 0, not plan
    while not converged and sweeps < k_max:
        delta = 0.0
        for u, targets, weights in plan:
            new = gamma * float(weights @ values[targets])
            delta = max(delta, abs(new - values[u]))
            values[u] = new
        sweeps += 1
        converged = delta < tol
    return ValueResult(values=values, sweeps=sweeps, converged=converged, k_max=k_max, order=order, distance=dist)


def bellman_residual(
    graph: TrajectoryGraph, result: ValueResult, *, gamma: float, value_weighting: str = "count"
) -> float:
    """max_u |V(u) - backup(u)| over the solved nodes (the fixed-point check of spec test 5)."""
    out = graph.out_edges()
    worst = 0.0
    for u in result.order:
        edges = out[u]
        targets = result.values[graph.dst[edges]]
        if value_weighting == "count":
            backup = gamma * targets.mean()
        else:
            acts = np.asarray([str(graph.action[e]) for e in edges])
            backup = gamma * np.mean([targets[acts == a].mean() for a in np.unique(acts)])
        worst = max(worst, abs(result.values[u] - backup))
    return float(worst)
