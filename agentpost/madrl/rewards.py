"""MaD-RL per-sample rewards (mad-rl.md, "Per-sample rewards" table and "Why these rewards work").

For a group of G samples with categories c_1..c_G (``-1`` = invalid, no category), the plug-in estimate
p_hat(c) = #{i: c_i = c} / G (invalid samples stay in the denominator by default) is clamped at ``eps`` where a
log or a ratio needs it, and sample i gets r_i = r(c_i):

=================  ==========================================  =====================================
divergence D        reward r(c) (``form="table"``)              relation to the gradient
=================  ==========================================  =====================================
``l2``              p*(c) - p_hat(c)                             = -1/2 dD/dp_hat(c)
``forward_kl``      p*(c) / p_hat(c) - 1                         = -dD/dp_hat(c) - 1
``reverse_kl``      log p*(c) - log p_hat(c)                     = -dD/dp_hat(c) + 1
``jsd``             (log m(c) - log p_hat(c)) / 2, m=(p*+p_hat)/2 = -dD/dp_hat(c)
=================  ==========================================  =====================================

``form="gradient"`` returns -dD/dp_hat(c) exactly. The two forms differ by a positive scale and a constant, so
group z-scored advantages are identical (tested). The table is the third-party implementation's
(github.com/daiwk/auto-research ``src/auto_research/post_training/mad_rl.py``, semantics only), which states it
matches Table 1 of the paper; the paper's own text was not available.
"""

from __future__ import annotations

from typing import Sequence

import torch

from agentpost.rl.divergence import DIVERGENCES as DIVERGENCES_RL

#: The paper's four matching divergences (a fixed set: each has a closed-form reward below), L2 and the shared
#: KL-family ones of agentpost.rl.divergence.
DIVERGENCES = ("l2", "forward_kl", "reverse_kl", "jsd")
#: kappa and the constant b in r_table(c) = kappa * (-dD/dp_hat(c)) + b.
TABLE_RELATION = {"l2": (0.5, 0.0), "forward_kl": (1.0, -1.0), "reverse_kl": (1.0, 1.0), "jsd": (1.0, 0.0)}


def _check_divergence(name: str) -> None:
    if name not in DIVERGENCES:
        raise ValueError(f"unknown divergence {name!r}; choose one of {', '.join(DIVERGENCES)}")


def as_distribution(p: Sequence[float] | torch.Tensor, name: str = "distribution") -> torch.Tensor:
    """``p`` as a float64 probability vector; raises naming ``name`` when it is negative or does not sum to 1."""
    t = torch.as_tensor(p, dtype=torch.float64)
    if t.ndim != 1 or t.numel() < 2:
        raise ValueError(f"{name} must be a 1-D vector over >= 2 categories, got shape {tuple(t.shape)}")
    if (t < 0).any() or not torch.isfinite(t).all() or abs(float(t.sum()) - 1.0) > 1e-6:
        raise ValueError(f"{name} must be non-negative and sum to 1, got {t.tolist()}")
    return t


def smooth_target(p_star: torch.Tensor, eps: float) -> torch.Tensor:
    """(p* + eps) / (1 + K eps): finite log p* for zero-mass categories (the paper does not say how a zero-mass category
    is scored; eps=0: unchanged)."""
    if eps < 0:
        raise ValueError(f"target_smoothing must be >= 0, got {eps}")
    return (p_star + eps) / (1.0 + eps * p_star.numel())


def divergence(p_hat: torch.Tensor, p_star: torch.Tensor, name: str) -> torch.Tensor:
    """D(p_hat, p*): ``l2`` sum (p_hat - p*)^2; otherwise the shared divergence of :mod:`agentpost.rl.divergence`
    with the target p* as P and p_hat as Q: ``forward_kl`` KL(p* || p_hat); ``reverse_kl`` KL(p_hat || p*);
    ``jsd`` KL(p* || m)/2 + KL(p_hat || m)/2 with m = (p* + p_hat)/2. Terms with zero weight are 0 (0 log 0 = 0).
    Differentiable in ``p_hat`` (autograd reference of the reward tests)."""
    _check_divergence(name)
    if name == "l2":
        return ((p_hat - p_star) ** 2).sum(-1)
    return DIVERGENCES_RL.lookup(name)(torch.log(p_star), torch.log(p_hat))


