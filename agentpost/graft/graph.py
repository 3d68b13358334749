"""The trajectory graph of one group of rollouts (graft.md, §3.1).

All transitions ``(s_t, a_t, s_{t+1})`` of the N rollouts of one task form a directed multigraph whose nodes are
canonicalised states phi(s): ``exact`` — a deterministic hash of the environment's state string; ``cosine`` —
states whose embeddings have cosine similarity above ``sim_threshold`` share a cluster id (the paper does not fix the
threshold). Every executed step is one raw edge instance ``(u, a, v)``; edge counts are the number of instances. The
final state of each trajectory is a sink carrying its reward R_i (``sink_policy`` decides, where the paper is silent,
what happens when that state is also a non-final state elsewhere).

The official code was announced (github.com/xcyao00/GRAFT) but is not available; semantics follow the paper text.
"""

from __future__ import annotations

import hashlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Callable, Hashable, Sequence

import numpy as np


@dataclass(frozen=True)
class Trajectory:
    """One rollout: states s_0..s_T (T + 1 state strings), actions a_0..a_{T-1}, its terminal reward R, per-step
    environment rewards r_0..r_{T-1} (only used with ``include_step_rewards``) and whether it ended in a true
    terminal state (False: truncated at the step limit)."""

    states: tuple
    actions: tuple
    reward: float
    step_rewards: tuple = ()
    terminated: bool = True

    def __post_init__(self) -> None:
        if len(self.states) != len(self.actions) + 1:
            raise ValueError(
                f"a trajectory needs len(states) == len(actions) + 1, got {len(self.states)} states "
                f"and {len(self.actions)} actions"
            )
        if self.step_rewards and len(self.step_rewards) != len(self.actions):
            raise ValueError(f"step_rewards has {len(self.step_rewards)} entries for {len(self.actions)} actions")
        if not np.isfinite(self.reward):
            raise ValueError(f"trajectory reward must be finite, got {self.reward}")

    @property
    def length(self) -> int:
        return len(self.actions)


def state_hash(state: Hashable) -> str:
    """phi for exact matching: sha1 of the state string (bytes are hashed as they are)."""
    data = state if isinstance(state, bytes) else str(state).encode("utf-8")
    return hashlib.sha1(data).hexdigest()


def cosine_clusters(embeddings: np.ndarray, threshold: float) -> np.ndarray:
    """Leader clustering: in order, a state joins the cluster whose leader (its first member) is most similar to it
    when that cosine similarity exceeds ``threshold``, else it founds a new cluster. Returns each row's cluster id."""
    if not -1.0 <= threshold <= 1.0:
        raise ValueError(f"sim_threshold must lie in [-1, 1], got {threshold}")
    x = np.asarray(embeddings, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"embeddings must be a non-empty 2-D array, got shape {x.shape}")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    if np.any(norms == 0):
        raise ValueError("an embedding has zero norm; cosine similarity is undefined")
    x = x / norms
    leaders: list[int] = []
    ids = np.empty(len(x), dtype=np.int64)
    for i, row in enumerate(x):
        if leaders:
            sims = x[leaders] @ row
            j = int(np.argmax(sims))
            if sims[j] > threshold:
                ids[i] = j
                continue
        ids[i] = len(leaders)
        leaders.append(i)
    return ids


@dataclass
class TrajectoryGraph:
    """Nodes 0..n_nodes-1; raw edge instances as parallel arrays (one per executed step, trajectory-major order).

    ``node_of[i]`` lists the node of each state of trajectory i; ``sink_value`` maps each fixed sink node to its
    reward; ``conflicts`` counts final states treated as normal nodes because they also occur as non-final states.
    """

    n_nodes: int
    src: np.ndarray
    action: list
    dst: np.ndarray
    traj: np.ndarray
    t: np.ndarray
    node_of: list
    sink_value: dict
    step_reward: np.ndarray
    remaining: np.ndarray  # T_i - 1 - t: hops left after this step in its own trajectory
    labels: list = field(default_factory=list)  # one representative state per node (for display)
    conflicts: int = 0

    @property
    def n_edges(self) -> int:
        return int(self.src.size)

    def out_edges(self) -> list[np.ndarray]:
        """Edge ids leaving each node."""
        out: list[list[int]] = [[] for _ in range(self.n_nodes)]
        for e, u in enumerate(self.src):
            out[u].append(e)
        return [np.asarray(x, dtype=np.int64) for x in out]

    def edge_counts(self) -> Counter:
        """count(u -a-> v) for each distinct (u, a, v)."""
        return Counter(zip(self.src.tolist(), self.action, self.dst.tolist()))

    def split(self, per_edge: np.ndarray) -> list[np.ndarray]:
        """Per-edge values regrouped as one array per trajectory (in step order)."""
        n_traj = len(self.node_of)
        return [per_edge[self.traj == i] for i in range(n_traj)]


