"""The diagnostic's policy and training arms (graft.md, "Public small-model diagnostic"; Algorithm 1).

A tabular autoregressive softmax policy over canonical states. Each environment action is emitted as a sequence of
tokens (:class:`ActionCode`: the action's base-``token_base`` digits, most significant first, as few as name every
action; prefixes that lead to no action are masked), as an LLM emits a turn as several tokens; the policy has one
row of logits per (exact state hash, token prefix), created at first visit and initialised to 0, so every allowed
token starts equally likely (every action too when the number of actions is a power of the base, as MiniHack's
eight moves in three binary tokens or the gridworld's four in two). ``token_base`` 0 (or >= the number of actions)
is one token per action: the plain per-state softmax over actions. One update (Algorithm 1): ``groups_per_update`` groups of ``group_size`` rollouts
(each group shares its NetHack seeds, i.e. one task), step credit per group by the arm's method
(:func:`agentpost.graft.credit.step_credit`), every token of a step carrying its step's advantage, then
``ppo_epochs`` gradient steps on :func:`agentpost.graft.advantages.grpo_c_objective`: GRPO-C (one geometric-mean
ratio per step, clipped once; eqs. 3-4) or, for the ``*_token`` ablation arm, token-level PPO (each token's ratio
clipped). Every arm sees the same environment seeds and the same random numbers per rollout, so arms differ only
through their credit and objective.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from tqdm.auto import tqdm

from agentpost.record.outcomes import fingerprint
from agentpost.graft.advantages import grpo_c_objective
from agentpost.graft.credit import CreditConfig, step_credit
from agentpost.graft.graph import Trajectory, build_graph, node_group_stats, state_hash
from agentpost.registry import Registry
from agentpost.stats import Split, select_on_validation

#: arm -> (credit method, CreditConfig overrides, TrainConfig overrides). Ablations of Table 3: ``graft_td_nonorm``
#: without eq. 11; ``graft_td_token`` with token-level PPO (each token's ratio clipped) instead of GRPO-C.
ARM_SPECS = Registry(
    "GRAFT method",
    {
        "grpo": ("grpo", {}, {}),
        "gigpo": ("gigpo", {}, {}),
        "graft_td": ("graft_td", {}, {}),
        "graft_gae": ("graft_gae", {}, {}),
        "graft_td_nonorm": ("graft_td", {"normalise": False}, {}),
        "graft_td_token": ("graft_td", {}, {"ratio_level": "token"}),
    },
)
ARMS = ("grpo", "gigpo", "graft_td", "graft_gae")


class ActionCode:
    """Action a <-> its ``length`` base-``base`` digits (most significant first), ``length`` the fewest digits with
    base^length >= n_actions; ``base`` 0 means one token per action (base = n_actions). :meth:`allowed` gives the
    tokens that can follow a prefix and still name an action."""

    def __init__(self, n_actions: int, base: int = 0):
        if n_actions < 1 or base < 0 or base == 1:
            raise ValueError(f"ActionCode needs n_actions >= 1 and base 0 or >= 2, got {n_actions}, {base}")
        self.n_actions = n_actions
        self.base = min(base, n_actions) if base else n_actions
        self.length = 1
        while self.base**self.length < n_actions:
            self.length += 1

    def encode(self, action: int) -> tuple[int, ...]:
        return tuple((action // self.base ** (self.length - 1 - i)) % self.base for i in range(self.length))

    def decode(self, tokens) -> int:
        a = 0
        for t in tokens:
            a = a * self.base + int(t)
        return a

    def allowed(self, prefix: tuple[int, ...]) -> np.ndarray:
        """Boolean mask over the alphabet: token t may follow ``prefix`` iff some action's code starts prefix + t."""
        rest = self.base ** (self.length - len(prefix) - 1)
        start = self.decode(prefix) * self.base
        return np.asarray([(start + t) * rest < self.n_actions for t in range(self.base)])