def neg_gradient(p_hat: torch.Tensor, p_star: torch.Tensor, name: str) -> torch.Tensor:
    """-dD/dp_hat(c) in closed form (p_hat > 0): l2 2(p* - p_hat); forward_kl p*/p_hat; reverse_kl
    log p* - log p_hat - 1; jsd (log m - log p_hat)/2 (the p*/(2m) and p_hat/(2m) terms cancel)."""
    _check_divergence(name)
    if name == "l2":
        return 2.0 * (p_star - p_hat)
    if name == "forward_kl":
        return p_star / p_hat
    if name == "reverse_kl":
        return torch.log(p_star) - torch.log(p_hat) - 1.0
    return 0.5 * (torch.log(0.5 * (p_star + p_hat)) - torch.log(p_hat))


def category_reward(p_hat: torch.Tensor, p_star: torch.Tensor, name: str, *, form: str = "table") -> torch.Tensor:
    """r(c) for every category c at (p_hat, p*): the spec's table (``table``) or -dD/dp_hat (``gradient``)."""
    if form not in ("table", "gradient"):
        raise ValueError(f"reward form must be 'table' or 'gradient', got {form!r}")
    g = neg_gradient(p_hat, p_star, name)
    if form == "gradient":
        return g
    kappa, b = TABLE_RELATION[name]
    return kappa * g + b


def empirical_distribution(
    categories: torch.Tensor, n_categories: int, *, eps: float, invalid_policy: str = "denominator"
) -> torch.Tensor:
    """p_hat(c) = #{i: c_i = c} / n over one group, clamped below at ``eps``.

    ``invalid_policy``: ``denominator`` counts invalid samples (c_i = -1) in n = G (spec default); ``exclude``
    uses n = number of valid samples. A group without valid samples gives the all-``eps`` vector.
    """
    if invalid_policy not in ("denominator", "exclude"):
        raise ValueError(f"invalid_policy must be 'denominator' or 'exclude', got {invalid_policy!r}")
    if not eps > 0:
        raise ValueError(f"eps must be > 0 (it clamps p_hat inside logs and ratios), got {eps}")
    c = torch.as_tensor(categories, dtype=torch.int64)
    if ((c < -1) | (c >= n_categories)).any():
        raise ValueError(f"categories must lie in [-1, {n_categories - 1}] (-1 = invalid), got {c.tolist()}")
    valid = c >= 0
    counts = torch.bincount(c[valid], minlength=n_categories).to(torch.float64)
    n = c.numel() if invalid_policy == "denominator" else int(valid.sum())
    p = counts / n if n > 0 else counts
    return p.clamp_min(eps)


