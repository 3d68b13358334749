"""The K-way softmax bandit of mad-rl.md ("Mechanism tests" 3-4): each action is a category, pi = softmax(theta).

Synthetic by construction (no data, no language): it isolates the reward's gradient from everything else.

* ``exact_gradient``: the expected policy gradient sum_c pi_c A(c) grad log pi_c with p_hat = pi exactly, which
  equals -kappa grad_theta D(pi, p*) for the matching rewards (the constants cancel because E[grad log pi] = 0).
* ``train_exact``: gradient ascent on that expectation.
* ``train_sampled``: groups of G sampled actions, rewards from each group's plug-in p_hat
  (:func:`agentpost.madrl.rewards.arm_rewards`), GRPO z-scored advantages and the clipped loss from
  :mod:`agentpost.rl` - the same update the language-model diagnostic uses, with one-token "sequences".
* ``entropy_regularised_policy`` and ``tempered``: where the two token-space knobs of claim C2 can take the
  policy (an entropy bonus on the correctness reward; a sampling temperature), and ``best_knob_jsd`` the closest
  either gets to a target over a grid of settings.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from agentpost.madrl.rewards import arm_rewards, as_distribution, category_reward, divergence, smooth_target
from agentpost.rl import clipped_policy_loss, group_advantage


def jsd(p: torch.Tensor, q: torch.Tensor) -> float:
    """Jensen-Shannon divergence in nats (the chapter's distance to the target for every arm)."""
    return float(divergence(torch.as_tensor(p, dtype=torch.float64), torch.as_tensor(q, dtype=torch.float64), "jsd"))


def expected_category_reward(
    arm: str,
    pi: torch.Tensor,
    p_star: torch.Tensor,
    q_correct: torch.Tensor,
    *,
    task_reward_weight: float = 1.0,
    mixture_divergence: str = "jsd",
    form: str = "table",
) -> torch.Tensor:
    """r(c) for every action c with p_hat = pi exactly; ``correctness`` uses the expected reward q_c = P(correct | c)."""
    if arm == "correctness":
        return q_correct
    if arm == "mixture":
        return category_reward(pi, p_star, mixture_divergence, form=form) + task_reward_weight * q_correct
    return category_reward(pi, p_star, arm, form=form)


def exact_gradient(theta: torch.Tensor, reward: torch.Tensor, *, normalise: str = "none") -> torch.Tensor:
    """sum_c pi_c A(c) grad_theta log pi_c with grad log pi_c = e_c - pi, i.e. g_j = pi_j (A_j - sum_c pi_c A_c).

    ``normalise``: ``none`` A = r; ``zscore`` A = (r - E_pi r) / (std_pi r + 1e-12), the population analogue of the
    GRPO group z-score."""
    pi = torch.softmax(theta, -1)
    a = reward - (pi * reward).sum()
    if normalise == "zscore":
        a = a / ((pi * a**2).sum().sqrt() + 1e-12)
    elif normalise != "none":
        raise ValueError(f"normalise must be 'none' or 'zscore', got {normalise!r}")
    return pi * (a - (pi * a).sum())


@dataclass
class BanditRun:
    """History of one bandit run: pi after each step ([steps+1, K]) and JSD(pi, p*) per step."""

    pi: np.ndarray
    jsd: np.ndarray
    threshold: float

    @property
    def steps_to_threshold(self) -> int | None:
        """First step at which JSD(pi, p*) < threshold (None if never)."""
        hit = np.nonzero(self.jsd < self.threshold)[0]
        return int(hit[0]) if hit.size else None


def train_exact(
    arm: str,
    target,
    init_logits,
    *,
    steps: int,
    lr: float,
    q_correct=None,
    normalise: str = "zscore",
    target_smoothing: float = 1e-6,
    threshold: float = 0.01,
    **reward_kw,
) -> BanditRun:
    """Exact policy-gradient ascent theta <- theta + lr * g (deterministic; no sampling)."""
    p_raw = as_distribution(target, "target")
    p_star = smooth_target(p_raw, target_smoothing)
    theta = torch.as_tensor(init_logits, dtype=torch.float64).clone()
    if theta.shape != p_star.shape:
        raise ValueError(f"init_logits has {theta.numel()} entries, the target has {p_star.numel()}")
    q = torch.zeros_like(p_star) if q_correct is None else torch.as_tensor(q_correct, dtype=torch.float64)
    pis = [torch.softmax(theta, -1)]
    for _ in range(steps):
        r = expected_category_reward(arm, pis[-1], p_star, q, **reward_kw)
        theta = theta + lr * exact_gradient(theta, r, normalise=normalise)
        pis.append(torch.softmax(theta, -1))
    pi = torch.stack(pis)
    return BanditRun(pi.numpy(), np.array([jsd(p, p_raw) for p in pi]), threshold)


def train_sampled(
    arm: str,
    target,
    init_logits,
    *,
    steps: int,
    group_size: int,
    groups_per_step: int,
    lr: float,
    seed: int,
    q_correct=None,
    ppo_epochs: int = 1,
    clip_eps: float = 0.2,
    eps: float = 1e-6,
    target_smoothing: float = 1e-6,
    invalid_policy: str = "denominator",
    threshold: float = 0.01,
    task_reward_weight: float = 1.0,
    mixture_divergence: str = "jsd",
) -> BanditRun:
    """Sampled GRPO on the bandit: per step ``groups_per_step`` groups of ``group_size`` actions, z-scored
    advantages per group (agentpost.rl.group_advantage), clipped objective (agentpost.rl.clipped_policy_loss,
    token_mean), plain SGD with step ``lr``. ``q_correct[c]`` is P(correct | c) for the task reward."""
    p_raw = as_distribution(target, "target")
    gen = torch.Generator().manual_seed(seed)
    theta = torch.as_tensor(init_logits, dtype=torch.float64).clone().requires_grad_(True)
    q = (
        torch.zeros(p_raw.numel(), dtype=torch.float64)
        if q_correct is None
        else torch.as_tensor(q_correct, dtype=torch.float64)
    )
    opt = torch.optim.SGD([theta], lr=lr)
    n = group_size * groups_per_step
    gids = torch.arange(groups_per_step).repeat_interleave(group_size)
    pis = [torch.softmax(theta.detach(), -1)]
    for _ in range(steps):
        with torch.no_grad():
            logp_all_old = torch.log_softmax(theta, -1)
            actions = torch.multinomial(logp_all_old.exp(), n, replacement=True, generator=gen)
            correct = torch.bernoulli(q[actions], generator=gen)
            rewards = arm_rewards(
                arm,
                actions,
                correct,
                gids,
                p_raw,
                eps=eps,
                target_smoothing=target_smoothing,
                invalid_policy=invalid_policy,
                task_reward_weight=task_reward_weight,
                mixture_divergence=mixture_divergence,
            )
            adv = group_advantage(rewards, gids)[:, None]
            logp_old = logp_all_old[actions][:, None]
        mask = torch.ones(n, 1, dtype=torch.float64)
        for _ in range(ppo_epochs):
            logp = torch.log_softmax(theta, -1)[actions][:, None]
            loss, _ = clipped_policy_loss(
                logp,
                logp_old,
                None,
                adv,
                mask,
                eps_low=clip_eps,
                eps_high=clip_eps,
                dual_clip_c=None,
                kl_coef=0.0,
                kl_kind="k3",
                agg_mode="token_mean",
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
        pis.append(torch.softmax(theta.detach(), -1))
    pi = torch.stack(pis)
    return BanditRun(pi.numpy(), np.array([jsd(p, p_raw) for p in pi]), threshold)


def entropy_regularised_policy(q_correct, beta: float) -> torch.Tensor:
    """argmax_pi E_pi[q] + beta H(pi) = softmax(q / beta) (Gibbs' variational principle): the fixed point of the
    correctness reward with an entropy bonus of weight ``beta`` > 0 (equivalently, per-action reward q_c - beta log
    pi_c, whose exact policy gradient is the gradient of that objective; tested)."""
    if not beta > 0:
        raise ValueError(f"entropy bonus beta must be > 0, got {beta}")
    return torch.softmax(torch.as_tensor(q_correct, dtype=torch.float64) / beta, -1)


def tempered(pi, temperature: float) -> torch.Tensor:
    """Sampling distribution pi^(1/T) / sum pi^(1/T) of a policy ``pi`` at temperature T > 0 (it keeps pi's order
    of the categories and tends to uniform as T grows)."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    return torch.softmax(torch.log(torch.as_tensor(pi, dtype=torch.float64)) / temperature, -1)


def best_knob_jsd(target, *, q_correct, policies: dict, betas, temperatures) -> dict:
    """The smallest JSD to ``target`` that each token-space knob reaches over its grid (claim C2): ``entropy`` over
    ``betas`` (:func:`entropy_regularised_policy`) and ``temperature:<name>`` over ``temperatures`` applied to each
    policy of ``policies`` ({name: pi}). Returns {knob: (best JSD, best setting)}."""
    p_star = as_distribution(target, "target")
    if not len(betas) or not len(temperatures):
        raise ValueError("best_knob_jsd needs non-empty betas and temperatures grids")
    out = {"entropy": min((jsd(entropy_regularised_policy(q_correct, b), p_star), float(b)) for b in betas)}
    for name, pi in policies.items():
        out[f"temperature:{name}"] = min((jsd(tempered(pi, t), p_star), float(t)) for t in temperatures)
    return out
