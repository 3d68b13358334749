"""Step advantages on the trajectory graph and the GRPO-C objective (graft.md, eqs. 3-4 and 8-11).

- :func:`td0_advantages` — A_t = gamma V(phi(s_{t+1})) - V(phi(s_t)) (eq. 8), optionally plus the step reward r_t;
- :func:`graph_gae` — A^GAE_t = A_t + sum_{k=1}^{T-t} (gamma lambda)^k Abar_{t+k}, Abar the mean TD residual over
  E_k(a_t), the edge instances reachable from a_t in exactly k hops (eqs. 9-10); ``gae_edges`` = ``raw`` (each
  instance, the default) or ``distinct`` (each distinct (u, a, v) once); an empty E_k contributes 0;
- :func:`node_normalise` — (A - mu_G(s_t)) / (sigma_G(s_t) + eps) over the step group of phi(s_t) (eq. 11), with the
  singleton rule mu = 0, sigma = |A| (so +-1, or 0 when A = 0);
- :func:`grpo_c_objective` — the sequence-ratio clip (eqs. 3-4): one geometric-mean ratio per step (the step's
  tokens), clipped once, built on :func:`agentpost.rl.policy_objective` (``ratio_level="sequence"``) and
  :func:`agentpost.rl.aggregate`; ``ratio_level="token"`` is token-level PPO (each token's ratio clipped), the
  objective GRPO-C replaces (Table 3's "+ GRPO-C" ablation). The two agree when a step is one token.
"""

from __future__ import annotations

import numpy as np
import torch

from agentpost.graft.graph import TrajectoryGraph
from agentpost.rl import aggregate, group_stats, policy_objective


def td0_advantages(
    graph: TrajectoryGraph, values: np.ndarray, *, gamma: float, include_step_rewards: bool = False
) -> np.ndarray:
    """Eq. 8 for every raw edge instance (= every executed step): gamma V(v) - V(u) [+ r_t]."""
    values = np.asarray(values, dtype=np.float64)
    if values.shape != (graph.n_nodes,):
        raise ValueError(f"values must have one entry per node ({graph.n_nodes}), got shape {values.shape}")
    adv = gamma * values[graph.dst] - values[graph.src]
    if include_step_rewards:
        adv = adv + graph.step_reward
    return adv


def _hop_means(
    graph: TrajectoryGraph, residual: np.ndarray, start: int, hops: int, out: list[np.ndarray], distinct: bool
) -> np.ndarray:
    """Abar_k for k = 1..hops from the head node ``start`` of a_t: E_1 = out-edges of ``start``, E_k = out-edges of
    the heads of E_{k-1}."""
    means = np.zeros(hops, dtype=np.float64)
    frontier = {start}
    for k in range(hops):
        edges = np.concatenate([out[u] for u in sorted(frontier)]) if frontier else np.zeros(0, dtype=np.int64)
        if edges.size == 0:
            break  # an empty E_k (and every later one) contributes 0: the paper does not say
        if distinct:
            by_edge: dict = {}
            for e in edges.tolist():
                by_edge.setdefault((int(graph.src[e]), graph.action[e], int(graph.dst[e])), []).append(residual[e])
            means[k] = float(np.mean([np.mean(v) for v in by_edge.values()]))
        else:
            means[k] = float(residual[edges].mean())
        frontier = set(graph.dst[edges].tolist())
    return means


def graph_gae(
    graph: TrajectoryGraph, residual: np.ndarray, *, gamma: float, lam: float, gae_edges: str = "raw"
) -> np.ndarray:
    """Eqs. 9-10 for every executed step; ``residual`` are the per-edge TD(0) residuals (:func:`td0_advantages`).

    Step t of a trajectory with T steps sums hops k = 1..T-1-t (0-indexed t; the paper's T - t with 1-indexed t).
    """
    if gae_edges not in ("raw", "distinct"):
        raise ValueError(f"gae_edges must be 'raw' or 'distinct', got {gae_edges!r}")
    if not 0.0 <= lam <= 1.0:
        raise ValueError(f"lambda must lie in [0, 1], got {lam}")
    residual = np.asarray(residual, dtype=np.float64)
    if residual.shape != (graph.n_edges,):
        raise ValueError(f"residual must have one entry per edge ({graph.n_edges}), got shape {residual.shape}")
    out = graph.out_edges()
    cache: dict[int, np.ndarray] = {}
    longest = int(graph.remaining.max()) if graph.n_edges else 0
    result = residual.copy()
    for e in range(graph.n_edges):
        hops = int(graph.remaining[e])
        if hops == 0:
            continue
        v = int(graph.dst[e])
        if v not in cache:
            cache[v] = _hop_means(graph, residual, v, longest, out, gae_edges == "distinct")
        weights = (gamma * lam) ** np.arange(1, hops + 1)
        result[e] += float(weights @ cache[v][:hops])
    return result


