"""GRAFT (arXiv 2609.28963): step-level advantages from a trajectory graph (graft.md).

- :mod:`~agentpost.graft.graph` — merging a group's rollouts into a graph of canonicalised states (§3.1);
- :mod:`~agentpost.graft.values` — Bellman value iteration by Gauss-Seidel in reverse-BFS order (eqs. 5-7);
- :mod:`~agentpost.graft.advantages` — TD(0) (eq. 8), Graph GAE (eqs. 9-10), node normalisation (eq. 11) and the
  GRPO-C sequence-ratio objective (eqs. 3-4) on :mod:`agentpost.rl`;
- :mod:`~agentpost.graft.credit` — GRPO, GiGPO-style and GRAFT step credit behind one interface;
- :mod:`~agentpost.graft.proposition` — Proposition 1 checked numerically on a lattice MDP with known V^pi;
- :mod:`~agentpost.graft.envs`, :mod:`~agentpost.graft.train` — the text gridworld and MiniHack room, the tabular
  softmax policy and the training arms of the diagnostic.
"""

from agentpost.graft.advantages import graph_gae, grpo_c_objective, node_normalise, td0_advantages
from agentpost.graft.credit import CREDIT_METHODS, Credit, CreditConfig, mc_returns, step_credit
from agentpost.graft.graph import Trajectory, TrajectoryGraph, build_graph, cosine_clusters, node_group_stats
from agentpost.graft.values import ValueResult, bellman_residual, bellman_values, default_k_max

__all__ = [
    "CREDIT_METHODS",
    "Credit",
    "CreditConfig",
    "Trajectory",
    "TrajectoryGraph",
    "ValueResult",
    "bellman_residual",
    "bellman_values",
    "build_graph",
    "cosine_clusters",
    "default_k_max",
    "graph_gae",
    "grpo_c_objective",
    "mc_returns",
    "node_group_stats",
    "node_normalise",
    "step_credit",
    "td0_advantages",
]