def matching_rewards(
    categories: Sequence[int] | torch.Tensor,
    group_ids: Sequence[int] | torch.Tensor,
    target: Sequence[float] | torch.Tensor,
    divergence_name: str,
    *,
    eps: float = 1e-6,
    target_smoothing: float = 1e-6,
    invalid_policy: str = "denominator",
    invalid_reward: float = -1.0,
    phat_scope: str = "group",
    form: str = "table",
) -> torch.Tensor:
    """Per-sample distribution-matching rewards r_i = r(c_i) (pseudo-code steps 1-3 of mad-rl.md).

    ``phat_scope``: p_hat per prompt group (``group``, default) or pooled over the batch (``batch``). Invalid
    samples (c_i = -1) get ``invalid_reward``. Returns float64 of shape [n].
    """
    if phat_scope not in ("group", "batch"):
        raise ValueError(f"phat_scope must be 'group' or 'batch', got {phat_scope!r}")
    p_star = smooth_target(as_distribution(target, "target"), target_smoothing)
    c = torch.as_tensor(categories, dtype=torch.int64)
    g = torch.as_tensor(group_ids)
    if c.shape != g.shape or c.ndim != 1:
        raise ValueError(
            f"categories and group_ids must be 1-D of equal length, got {tuple(c.shape)}, {tuple(g.shape)}"
        )
    out = torch.full(c.shape, float(invalid_reward), dtype=torch.float64)
    scopes = [torch.ones_like(c, dtype=torch.bool)] if phat_scope == "batch" else [g == gid for gid in torch.unique(g)]
    for sel in scopes:
        p_hat = empirical_distribution(c[sel], p_star.numel(), eps=eps, invalid_policy=invalid_policy)
        table = category_reward(p_hat, p_star, divergence_name, form=form)
        cs = c[sel]
        vals = torch.full(cs.shape, float(invalid_reward), dtype=torch.float64)
        vals[cs >= 0] = table[cs[cs >= 0]]
        out[sel] = vals
    return out


def arm_rewards(
    arm: str,
    categories: torch.Tensor,
    correct: torch.Tensor,
    group_ids: torch.Tensor,
    target: torch.Tensor,
    *,
    mixture_divergence: str = "jsd",
    task_reward_weight: float = 1.0,
    sequence_logp: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    **matching_kw,
) -> torch.Tensor:
    """Rewards of one training arm: ``correctness`` r_i = 1[correct_i] (the task-reward baseline); a divergence
    name: the matching reward alone; ``mixture``: matching reward of ``mixture_divergence`` + w * 1[correct_i]
    (the paper leaves the weight open: w = ``task_reward_weight``).

    The two token-space baselines of claim C2 (:data:`KNOB_ARMS`): ``entropy`` r_i = 1[correct_i] - beta log pi(y_i)
    with beta = ``entropy_coef`` and ``sequence_logp`` the sampled completions' log-probabilities (summed over their
    tokens); since E_y[(log pi(y) + 1) grad log pi(y)] = -grad H(pi), its expected policy gradient is
    grad (E[1[correct]] + beta H(pi(.|x))), the correctness objective plus an entropy bonus over the policy's
    token sequences (the bandit's q_c - beta log pi_c, one token per sequence). ``temperature`` trains on the
    correctness reward; its knob is the temperature it is *sampled* at afterwards (:func:`agentpost.madrl.train.evaluate`)."""
    corr = torch.as_tensor(correct, dtype=torch.float64)
    if arm in ("correctness", "temperature"):
        return corr
    if arm == "entropy":
        if sequence_logp is None or not entropy_coef > 0:
            raise ValueError(f"arm 'entropy' needs sequence_logp and entropy_coef > 0, got entropy_coef={entropy_coef}")
        lp = torch.as_tensor(sequence_logp, dtype=torch.float64)
        if lp.shape != corr.shape:
            raise ValueError(f"sequence_logp has shape {tuple(lp.shape)}, correct has {tuple(corr.shape)}")
        return corr - entropy_coef * lp
    if arm == "mixture":
        return (
            matching_rewards(categories, group_ids, target, mixture_divergence, **matching_kw)
            + task_reward_weight * corr
        )
    if arm in DIVERGENCES:
        return matching_rewards(categories, group_ids, target, arm, **matching_kw)
    raise ValueError(
        f"unknown arm {arm!r}; choose correctness, mixture, {', '.join(KNOB_ARMS)} or one of {', '.join(DIVERGENCES)}"
    )


ARMS = ("correctness",) + DIVERGENCES + ("mixture",)
#: Claim C2's token-space baselines: the correctness reward with an entropy bonus (knob: its weight beta) and the
#: correctness-trained policy sampled at a temperature (knob: T). Each run of one of them carries its knob.
KNOB_ARMS = ("entropy", "temperature")