def node_normalise(
    graph: TrajectoryGraph, adv: np.ndarray, *, eps: float = 1e-6, ddof: int = 0, norm_group: str = "raw"
) -> np.ndarray:
    """Eq. 11: normalise each step's advantage within the group of steps leaving the same node.

    ``norm_group`` (the paper leaves the group open): ``raw`` — the group is every executed step at the node;
    ``distinct`` — the statistics are taken over the node's distinct (u, a, v) edges (each the mean of its instances).
    ``ddof`` (not given by the paper): 0 population std (default), 1 unbiased. A group with one member uses mean 0 and
    std |A|.
    """
    if norm_group not in ("raw", "distinct"):
        raise ValueError(f"norm_group must be 'raw' or 'distinct', got {norm_group!r}")
    adv = np.asarray(adv, dtype=np.float64)
    if adv.shape != (graph.n_edges,):
        raise ValueError(f"adv must have one entry per edge ({graph.n_edges}), got shape {adv.shape}")
    out = np.zeros_like(adv)
    for edges in graph.out_edges():
        if edges.size == 0:
            continue
        a = adv[edges]
        if norm_group == "distinct":
            keys = [(graph.action[e], int(graph.dst[e])) for e in edges]
            members = np.asarray([a[[k == key for k in keys]].mean() for key in dict.fromkeys(keys)])
        else:
            members = a
        if members.size == 1:
            mean, std = 0.0, np.abs(a)
        else:
            m, s = group_stats(torch.as_tensor(members), std_ddof=ddof)
            mean, std = float(m), float(s)
        out[edges] = (a - mean) / (std + eps)
    return out


def grpo_c_objective(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    step_adv: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_eps: float = 0.2,
    step_agg: str = "steps",
    traj_ids: torch.Tensor | None = None,
    ratio_level: str = "sequence",
) -> torch.Tensor:
    """Eq. 4 at step level, to be maximised: rows are steps, columns the step's tokens (``mask`` marks them).

    ``ratio_level="sequence"`` (GRPO-C): w = exp(mean over the step's tokens of log pi - log pi_old) (eq. 3);
    objective min(w A, clip(w, 1 +- eps) A) per step, the same value on each of its tokens. ``"token"``
    (token-level PPO, the baseline GRPO-C replaces): min(rho_t A, clip(rho_t, 1 +- eps) A) per token with
    rho_t = pi / pi_old of that token. Either way a step's value is the mean over its tokens. ``step_agg``
    (not given by the paper): ``steps`` — mean over all steps in the batch; ``trajectory`` — mean over each trajectory's
    steps (``traj_ids``), then over trajectories.
    """
    if ratio_level not in ("sequence", "token"):
        raise ValueError(f"ratio_level must be 'sequence' (GRPO-C) or 'token' (PPO), got {ratio_level!r}")
    if step_adv.ndim != 1 or step_adv.shape[0] != logp.shape[0]:
        raise ValueError(f"step_adv must have one value per row of logp ({logp.shape[0]}), got {tuple(step_adv.shape)}")
    adv = step_adv.to(logp.dtype)[:, None].expand_as(logp)
    obj = policy_objective(logp, logp_old, adv, mask, ratio_level=ratio_level, eps_low=clip_eps, eps_high=clip_eps)
    if step_agg == "steps":
        return aggregate(obj, mask, "seq_mean_token_mean")
    if step_agg != "trajectory":
        raise ValueError(f"step_agg must be 'steps' or 'trajectory', got {step_agg!r}")
    if traj_ids is None or traj_ids.shape != step_adv.shape:
        raise ValueError("step_agg='trajectory' needs traj_ids with one id per step")
    m = mask.to(obj.dtype)
    per_step = (obj * m).sum(-1) / m.sum(-1).clamp_min(1.0)
    uniq, inverse = torch.unique(traj_ids, return_inverse=True)
    sums = torch.zeros(uniq.numel(), dtype=obj.dtype).index_add(0, inverse, per_step)
    counts = torch.zeros(uniq.numel(), dtype=obj.dtype).index_add(0, inverse, torch.ones_like(per_step))
    return (sums / counts).mean()