def build_graph(
    trajectories: Sequence[Trajectory],
    *,
    matching: str = "exact",
    sim_threshold: float = 0.9,
    embedder: Callable[[list], np.ndarray] | None = None,
    sink_policy: str = "terminal_only",
) -> TrajectoryGraph:
    """Merge a group's rollouts into a :class:`TrajectoryGraph` (§3.1).

    ``matching``: ``exact`` (hash of the state string) or ``cosine`` (``embedder`` maps a list of states to an
    [n, d] array; clusters at ``sim_threshold``). ``sink_policy`` (the paper is silent on it): ``terminal_only`` fixes a
    final node to its reward only when the node never occurs as a non-final state (otherwise it is a normal node and the
    conflict is counted); ``always`` fixes every final node (to the mean reward of the trajectories ending there).
    """
    if matching not in ("exact", "cosine"):
        raise ValueError(f"matching must be 'exact' or 'cosine', got {matching!r}")
    if sink_policy not in ("terminal_only", "always"):
        raise ValueError(f"sink_policy must be 'terminal_only' or 'always', got {sink_policy!r}")
    if not trajectories:
        raise ValueError("build_graph needs at least one trajectory")
    for i, tr in enumerate(trajectories):
        if not isinstance(tr, Trajectory):
            raise TypeError(f"trajectory {i} is a {type(tr).__name__}, expected agentpost.graft.Trajectory")
    flat = [s for tr in trajectories for s in tr.states]
    if matching == "exact":
        keys = [state_hash(s) for s in flat]
    else:
        if embedder is None:
            raise ValueError("matching='cosine' needs an embedder (list of states -> [n, d] array)")
        emb = np.asarray(embedder(flat))
        if emb.shape[0] != len(flat):
            raise ValueError(f"embedder returned {emb.shape[0]} rows for {len(flat)} states")
        keys = cosine_clusters(emb, sim_threshold).tolist()
    ids: dict = {}
    labels: list = []
    flat_nodes = []
    for key, s in zip(keys, flat):
        if key not in ids:
            ids[key] = len(ids)
            labels.append(s)
        flat_nodes.append(ids[key])
    node_of, src, act, dst, traj, ts, rew, rem = [], [], [], [], [], [], [], []
    pos = 0
    for i, tr in enumerate(trajectories):
        nodes = flat_nodes[pos : pos + len(tr.states)]
        pos += len(tr.states)
        node_of.append(nodes)
        for t, a in enumerate(tr.actions):
            src.append(nodes[t])
            act.append(a)
            dst.append(nodes[t + 1])
            traj.append(i)
            ts.append(t)
            rew.append(tr.step_rewards[t] if tr.step_rewards else 0.0)
            rem.append(tr.length - 1 - t)
    non_final = set(src)
    finals: dict[int, list[float]] = defaultdict(list)
    for tr, nodes in zip(trajectories, node_of):
        finals[nodes[-1]].append(float(tr.reward))
    sink_value, conflicts = {}, 0
    for node, rewards in finals.items():
        if sink_policy == "terminal_only" and node in non_final:
            conflicts += len(rewards)
            continue
        sink_value[node] = float(np.mean(rewards))
    return TrajectoryGraph(
        n_nodes=len(ids),
        src=np.asarray(src, dtype=np.int64),
        action=act,
        dst=np.asarray(dst, dtype=np.int64),
        traj=np.asarray(traj, dtype=np.int64),
        t=np.asarray(ts, dtype=np.int64),
        node_of=node_of,
        sink_value=sink_value,
        step_reward=np.asarray(rew, dtype=np.float64),
        remaining=np.asarray(rem, dtype=np.int64),
        labels=labels,
        conflicts=conflicts,
    )


def node_group_stats(graph: TrajectoryGraph) -> dict:
    """Node-group statistics (§4 of the paper): the step group of a node is its raw out-edge instances.

    ``mean_group_size_nodes`` averages over nodes with out-edges, ``mean_group_size_steps`` over executed steps
    (each step counts the size of its own group), ``frac_steps_in_groups_ge2`` is the share of steps whose group
    has at least two members.
    """
    sizes = np.bincount(graph.src, minlength=graph.n_nodes)
    nonzero = sizes[sizes > 0]
    per_step = sizes[graph.src]
    return {
        "n_nodes": int(graph.n_nodes),
        "n_steps": int(graph.n_edges),
        "mean_group_size_nodes": float(nonzero.mean()) if nonzero.size else 0.0,
        "mean_group_size_steps": float(per_step.mean()) if per_step.size else 0.0,
        "frac_steps_in_groups_ge2": float((per_step >= 2).mean()) if per_step.size else 0.0,
    }
