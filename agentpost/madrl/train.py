"""The GSM8K first-step diagnostic: GRPO on the character GRU with each arm's reward, all runs batched.

Every (arm, target, seed) run is one copy of :class:`agentpost.madrl.stacked.StackedGRU`, initialised from the
same pretrained checkpoint. Within a seed, every arm and target sees the same prompts in the same order (a paired
design); sampling noise differs. One update per step: sample G completions per prompt, classify them
(:func:`agentpost.madrl.task.classify`), rewards from :func:`agentpost.madrl.rewards.arm_rewards`, GRPO
z-scored advantages per prompt group (:func:`agentpost.rl.group_advantage`) on every completion token, and the
clipped objective with an optional k3 KL to the pretrained model (:func:`agentpost.rl.clipped_policy_loss`,
token mean per run, summed over runs), Adam.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from tqdm.auto import tqdm

from agentpost.madrl.bandit import jsd
from agentpost.madrl.gru import EOS, PAD, CharGRU, decode, encode, prompt_ids
from agentpost.madrl.rewards import ARMS, arm_rewards, as_distribution
from agentpost.madrl.stacked import StackedGRU
from agentpost.madrl.task import CATEGORIES, Problem, classify, prompt_text
from agentpost.rl import broadcast_sequence_values, clipped_policy_loss, group_advantage

K = len(CATEGORIES)
_GT = encode(">")[0]


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

    def __post_init__(self):
        if self.group_size < 2:
            raise ValueError(f"group_size must be >= 2 (GRPO normalises within a group), got {self.group_size}")
        for name in ("steps", "prompts_per_step", "eval_prompts", "eval_samples", "max_new_chars", "ppo_epochs"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class Run:
    """One training run: its arm, target name and seed."""

    arm: str
    target: str
    seed: int


@torch.no_grad()
def sample(model: StackedGRU, prompts: torch.Tensor, max_new: int, gen: torch.Generator):
    """Completions for prompt ids [A, B, P] at temperature 1, stopping after ``<eos>`` or the first ``>>``.

    Returns ids [A, B, T] (``<pad>`` after the stop), the sampling log-probabilities [A, B, T] and the mask."""
    logits, h = model(prompts)
    last = logits[:, :, -1]
    a, b = prompts.shape[:2]
    done = torch.zeros(a, b, dtype=torch.bool)
    prev = torch.full((a, b), PAD, dtype=torch.int64)
    ids, logps, masks = [], [], []
    for _ in range(max_new):
        logp_all = torch.log_softmax(last, -1)
        tok = torch.multinomial(logp_all.exp().view(a * b, -1), 1, generator=gen).view(a, b)
        tok = torch.where(done, PAD, tok)
        masks.append(~done)
        logps.append(torch.where(done, 0.0, logp_all.gather(-1, tok[..., None])[..., 0]))
        ids.append(tok)
        done = done | (tok == EOS) | ((tok == _GT) & (prev == _GT))
        prev = tok
        if bool(done.all()):
            break
        logits, h = model(tok[..., None], h)
        last = logits[:, :, -1]
    return torch.stack(ids, -1), torch.stack(logps, -1), torch.stack(masks, -1)


def completion_logp(model, prompts: torch.Tensor, completions: torch.Tensor) -> torch.Tensor:
    """log pi(completion token | prefix) [A, B, T] under ``model`` (teacher forcing)."""
    full = torch.cat([prompts, completions], -1)
    logits, _ = model(full[..., :-1])
    logits = logits[..., prompts.shape[-1] - 1:, :]
    return torch.log_softmax(logits, -1).gather(-1, completions[..., None])[..., 0]


def _classify_all(completions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    flat = completions.reshape(-1, completions.shape[-1])
    res = [classify(decode(row)) for row in flat.tolist()]
    cats = torch.tensor([c for c, _ in res], dtype=torch.int64).view(completions.shape[:-1])
    corr = torch.tensor([float(ok) for _, ok in res], dtype=torch.float64).view(completions.shape[:-1])
    return cats, corr


def extended_jsd(counts: np.ndarray, target: np.ndarray) -> float:
    """JSD between the outcome frequencies over the K categories plus "invalid" (last entry) and the target
    extended with zero mass on invalid; invalid outputs therefore count as distance."""
    p = counts / counts.sum()
    return jsd(torch.as_tensor(p), torch.as_tensor(np.append(target, 0.0)))


@torch.no_grad()
def evaluate(model: StackedGRU, problems: list[Problem], n_samples: int, prompt_chars: int, max_new: int,
             gen: torch.Generator) -> dict[str, np.ndarray]:
    """Per copy and held-out prompt: outcome counts [A, n, K+1] (last = invalid), the correct ones among them and
    accuracy [A, n]."""
    p = prompt_ids([prompt_text(q.question, prompt_chars) for q in problems], prompt_chars)
    prompts = p.repeat_interleave(n_samples, 0)[None].expand(model.copies, -1, -1).contiguous()
    comp, _, _ = sample(model, prompts, max_new, gen)
    cats, corr = _classify_all(comp)
    cats = cats.view(model.copies, len(problems), n_samples)
    corr = corr.view(model.copies, len(problems), n_samples)
    outcomes = list(range(K)) + [-1]
    counts = np.stack([(cats == c).sum(-1).numpy() for c in outcomes], -1)
    correct = np.stack([((cats == c) & (corr > 0)).sum(-1).numpy() for c in outcomes], -1)
    return {"counts": counts, "correct_counts": correct, "accuracy": corr.mean(-1).numpy()}


def run_diagnostic(base: CharGRU, runs: list[Run], targets: dict[str, list[float]], train: list[Problem],
                   test: list[Problem], cfg: DiagConfig, *, sample_seed: int, progress: bool = True) -> dict:
    """Train every run for ``cfg.steps`` updates and evaluate on ``cfg.eval_prompts`` held-out prompts.

    Returns ``history`` (per run and step: training-sample outcome counts [K+1] and accuracy), ``final`` and
    ``initial`` evaluations (per run: per-prompt extended JSD, accuracy, pooled counts)."""
    for r in runs:
        if r.arm not in ARMS:
            raise ValueError(f"unknown arm {r.arm!r}; choose from {', '.join(ARMS)}")
        if r.target not in targets:
            raise ValueError(f"run {r} names target {r.target!r}, which is not among {sorted(targets)}")
    tgt = {k: as_distribution(v, f"target {k!r}") for k, v in targets.items()}
    for k, v in tgt.items():
        if v.numel() != K:
            raise ValueError(f"target {k!r} has {v.numel()} entries; the task has {K} categories {CATEGORIES}")
    need = cfg.steps * cfg.prompts_per_step
    if need > len(train):
        raise ValueError(f"{need} training prompts needed ({cfg.steps} steps x {cfg.prompts_per_step}), "
                         f"only {len(train)} available")
    if cfg.eval_prompts > len(test):
        raise ValueError(f"eval_prompts={cfg.eval_prompts} exceeds the {len(test)} held-out problems")
    pc = base.config.prompt_chars
    gen = torch.Generator().manual_seed(sample_seed)
    model = StackedGRU(base, len(runs))
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    order = {s: np.random.default_rng(s).permutation(len(train)) for s in {r.seed for r in runs}}
    eval_items = [test[i] for i in np.random.default_rng(0).permutation(len(test))[:cfg.eval_prompts]]
    g, n_p = cfg.group_size, cfg.prompts_per_step
    gids = torch.arange(n_p).repeat_interleave(g)
    reward_kw = dict(eps=cfg.eps, target_smoothing=cfg.target_smoothing, invalid_policy=cfg.invalid_policy,
                     invalid_reward=cfg.invalid_reward, phat_scope=cfg.phat_scope, form=cfg.reward_form,
                     task_reward_weight=cfg.task_reward_weight, mixture_divergence=cfg.mixture_divergence)
    initial = evaluate(StackedGRU(base, 1), eval_items, cfg.eval_samples, pc, cfg.max_new_chars, gen)
    history = [[] for _ in runs]
    for step in tqdm(range(cfg.steps), desc="MaD-RL GRU updates", disable=not progress, mininterval=10):
        rows = []
        for r in runs:
            idx = order[r.seed][step * n_p:(step + 1) * n_p]
            rows.append(prompt_ids([prompt_text(train[i].question, pc) for i in idx], pc).repeat_interleave(g, 0))
        prompts = torch.stack(rows)
        comp, logp_old, mask = sample(model, prompts, cfg.max_new_chars, gen)
        cats, corr = _classify_all(comp)
        adv = []
        for a, r in enumerate(runs):
            rew = arm_rewards(r.arm, cats[a], corr[a], gids, tgt[r.target], **reward_kw)
            adv.append(broadcast_sequence_values(mask[a], group_advantage(rew, gids)))
            counts = np.array([(cats[a] == c).sum().item() for c in list(range(K)) + [-1]])
            history[a].append({"step": step, "counts": counts, "accuracy": float(corr[a].mean())})
        adv = torch.stack(adv).to(logp_old.dtype)
        ref = None
        if cfg.kl_coef:
            with torch.no_grad():
                flat = lambda t: t.reshape(-1, t.shape[-1])  # noqa: E731
                ref = completion_logp(base, flat(prompts), flat(comp)).view_as(logp_old)
        for _ in range(cfg.ppo_epochs):
            logp = completion_logp(model, prompts, comp)
            loss = sum(clipped_policy_loss(logp[a], logp_old[a], None if ref is None else ref[a], adv[a], mask[a],
                                           eps_low=cfg.clip_eps, eps_high=cfg.clip_eps, dual_clip_c=None,
                                           kl_coef=cfg.kl_coef, kl_kind="k3", agg_mode="token_mean")[0]
                       for a in range(len(runs)))
            opt.zero_grad()
            loss.backward()
            opt.step()
    final = evaluate(model, eval_items, cfg.eval_samples, pc, cfg.max_new_chars, gen)

    def summarise(ev, a, target):
        t = tgt[target].numpy()
        return {"jsd_per_prompt": np.array([extended_jsd(c, t) for c in ev["counts"][a]]),
                "accuracy_per_prompt": ev["accuracy"][a], "pooled_counts": ev["counts"][a].sum(0),
                "pooled_correct": ev["correct_counts"][a].sum(0),
                "pooled_jsd": extended_jsd(ev["counts"][a].sum(0), t), "accuracy": float(ev["accuracy"][a].mean())}

    return {"runs": runs, "history": history, "eval_items": eval_items,
            "initial": {t: summarise(initial, 0, t) for t in targets},
            "final": [summarise(final, a, r.target) for a, r in enumerate(runs)]}
