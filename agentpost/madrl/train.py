"""The GSM8K first-step diagnostic: GRPO with each arm's reward, one loop for both policies.

A policy (:mod:`agentpost.madrl.policies`: the character GRU or a Hugging Face causal LM) holds one independent copy
of the base model per (arm, target, seed) run. Within a seed, every arm and target sees the same prompts in the same
order (a paired design); sampling noise differs. One update per step: sample G completions per prompt, classify
them (:func:`agentpost.madrl.task.classify`), rewards from :func:`agentpost.madrl.rewards.arm_rewards`, GRPO
z-scored advantages per prompt group (:func:`agentpost.rl.group_advantage`) on every completion token, and the
clipped objective with an optional k3 KL to the initial model (:func:`agentpost.rl.clipped_policy_loss`, token
mean per run, summed over runs), Adam. Runs may carry their own learning rate (selected on the validation split by
:func:`select_settings`); runs with the same learning rate share one policy object and optimiser. Claim C2's
token-space baselines (:data:`agentpost.madrl.rewards.KNOB_ARMS`) carry a knob: the entropy bonus's weight beta
(used in training) or the temperature the correctness-trained copy is sampled at in evaluation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from tqdm.auto import tqdm

from agentpost.madrl.bandit import jsd
from agentpost.madrl.rewards import ARMS, KNOB_ARMS, arm_rewards, as_distribution
from agentpost.madrl.task import CATEGORIES, Problem, classify
from agentpost.rl import broadcast_sequence_values, clipped_policy_loss, group_advantage

K = len(CATEGORIES)


@dataclass(frozen=True)
class DiagConfig:
    """One diagnostic's budget and reward settings (same for every arm)."""

    steps: int
    prompts_per_step: int
    group_size: int
    lr: float
    eval_prompts: int
    eval_samples: int
    max_new_chars: int = 24
    clip_eps: float = 0.2
    kl_coef: float = 0.0
    ppo_epochs: int = 1
    eps: float = 1e-6
    target_smoothing: float = 1e-6
    invalid_policy: str = "denominator"
    invalid_reward: float = -1.0
    phat_scope: str = "group"
    reward_form: str = "table"
    task_reward_weight: float = 1.0
    mixture_divergence: str = "jsd"
    copies_per_policy: int = 0  # runs trained in one policy object at a time (0: all with the same lr); memory cap

    def __post_init__(self):
        if self.copies_per_policy < 0:
            raise ValueError(f"copies_per_policy must be >= 0 (0: no cap), got {self.copies_per_policy}")
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 (GRPO normalises within a group), got {self.group_size}")
        for name in ("steps", "prompts_per_step", "eval_prompts", "eval_samples", "max_new_chars", "ppo_epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class Run:
    """One training run: its arm, target name, seed, learning rate (None: the config's ``lr``) and, for an arm of
    :data:`KNOB_ARMS` only, its knob (``entropy``: the bonus weight beta; ``temperature``: the evaluation
    temperature T)."""

    arm: str
    target: str
    seed: int
    lr: float | None = None
    knob: float | None = None

    @property
    def eval_temperature(self) -> float:
        """The temperature this run is sampled at when evaluated (its knob for ``temperature``, else 1)."""
        return self.knob if self.arm == "temperature" else 1.0


#: make_policy(copies) -> a fresh policy with that many copies of the base model (:mod:`agentpost.madrl.policies`).
PolicyFactory = Callable[[int], object]


@torch.no_grad()
def sample(
    policy,
    prompts: torch.Tensor,
    prompt_mask: torch.Tensor,
    max_new: int,
    gen: torch.Generator,
    temperature: torch.Tensor | float = 1.0,
):
    """Completions for prompt ids [A, B, P] at ``temperature`` (a number, or one per copy [A]; no top-k/top-p),
    each row stopping where ``policy.stops`` says. Returns ids [A, B, T] (``pad`` after the stop), the sampling
    log-probabilities [A, B, T] (float32, of the tempered distribution) and the completion mask."""
    last, state = policy.start(prompts, prompt_mask)
    a, b = prompts.shape[:2]
    dev = last.device
    temp = torch.as_tensor(temperature, dtype=torch.float32, device=dev).reshape(-1)
    if not bool((temp > 0).all()) or temp.numel() not in (1, a):
        raise ValueError(f"temperature must be > 0, one number or one per copy ({a}), got {temp.tolist()}")
    temp = temp.view(-1, 1, 1)
    done = torch.zeros(a, b, dtype=torch.bool, device=dev)
    prev = torch.full((a, b), policy.pad_id, dtype=torch.int64, device=dev)
    ids, logps, masks = [], [], []
    for _ in range(max_new):
        logp_all = torch.log_softmax(last.float() / temp, -1)
        tok = torch.multinomial(logp_all.exp().view(a * b, -1), 1, generator=gen).view(a, b)
        tok = torch.where(done, policy.pad_id, tok)
        masks.append(~done)
        logps.append(torch.where(done, 0.0, logp_all.gather(-1, tok[..., None])[..., 0]))
        ids.append(tok)
        done = done | policy.stops(tok, prev)
        prev = tok
        if bool(done.all()):
            break
        last, state = policy.advance(tok, state)
    return torch.stack(ids, -1), torch.stack(logps, -1), torch.stack(masks, -1)


def _classify_all(policy, completions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    flat = completions.reshape(-1, completions.shape[-1]).cpu()
    res = [classify(policy.decode(row)) for row in flat.tolist()]
    cats = torch.tensor([c for c, _ in res], dtype=torch.int64).view(completions.shape[:-1])
    corr = torch.tensor([float(ok) for _, ok in res], dtype=torch.float64).view(completions.shape[:-1])
    return cats, corr


def extended_jsd(counts: np.ndarray, target: np.ndarray) -> float:
    """JSD between the outcome frequencies over the K categories plus "invalid" (last entry) and the target
    extended with zero mass on invalid; invalid outputs therefore count as distance."""
    p = counts / counts.sum()
    return jsd(torch.as_tensor(p), torch.as_tensor(np.append(target, 0.0)))


def _expand(t: torch.Tensor, copies: int) -> torch.Tensor:
    return t[None].expand(copies, *t.shape).contiguous()


@torch.no_grad()
def evaluate(
    policy,
    problems: list[Problem],
    n_samples: int,
    max_new: int,
    gen: torch.Generator,
    chunk: int = 512,
    temperature: torch.Tensor | float = 1.0,
) -> dict[str, np.ndarray]:
    """Per copy and prompt: outcome counts [A, n, K+1] (last = invalid), the correct ones among them and
    accuracy [A, n]; ``n_samples`` completions per prompt at ``temperature`` (one number or one per copy),
    sampled ``chunk`` rows at a time."""
    ids, mask = policy.encode(problems)
    ids, mask = ids.repeat_interleave(n_samples, 0), mask.repeat_interleave(n_samples, 0)
    cats, corr = [], []
    for s in range(0, ids.shape[0], chunk):
        comp, _, _ = sample(
            policy,
            _expand(ids[s : s + chunk], policy.copies),
            _expand(mask[s : s + chunk], policy.copies),
            max_new,
            gen,
            temperature,
        )
        c, k = _classify_all(policy, comp)
        cats.append(c)
        corr.append(k)
    cats = torch.cat(cats, 1).view(policy.copies, len(problems), n_samples)
    corr = torch.cat(corr, 1).view(policy.copies, len(problems), n_samples)
    outcomes = list(range(K)) + [-1]
    counts = np.stack([(cats == c).sum(-1).numpy() for c in outcomes], -1)
    correct = np.stack([((cats == c) & (corr > 0)).sum(-1).numpy() for c in outcomes], -1)
    return {"counts": counts, "correct_counts": correct, "accuracy": corr.mean(-1).numpy()}


def _check_inputs(runs, targets, train, test, cfg) -> dict[str, torch.Tensor]:
    for r in runs:
        if r.arm not in ARMS + KNOB_ARMS:
            raise ValueError(f"unknown arm {r.arm!r}; choose from {', '.join(ARMS + KNOB_ARMS)}")
        if (r.arm in KNOB_ARMS) != (r.knob is not None) or (r.knob is not None and not r.knob > 0):
            raise ValueError(f"run {r}: arms {', '.join(KNOB_ARMS)} need a knob > 0, the others none")
        if r.target not in targets:
            raise ValueError(f"run {r} names target {r.target!r}, which is not among {sorted(targets)}")
        if r.lr is not None and not r.lr > 0:
            raise ValueError(f"run {r} has learning rate {r.lr}; it must be > 0")
    tgt = {k: as_distribution(v, f"target {k!r}") for k, v in targets.items()}
    for k, v in tgt.items():
        if v.numel() != K:
            raise ValueError(f"target {k!r} has {v.numel()} entries; the task has {K} categories {CATEGORIES}")
    need = cfg.steps * cfg.prompts_per_step
    if need > len(train):
        raise ValueError(
            f"{need} training prompts needed ({cfg.steps} steps x {cfg.prompts_per_step}), only {len(train)} available"
        )
    if cfg.eval_prompts > len(test):
        raise ValueError(f"eval_prompts={cfg.eval_prompts} exceeds the {len(test)} held-out problems")
    return tgt


def _train_group(
    policy,
    runs: list[Run],
    lr: float,
    tgt,
    train: list[Problem],
    cfg: DiagConfig,
    gen: torch.Generator,
    reference,
    progress: bool,
) -> tuple[list[list[dict]], int]:
    """``cfg.steps`` GRPO updates of every copy of ``policy`` (copy a trains run ``runs[a]``); returns the
    per-run history of training-sample outcome counts and accuracy, and the optimiser steps actually made."""
    opt = torch.optim.Adam(policy.parameters(), lr=lr)
    order = {s: np.random.default_rng(s).permutation(len(train)) for s in {r.seed for r in runs}}
    g, n_p = cfg.group_size, cfg.prompts_per_step
    gids = torch.arange(n_p).repeat_interleave(g)
    reward_kw = dict(
        eps=cfg.eps,
        target_smoothing=cfg.target_smoothing,
        invalid_policy=cfg.invalid_policy,
        invalid_reward=cfg.invalid_reward,
        phat_scope=cfg.phat_scope,
        form=cfg.reward_form,
        task_reward_weight=cfg.task_reward_weight,
        mixture_divergence=cfg.mixture_divergence,
    )
    history = [[] for _ in runs]
    updates = 0
    for step in tqdm(
        range(cfg.steps), desc=f"MaD-RL updates (lr {lr:g}, {len(runs)} runs)", disable=not progress, mininterval=10
    ):
        enc = [policy.encode([train[i] for i in order[r.seed][step * n_p : (step + 1) * n_p]]) for r in runs]
        width = max(e[0].shape[1] for e in enc)  # left-pad every run's prompts to one width
        pad = lambda t, v: torch.nn.functional.pad(t, (width - t.shape[1], 0), value=v)  # noqa: E731
        prompts = torch.stack([pad(e[0], policy.pad_id).repeat_interleave(g, 0) for e in enc]).to(policy.device)
        pmask = torch.stack([pad(e[1], 0).repeat_interleave(g, 0) for e in enc]).to(policy.device)
        comp, logp_old, mask = sample(policy, prompts, pmask, cfg.max_new_chars, gen)
        cats, corr = _classify_all(policy, comp)
        adv = []
        for a, r in enumerate(runs):
            knob_kw = (
                {}
                if r.arm != "entropy"
                else {"entropy_coef": r.knob, "sequence_logp": logp_old[a].sum(-1).double().cpu()}
            )
            rew = arm_rewards(r.arm, cats[a], corr[a], gids, tgt[r.target], **reward_kw, **knob_kw)
            adv.append(broadcast_sequence_values(mask[a].cpu(), group_advantage(rew, gids)))
            counts = np.array([(cats[a] == c).sum().item() for c in list(range(K)) + [-1]])
            history[a].append({"step": step, "counts": counts, "accuracy": float(corr[a].mean())})
        adv = torch.stack(adv).to(device=logp_old.device, dtype=logp_old.dtype)
        ref = None
        if cfg.kl_coef:
            with torch.no_grad():
                flat = lambda t: t.reshape(1, -1, t.shape[-1])  # noqa: E731
                ref = reference.logp(flat(prompts), flat(pmask), flat(comp)).view_as(logp_old)
        for _ in range(cfg.ppo_epochs):
            logp = policy.logp(prompts, pmask, comp)
            loss = sum(
                clipped_policy_loss(
                    logp[a],
                    logp_old[a],
                    None if ref is None else ref[a],
                    adv[a],
                    mask[a],
                    eps_low=cfg.clip_eps,
                    eps_high=cfg.clip_eps,
                    dual_clip_c=None,
                    kl_coef=cfg.kl_coef,
                    kl_kind="k3",
                    agg_mode="token_mean",
                )[0]
                for a in range(len(runs))
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
            updates += 1
    return history, updates


def run_diagnostic(
    make_policy: PolicyFactory,
    runs: list[Run],
    targets: dict[str, list[float]],
    train: list[Problem],
    test: list[Problem],
    cfg: DiagConfig,
    *,
    sample_seed: int,
    progress: bool = True,
) -> dict:
    """Train every run for ``cfg.steps`` updates on ``train`` prompts and evaluate on ``cfg.eval_prompts`` of
    ``test`` (held-out test prompts, or the validation split during selection).

    Returns ``history`` (per run and step: training-sample outcome counts [K+1] and accuracy), ``updates`` (per
    run: optimiser steps actually made), ``final`` and ``initial`` evaluations (per run: per-prompt extended JSD,
    accuracy, pooled counts) and the ``eval_items``."""
    tgt = _check_inputs(runs, targets, train, test, cfg)
    reference = make_policy(1)
    gen = torch.Generator(device=reference.device).manual_seed(sample_seed)
    eval_items = [test[i] for i in np.random.default_rng(0).permutation(len(test))[: cfg.eval_prompts]]
    initial = evaluate(reference, eval_items, cfg.eval_samples, cfg.max_new_chars, gen)
    history, final, updates = [None] * len(runs), [None] * len(runs), [0] * len(runs)
    for lr in sorted({cfg.lr if r.lr is None else r.lr for r in runs}):
        same_lr = [k for k, r in enumerate(runs) if (cfg.lr if r.lr is None else r.lr) == lr]
        cap = cfg.copies_per_policy or len(same_lr)
        for idx in (same_lr[i : i + cap] for i in range(0, len(same_lr), cap)):
            policy = make_policy(len(idx))
            hist, n_updates = _train_group(
                policy, [runs[k] for k in idx], lr, tgt, train, cfg, gen, reference, progress
            )
            ev = evaluate(
                policy,
                eval_items,
                cfg.eval_samples,
                cfg.max_new_chars,
                gen,
                temperature=torch.tensor([runs[k].eval_temperature for k in idx]),
            )
            for a, k in enumerate(idx):
                history[k], final[k], updates[k] = hist[a], _summarise(ev, a, tgt[runs[k].target]), n_updates
            del policy
    return {
        "runs": runs,
        "history": history,
        "updates": updates,
        "eval_items": eval_items,
        "initial": {t: _summarise(initial, 0, tgt[t]) for t in targets},
        "final": final,
    }


def _summarise(ev: dict, a: int, target: torch.Tensor) -> dict:
    t = target.numpy()
    return {
        "jsd_per_prompt": np.array([extended_jsd(c, t) for c in ev["counts"][a]]),
        "accuracy_per_prompt": ev["accuracy"][a],
        "pooled_counts": ev["counts"][a].sum(0),
        "pooled_correct": ev["correct_counts"][a].sum(0),
        "pooled_jsd": extended_jsd(ev["counts"][a].sum(0), t),
        "accuracy": float(ev["accuracy"][a].mean()),
    }


def selection_score(arm: str, jsd_value: float, accuracy: float, task_reward_weight: float) -> float:
    """What an arm's learning rate (and knob) is selected to minimise on the validation split. correctness:
    -accuracy (its own objective); a divergence arm: JSD to the target; mixture: JSD - w * accuracy (the two parts of
    its reward r_D + w 1[correct]); a C2 baseline (entropy, temperature): JSD to the target, i.e. its knob is set
    to bring the category distribution as close to the target as it can (the claim is that it cannot)."""
    if arm == "correctness":
        return -accuracy
    if arm == "mixture":
        return jsd_value - task_reward_weight * accuracy
    return jsd_value


def select_settings(
    make_policy: PolicyFactory,
    arms,
    targets: dict[str, list[float]],
    train: list[Problem],
    validation: list[Problem],
    cfg: DiagConfig,
    lr_grid,
    *,
    seed: int,
    knob_grids=None,
    progress: bool = True,
) -> tuple[dict[str, float], dict[str, float], list[dict]]:
    """Per-arm learning rate from ``lr_grid`` (and, for an arm of :data:`KNOB_ARMS`, its knob from
    ``knob_grids[arm]``): one run per (lr, knob, arm, target) with ``seed``, trained on ``train`` prompts and scored
    on the **validation** prompts (never the test prompts) by :func:`selection_score`, averaged over the targets;
    the smallest score wins (ties: the smaller lr, then the smaller knob). Returns ({arm: lr}, {arm: knob} for the
    knob arms, rows of scores)."""
    grid = sorted(float(x) for x in lr_grid)
    if not grid or any(not x > 0 for x in grid):
        raise ValueError(f"lr_grid must be a non-empty list of positive learning rates, got {list(lr_grid)}")
    knob_grids = dict(knob_grids or {})
    knobs = {}
    for arm in arms:
        if arm in KNOB_ARMS:
            knobs[arm] = sorted(float(x) for x in knob_grids.get(arm, ()))
            if not knobs[arm] or any(not x > 0 for x in knobs[arm]):
                raise ValueError(f"arm {arm!r} needs a non-empty grid of positive knobs, got {knob_grids.get(arm)}")
        else:
            knobs[arm] = [None]
    runs = [Run(arm, t, seed, lr, k) for lr in grid for arm in arms for k in knobs[arm] for t in targets]
    diag = run_diagnostic(make_policy, runs, targets, train, validation, cfg, sample_seed=seed, progress=progress)
    rows = []
    for r, f in zip(runs, diag["final"]):
        rows.append(
            {
                "arm": r.arm,
                "target": r.target,
                "lr": r.lr,
                "knob": r.knob,
                "validation_jsd": f["pooled_jsd"],
                "validation_accuracy": f["accuracy"],
                "score": selection_score(r.arm, f["pooled_jsd"], f["accuracy"], cfg.task_reward_weight),
            }
        )
    chosen_lr, chosen_knob = {}, {}
    for arm in arms:
        mean = {
            (lr, k): np.mean([x["score"] for x in rows if x["arm"] == arm and x["lr"] == lr and x["knob"] == k])
            for lr in grid
            for k in knobs[arm]
        }
        lr, k = min(mean, key=lambda key: (mean[key], key[0], key[1] or 0.0))
        chosen_lr[arm] = lr
        if k is not None:
            chosen_knob[arm] = k
    return chosen_lr, chosen_knob, rows


def select_learning_rates(
    make_policy: PolicyFactory,
    arms,
    targets: dict[str, list[float]],
    train: list[Problem],
    validation: list[Problem],
    cfg: DiagConfig,
    lr_grid,
    *,
    seed: int,
    progress: bool = True,
) -> tuple[dict[str, float], list[dict]]:
    """:func:`select_settings` for arms without a knob: ({arm: lr}, rows of scores)."""
    lr, _, rows = select_settings(
        make_policy, arms, targets, train, validation, cfg, lr_grid, seed=seed, progress=progress
    )
    return lr, [{k: v for k, v in row.items() if k != "knob"} for row in rows]
