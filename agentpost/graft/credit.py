"""Step credit for one group of rollouts, every method behind one interface (graft.md, Algorithm 1 and baselines).

``step_credit(method, trajectories, cfg)`` returns a :class:`Credit` with one advantage per executed step:

- ``grpo`` — trajectory credit: the group-normalised outcome (eq. 2, :func:`agentpost.rl.group_advantage`) on every
  step of the rollout;
- ``gigpo`` — GiGPO-style anchor-state grouping: A = A^E + omega A^S with A^E the GRPO episode advantage and A^S
  the discounted Monte Carlo return normalised within the group of steps taken from the same anchor state (the same
  canonical states as the graph). A state visited once (a singleton step group) gets A^S = 0 by default, as in
  GiGPO's own ``step_norm_reward`` (verl-agent ``gigpo/core_gigpo.py``: the group's own mean, std 1);
  ``gigpo_singleton="zero_mean_unit_std"`` is verl's GRPO rule (mean 0, std 1, so A^S = G_t, the full return);
- ``graft_td`` — GRAFT with TD(0) (eq. 8) and node normalisation (eq. 11), the paper's GRAFT-dagger;
- ``graft_gae`` — GRAFT with Graph GAE (eqs. 9-10) and node normalisation (eq. 11), the full method.

The Monte Carlo return uses the graph's convention, V(sink) = R: G_t = sum_{k>=t} gamma^(k-t) r_k + gamma^(T-t) R,
so it estimates the same Q(s_t, a_t) = gamma V(s_{t+1}) as eq. 8.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from agentpost.graft.advantages import graph_gae, node_normalise, td0_advantages
from agentpost.graft.graph import Trajectory, TrajectoryGraph, build_graph
from agentpost.graft.values import ValueResult, bellman_values
from agentpost.registry import Registry
from agentpost.rl import group_advantage


@dataclass(frozen=True)
class CreditConfig:
    """Every choice the paper leaves open, each with the default this project reads it with (its docstring says why)."""

    gamma: float = 0.99
    lam: float = 0.95
    matching: str = "exact"
    sim_threshold: float = 0.9
    embedder: Callable | None = field(default=None, compare=False)
    tol: float = 1e-8
    value_weighting: str = "count"
    gae_edges: str = "raw"
    sink_policy: str = "terminal_only"
    include_step_rewards: bool = False
    normalise: bool = True
    norm_eps: float = 1e-6
    norm_ddof: int = 0
    norm_group: str = "raw"
    grpo_ddof: int = 1
    gigpo_omega: float = 1.0
    gigpo_singleton: str = "zero"  # GiGPO's step_norm_reward; "zero_mean_unit_std" = verl's GRPO singleton rule

    def __post_init__(self) -> None:
        if self.gigpo_singleton not in ("zero", "zero_mean_unit_std"):
            raise ValueError(
                f"gigpo_singleton must be 'zero' (GiGPO) or 'zero_mean_unit_std' (verl), got {self.gigpo_singleton!r}"
            )


@dataclass
class Credit:
    """Per-trajectory step advantages, the graph they came from and the solved values (None for GRPO)."""

    per_traj: list
    graph: TrajectoryGraph | None = None
    values: ValueResult | None = None
    raw: np.ndarray | None = None  # per-edge advantage before normalisation (graph methods)
    td: np.ndarray | None = None  # per-edge TD(0) residual, eq. 8 (GRAFT methods)

    @property
    def flat(self) -> np.ndarray:
        return np.concatenate(self.per_traj) if self.per_traj else np.zeros(0)


def graph_of(trajectories: Sequence[Trajectory], cfg: CreditConfig) -> TrajectoryGraph:
    return build_graph(
        trajectories,
        matching=cfg.matching,
        sim_threshold=cfg.sim_threshold,
        embedder=cfg.embedder,
        sink_policy=cfg.sink_policy,
    )


def mc_returns(trajectories: Sequence[Trajectory], *, gamma: float, include_step_rewards: bool) -> np.ndarray:
    """G_t per executed step (trajectory-major order), in the graph's convention (module docstring)."""
    out = []
    for tr in trajectories:
        g = tr.reward
        rets = []
        for t in reversed(range(tr.length)):
            g = gamma * g + (tr.step_rewards[t] if include_step_rewards and tr.step_rewards else 0.0)
            rets.append(g)
        out.extend(reversed(rets))
    return np.asarray(out, dtype=np.float64)


def _grpo(trajectories, cfg: CreditConfig) -> Credit:
    rewards = [tr.reward for tr in trajectories]
    adv = group_advantage(
        rewards, np.zeros(len(rewards), dtype=np.int64), scale="group", std_ddof=cfg.grpo_ddof, eps=cfg.norm_eps
    ).numpy()
    return Credit([np.full(tr.length, a) for tr, a in zip(trajectories, adv)])


def _gigpo(trajectories, cfg: CreditConfig) -> Credit:
    graph = graph_of(trajectories, cfg)
    episode = _grpo(trajectories, cfg).flat
    returns = mc_returns(trajectories, gamma=cfg.gamma, include_step_rewards=cfg.include_step_rewards)
    step = group_advantage(
        returns, graph.src, scale="group", std_ddof=cfg.grpo_ddof, eps=cfg.norm_eps, singleton=cfg.gigpo_singleton
    ).numpy()
    return Credit(graph.split(episode + cfg.gigpo_omega * step), graph=graph)


def _graft(trajectories, cfg: CreditConfig, *, gae: bool) -> Credit:
    graph = graph_of(trajectories, cfg)
    values = bellman_values(graph, gamma=cfg.gamma, tol=cfg.tol, value_weighting=cfg.value_weighting)
    td = td0_advantages(graph, values.values, gamma=cfg.gamma, include_step_rewards=cfg.include_step_rewards)
    adv = graph_gae(graph, td, gamma=cfg.gamma, lam=cfg.lam, gae_edges=cfg.gae_edges) if gae else td
    final = (
        node_normalise(graph, adv, eps=cfg.norm_eps, ddof=cfg.norm_ddof, norm_group=cfg.norm_group)
        if cfg.normalise
        else adv
    )
    return Credit(graph.split(final), graph=graph, values=values, raw=adv, td=td)


#: name -> f(trajectories, cfg) -> Credit.
CREDIT_METHODS = Registry(
    "credit method",
    {
        "grpo": _grpo,
        "gigpo": _gigpo,
        "graft_td": lambda trajs, cfg: _graft(trajs, cfg, gae=False),
        "graft_gae": lambda trajs, cfg: _graft(trajs, cfg, gae=True),
    },
)


def step_credit(method: str, trajectories: Sequence[Trajectory], cfg: CreditConfig = CreditConfig()) -> Credit:
    """Step advantages of one group by ``method`` (one of :data:`CREDIT_METHODS`)."""
    fn = CREDIT_METHODS.lookup(method)
    if not trajectories:
        raise ValueError("step_credit needs a non-empty group of trajectories")
    return fn(trajectories, cfg)
