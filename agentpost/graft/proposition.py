"""Proposition 1, numerically (graft.md, spec test 6).

A small finite-horizon deterministic sparse-reward MDP with a fixed stochastic policy and exactly known V^pi: the
lattice DAG. States are cells (x, y) with x + y < L; from (x, y) action ``R`` goes to (x + 1, y) and ``U`` to
(x, y + 1); a cell with x + y = L is terminal with reward 1 if its x is in ``win_x`` and 0 otherwise. Paths merge,
so rollouts of one group share states. V^pi(terminal) = R and V^pi(s) = gamma sum_a pi(a|s) V^pi(s'), hence the
true advantage A^pi(s, a) = gamma V^pi(s') - V^pi(s).

Three unnormalised credit estimates of A^pi for every executed step of a sampled group of N rollouts:

- ``graft`` — graph TD(0): gamma V_hat(s_{t+1}) - V_hat(s_t) from :func:`agentpost.graft.values.bellman_values`;
- ``gigpo`` — state-grouped Monte Carlo: G_t minus the mean G over the group's steps from the same state;
- ``grpo`` — trajectory credit: R_i minus the group's mean outcome, on every step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agentpost.graft.advantages import td0_advantages
from agentpost.graft.credit import mc_returns
from agentpost.graft.graph import Trajectory, build_graph
from agentpost.graft.values import bellman_values

ESTIMATORS = ("graft", "gigpo", "grpo")


@dataclass(frozen=True)
class LatticeMDP:
    """The lattice DAG (module docstring) with policy pi(R | x, y) given per non-terminal cell."""

    horizon: int
    win_x: frozenset
    p_right: dict
    gamma: float

    @classmethod
    def make(cls, *, horizon: int = 4, win_x=(1, 3), gamma: float = 0.9, seed: int = 0) -> "LatticeMDP":
        """Policy probabilities drawn once from U(0.2, 0.8) per cell (fixed by ``seed``)."""
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        rng = np.random.default_rng(seed)
        cells = [(x, s - x) for s in range(horizon) for x in range(s + 1)]
        return cls(horizon, frozenset(win_x), {c: float(rng.uniform(0.2, 0.8)) for c in cells}, gamma)

    def is_terminal(self, s) -> bool:
        return s[0] + s[1] == self.horizon

    def reward(self, s) -> float:
        return 1.0 if s[0] in self.win_x else 0.0

    @staticmethod
    def next_state(s, a: str):
        return (s[0] + 1, s[1]) if a == "R" else (s[0], s[1] + 1)

    def true_values(self) -> dict:
        """V^pi by backward induction (exact)."""
        v = {(x, self.horizon - x): self.reward((x, 0)) for x in range(self.horizon + 1)}
        for s in range(self.horizon - 1, -1, -1):
            for x in range(s + 1):
                c, p = (x, s - x), self.p_right[(x, s - x)]
                v[c] = self.gamma * (p * v[self.next_state(c, "R")] + (1 - p) * v[self.next_state(c, "U")])
        return v

    def sample(self, rng: np.random.Generator) -> Trajectory:
        s, states, actions = (0, 0), [(0, 0)], []
        while not self.is_terminal(s):
            a = "R" if rng.random() < self.p_right[s] else "U"
            s = self.next_state(s, a)
            states.append(s)
            actions.append(a)
        return Trajectory(tuple(f"{x},{y}" for x, y in states), tuple(actions), self.reward(s))


def estimates(mdp: LatticeMDP, group: list[Trajectory]) -> dict[str, np.ndarray]:
    """The three credit estimates (module docstring) and the truth, per executed step (trajectory-major)."""
    graph = build_graph(group)
    vals = bellman_values(graph, gamma=mdp.gamma)
    graft = td0_advantages(graph, vals.values, gamma=mdp.gamma)
    returns = mc_returns(group, gamma=mdp.gamma, include_step_rewards=False)
    sums, counts = (np.bincount(graph.src, weights=w, minlength=graph.n_nodes) for w in (returns, None))
    gigpo = returns - sums[graph.src] / counts[graph.src]
    outcomes = np.asarray([tr.reward for tr in group])
    grpo = np.concatenate([np.full(tr.length, r - outcomes.mean()) for tr, r in zip(group, outcomes)])
    v = mdp.true_values()
    truth = np.concatenate(
        [
            [
                mdp.gamma * v[tuple(map(int, tr.states[t + 1].split(",")))]
                - v[tuple(map(int, tr.states[t].split(",")))]
                for t in range(tr.length)
            ]
            for tr in group
        ]
    )
    return {"graft": graft, "gigpo": gigpo, "grpo": grpo, "truth": truth}


def mse_over_groups(mdp: LatticeMDP, *, group_size: int, n_groups: int, seed: int) -> dict[str, np.ndarray]:
    """Per-group mean squared error of each estimator against A^pi, for ``n_groups`` independent groups."""
    if group_size < 1 or n_groups < 1:
        raise ValueError(f"group_size and n_groups must be >= 1, got {group_size} and {n_groups}")
    rng = np.random.default_rng(seed)
    out = {k: np.zeros(n_groups) for k in ESTIMATORS}
    for g in range(n_groups):
        est = estimates(mdp, [mdp.sample(rng) for _ in range(group_size)])
        for k in ESTIMATORS:
            out[k][g] = float(np.mean((est[k] - est["truth"]) ** 2))
    return out


def ordering_margin(mse: dict[str, np.ndarray], better: str, worse: str) -> tuple[float, float]:
    """Mean paired difference MSE(worse) - MSE(better) over groups and its standard error."""
    d = mse[worse] - mse[better]
    return float(d.mean()), float(d.std(ddof=1) / np.sqrt(d.size))