class TabularSoftmax:
    """pi(token | s, prefix) = softmax(theta[phi(s), prefix]) over the tokens :class:`ActionCode` allows, phi the
    exact state hash; unseen rows start at 0. The action probability is the product of its tokens' probabilities
    (with one token per action: pi(a | s) = softmax(theta[phi(s)]))."""

    def __init__(self, n_actions: int, capacity: int = 256, token_base: int = 0):
        self.n_actions = n_actions
        self.code = ActionCode(n_actions, token_base)
        self.rows: dict[tuple, int] = {}
        self.table = np.zeros((capacity, self.code.base), dtype=np.float64)
        self.allowed = np.ones((capacity, self.code.base), dtype=bool)

    def row(self, state, prefix: tuple[int, ...] = ()) -> int:
        key = (state_hash(state), prefix)
        if key not in self.rows:
            if len(self.rows) == self.table.shape[0]:
                self.table = np.concatenate([self.table, np.zeros_like(self.table)])
                self.allowed = np.concatenate([self.allowed, np.ones_like(self.allowed)])
            self.rows[key] = len(self.rows)
            self.allowed[self.rows[key]] = self.code.allowed(prefix)
        return self.rows[key]

    def probs(self, row: int) -> np.ndarray:
        z = np.where(self.allowed[row], self.table[row], -np.inf)
        p = np.exp(z - z.max())
        return p / p.sum()

    def act(self, state, rng: np.random.Generator) -> tuple[tuple[tuple[int, int], ...], int]:
        """Sample the action token by token (one uniform draw per token): ``(((row, token), ...), action)``."""
        prefix, decisions = (), []
        for _ in range(self.code.length):
            row = self.row(state, prefix)
            t = int(np.searchsorted(np.cumsum(self.probs(row)), rng.random(), side="right"))
            t = min(t, int(np.flatnonzero(self.allowed[row])[-1]))
            decisions.append((row, t))
            prefix += (t,)
        return tuple(decisions), self.code.decode(prefix)

    def log_probs(self, rows: np.ndarray, tokens: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
        """(the logit leaf tensor of ``rows``, log pi of ``tokens`` at each row), both differentiable together;
        ``rows`` and ``tokens`` have shape (steps, tokens_per_action)."""
        logits = torch.tensor(self.table[rows], requires_grad=True)
        masked = logits.masked_fill(~torch.as_tensor(self.allowed[rows]), float("-inf"))
        logp = torch.log_softmax(masked, dim=-1).gather(-1, torch.as_tensor(tokens)[..., None])[..., 0]
        return logits, logp


@dataclass(frozen=True)
class TrainConfig:
    method: str = "graft_td"
    updates: int = 20
    groups_per_update: int = 1
    group_size: int = 8
    lr: float = 2.0
    token_base: int = 0
    ratio_level: str = "sequence"
    clip_eps: float = 0.2
    ppo_epochs: int = 2
    step_agg: str = "steps"
    eval_episodes: int = 64
    credit: CreditConfig = field(default_factory=CreditConfig)

    def __post_init__(self) -> None:
        ARM_SPECS.lookup(self.method)  # an unknown arm: UnknownName (a ValueError) naming it and the known ones
        if self.ratio_level not in ("sequence", "token"):
            raise ValueError(f"ratio_level must be 'sequence' (GRPO-C) or 'token' (PPO), got {self.ratio_level!r}")
        if self.token_base < 0 or self.token_base == 1:
            raise ValueError(f"token_base must be 0 (one token per action) or >= 2, got {self.token_base}")
        for name in ("updates", "groups_per_update", "group_size", "ppo_epochs", "eval_episodes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr}")


def rollout(env, policy: TabularSoftmax, core: int, disp: int, rng: np.random.Generator):
    """One episode: the :class:`Trajectory` of environment actions (binary terminal reward), per step its
    ``((row, token), ...)`` decisions (:meth:`TabularSoftmax.act`) and the agent positions of its states."""
    state, pos = env.reset(core, disp)
    states, positions, actions, decisions = [state], [pos], [], []
    while True:
        dec, a = policy.act(state, rng)
        state, pos, reward, terminated, truncated = env.step(a)
        states.append(state)
        positions.append(pos)
        actions.append(a)
        decisions.append(dec)
        if terminated or truncated:
            break
    return Trajectory(tuple(states), tuple(actions), reward, terminated=terminated), decisions, positions


def _seeds(*key: int) -> tuple[int, int]:
    core, disp = np.random.SeedSequence(list(key)).generate_state(2)
    return int(core), int(disp)


def update(policy: TabularSoftmax, decisions: list, adv: np.ndarray, cfg: TrainConfig, traj_ids: list[int]) -> int:
    """``ppo_epochs`` SGD steps on minus the clipped objective over the batch of steps (eq. 4; ``cfg.ratio_level``
    GRPO-C or token-level PPO), one row per step and one column per token, ratios against the pre-update policy;
    ``decisions`` holds each step's ``((row, token), ...)``. Returns the number of gradient steps made."""
    dec = np.asarray(decisions, dtype=np.int64).reshape(len(decisions), policy.code.length, 2)
    rows, tokens = dec[..., 0], dec[..., 1]
    adv_t = torch.as_tensor(adv, dtype=torch.float64)
    tid = torch.as_tensor(traj_ids)
    logp_old, steps = None, 0
    for _ in range(cfg.ppo_epochs):
        logits, logp = policy.log_probs(rows, tokens)
        if logp_old is None:
            logp_old = logp.detach()
        obj = grpo_c_objective(
            logp,
            logp_old,
            adv_t,
            torch.ones_like(logp),
            clip_eps=cfg.clip_eps,
            step_agg=cfg.step_agg,
            traj_ids=tid,
            ratio_level=cfg.ratio_level,
        )
        (-obj).backward()
        np.add.at(policy.table, rows.ravel(), -cfg.lr * logits.grad.numpy().reshape(-1, policy.code.base))
        steps += 1
    return steps


def evaluate(env, policy: TabularSoftmax, episodes: int) -> np.ndarray:
    """Success (0/1) of ``episodes`` sampled episodes; episode i uses the same seeds in every run (paired items)."""
    return np.asarray(
        [rollout(env, policy, *_seeds(7_777, i), np.random.default_rng([7_777, i]))[0].reward for i in range(episodes)]
    )


def train_arm(env, cfg: TrainConfig, seed: int, *, keep_group: int | None = None, progress: bool = False) -> dict:
    """Train one arm from the uniform policy; returns its history, evaluation and node-group statistics.

    ``history``: per update, the cumulative sampled episodes and env steps and the training success rate.
    ``train_success``: ``{rollout id "u<update>g<group>i<index>": 0/1}`` over every training rollout (the rollouts
    use the same environment seeds and random numbers in every arm). ``init``: fingerprint of the starting logit
    table; ``grad_steps``: gradient steps actually made.
    ``group_stats``: :func:`agentpost.graft.graph.node_group_stats` of every group (exact matching).
    ``gae_minus_td_max``: max |A^GAE - A^TD(0)| seen (GRAFT arms; the identity of graft.md says 0).
    ``kept``: the trajectories and positions of group number ``keep_group`` (for a figure).
    ``credit_time_fraction``: share of the run's wall time spent building graphs and computing credit.
    """
    method, credit_overrides, train_overrides = ARM_SPECS.lookup(cfg.method)
    credit_cfg = replace(cfg.credit, **credit_overrides)
    cfg = replace(cfg, **train_overrides)
    policy = TabularSoftmax(env.n_actions, token_base=cfg.token_base)
    init = fingerprint(policy.table)
    t_start, t_credit = time.perf_counter(), 0.0
    history, stats, kept, train_success = [], [], None, {}
    episodes = steps = grad_steps = 0
    gae_td = 0.0
    for u in tqdm(range(cfg.updates), desc=cfg.method, disable=not progress, leave=False):
        decisions, advs, tids, successes = [], [], [], []
        for g in range(cfg.groups_per_update):
            core, disp = _seeds(seed, u, g)
            group = [
                rollout(env, policy, core, disp, np.random.default_rng([seed, u, g, i])) for i in range(cfg.group_size)
            ]
            trajs = [tr for tr, _, _ in group]
            t0 = time.perf_counter()
            credit = step_credit(method, trajs, credit_cfg)
            t_credit += time.perf_counter() - t0
            graph = credit.graph if credit.graph is not None else build_graph(trajs)
            stats.append(node_group_stats(graph))
            if credit.td is not None:
                gae_td = max(gae_td, float(np.max(np.abs(credit.raw - credit.td))) if credit.raw.size else 0.0)
            if keep_group is not None and u * cfg.groups_per_update + g == keep_group:
                kept = {"trajectories": trajs, "positions": [p for _, _, p in group]}
            for i, ((tr, r, _), a) in enumerate(zip(group, credit.per_traj)):
                decisions += r
                advs.append(a)
                tids += [g * cfg.group_size + i] * tr.length
                successes.append(tr.reward)
                episodes += 1
                steps += tr.length
                train_success[f"u{u}g{g}i{i}"] = tr.reward
        grad_steps += update(policy, decisions, np.concatenate(advs), cfg, tids)
        history.append(
            {"update": u + 1, "episodes": episodes, "env_steps": steps, "train_success": float(np.mean(successes))}
        )
    train_s = time.perf_counter() - t_start
    return {
        "history": history,
        "eval_success": evaluate(env, policy, cfg.eval_episodes),
        "group_stats": stats,
        "gae_minus_td_max": gae_td,
        "kept": kept,
        "n_states": len({key[0] for key in policy.rows}),
        "credit_time_fraction": t_credit / train_s,
        "train_success": train_success,
        "init": init,
        "grad_steps": grad_steps,
    }


def select_lr(env, base: TrainConfig, arms, lr_grid, validation_seeds) -> tuple[dict, list[dict]]:
    """Per arm, the learning rate of ``lr_grid`` with the highest mean training success over ``validation_seeds``
    (:func:`agentpost.stats.select_on_validation`; the seeds are used only here). Returns ``{arm: lr}`` and one row
    per (arm, lr) with its validation score and whether the choice sits at an edge of the grid."""
    grid = sorted(float(x) for x in lr_grid)
    if len(grid) < 3:
        raise ValueError(f"lr_grid needs at least 3 values so that a choice can be interior, got {lr_grid}")
    val = Split("validation", list(validation_seeds))
    chosen, rows = {}, []
    for arm in arms:

        def score(lr, split, arm=arm):
            return float(
                np.mean(
                    [
                        np.mean(list(train_arm(env, replace(base, method=arm, lr=lr), s)["train_success"].values()))
                        for s in split.data
                    ]
                )
            )

        chosen[arm], scores = select_on_validation(grid, score, val, higher_is_better=True)
        rows += [
            {
                "arm": arm,
                "lr": lr,
                "validation_train_success": v,
                "selected": lr == chosen[arm],
                "at_grid_edge": chosen[arm] in (grid[0], grid[-1]),
            }
            for lr, v in scores.items()
        ]
    return chosen, rows


def run_arms(
    env, base: TrainConfig, seed: int, arms=ARMS, *, lr_by_arm: dict | None = None, progress: bool = True
) -> dict:
    """Every arm once at ``seed`` with the same samples and updates: ``{arm: train_arm(...)}``; ``lr_by_arm``
    overrides the learning rate per arm (as selected on validation seeds). Each run keeps the group of its middle
    update for a figure."""
    out = {}
    for arm in tqdm(arms, desc="arms", disable=not progress):
        cfg = replace(base, method=arm, lr=(lr_by_arm or {}).get(arm, base.lr))
        out[arm] = train_arm(env, cfg, seed, keep_group=(base.updates // 2) * base.groups_per_update)
    return out
