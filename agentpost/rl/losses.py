"""Clipped policy objective, KL estimators and loss aggregation (rl-primitives.md, sections 2-4).

All functions are pure and take explicit masks; nothing is averaged implicitly. References (semantics only):
verl ``core_algos.py::compute_policy_loss_vanilla`` (log-ratio clamp +-20, dual clip ``clip_ratio_c``),
``core_algos.py::kl_penalty`` (k1/k2/k3, ``+`` straight-through), ``core_algos.py::agg_loss`` (its seq-mean modes
skip fully masked rows), ``core_algos.py::compute_policy_loss_vanilla`` (``pg_clipfrac``); TRL
``grpo_trainer.py::_compute_loss`` (``importance_sampling_level``, loss types ``grpo``/``bnpo``/``dr_grpo``).
"""

from __future__ import annotations

import torch

from agentpost.registry import Registry

#: name -> loss aggregation ``f(loss, mask, **kw) -> scalar``.
AGGREGATIONS = Registry("aggregation")
register_aggregation = AGGREGATIONS.register


def _check_same(name: str, x: torch.Tensor, ref: torch.Tensor) -> None:
    if x.shape != ref.shape:
        raise ValueError(f"{name} has shape {tuple(x.shape)}, expected {tuple(ref.shape)}")


def masked(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``x`` where ``mask`` is set, exactly 0 elsewhere: a masked position contributes nothing, not even a NaN or
    an infinity (``x * mask`` would turn ``inf * 0`` into NaN), to the value or to the gradient."""
    return torch.where(mask.bool(), x, torch.zeros((), dtype=x.dtype, device=x.device))


def masked_group_mean(x: torch.Tensor, mask: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Mean of ``x`` over the masked positions sharing each (row, id) pair, broadcast back to those positions."""
    out = torch.zeros_like(x)
    m = mask.to(x.dtype)
    for row in range(x.shape[0]):
        for seg in torch.unique(ids[row][mask[row].bool()]):
            sel = (ids[row] == seg) & mask[row].bool()
            out[row, sel] = (x[row] * m[row])[sel].sum() / sel.sum()
    return out


def _surrogate(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    *,
    ratio_level: str = "token",
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip_c: float | None = None,
    logratio_clamp: float = 20.0,
    segment_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(objective, clip binds) per token; see :func:`policy_objective` and :func:`clip_fraction`."""
    for name, x in (("logp_old", logp_old), ("adv", adv), ("mask", mask)):
        _check_same(name, x, logp)
    if ratio_level not in ("token", "sequence", "segment"):
        raise ValueError(f"ratio_level must be token, sequence or segment, got {ratio_level!r}")
    if dual_clip_c is not None and dual_clip_c <= 1.0:
        raise ValueError(f"dual_clip_c must be > 1, got {dual_clip_c}")
    m = mask.to(logp.dtype)
    adv = masked(adv, mask)
    log_ratio = torch.clamp(masked(masked(logp, mask) - masked(logp_old, mask), mask), -logratio_clamp, logratio_clamp)
    if ratio_level == "sequence":
        log_ratio = (log_ratio * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp_min(1.0) * m
    elif ratio_level == "segment":
        if segment_ids is None:
            raise ValueError("ratio_level='segment' needs segment_ids")
        log_ratio = masked_group_mean(log_ratio, mask, segment_ids)
    ratio = torch.exp(log_ratio)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high) * adv
    obj = torch.minimum(unclipped, clipped)
    binds = (clipped < unclipped) & mask.bool()
    if dual_clip_c is not None:
        obj = torch.where(adv < 0, torch.maximum(obj, dual_clip_c * adv), obj)
    return masked(obj, mask), binds


def policy_objective(
    logp: torch.Tensor, logp_old: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, **kwargs
) -> torch.Tensor:
    """Per-token clipped surrogate objective (to be maximised; the loss is its negative), zero where mask = 0.

    l = min(rho A, clip(rho, 1-eps_low, 1+eps_high) A); with ``dual_clip_c`` = c > 1, for A < 0:
    l = max(l, c A) (verl dual clip). ``ratio_level``: ``token`` rho = exp(logp - logp_old) per token;
    ``sequence`` rho = exp(mean over the row's masked tokens of the log-ratio) (GSPO); ``segment`` the same mean
    within each segment given by ``segment_ids`` (one ratio per assistant turn). Keywords: ``ratio_level``,
    ``eps_low``, ``eps_high``, ``dual_clip_c``, ``logratio_clamp``, ``segment_ids`` (defaults token, 0.2, 0.2,
    None, 20, None).
    """
    return _surrogate(logp, logp_old, adv, mask, **kwargs)[0]


def clip_fraction(binds: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Fraction of masked tokens where the clip binds, i.e. the clipped term is the smaller one:
    A > 0 and rho > 1 + eps_high, or A < 0 and rho < 1 - eps_low (verl ``core_algos.py::compute_policy_loss_vanilla``,
    ``pg_clipfrac = masked_mean(gt(pg_losses2, pg_losses1))``; TRL ``grpo_trainer.py`` ``clip_ratio/region_mean``
    likewise counts low clips only with A < 0 and high clips only with A > 0). A token outside the clip range whose
    advantage has the other sign (or is 0) keeps its gradient and does not count."""
    return (binds & mask.bool()).sum() / mask.sum().clamp_min(1)


#: verl ``core_algos.py::kl_penalty`` mode ``low_var_kl``: k3 with the inner exponent clamped to +-20 and the
#: result clamped to +-10 (rl-primitives.md, "KL" row for verl).
LOW_VAR_KL_EXP_CLAMP = 20.0
LOW_VAR_KL_CLAMP = 10.0
KL_KINDS = ("k1", "k2", "k3", "low_var_kl")


def kl_estimate(
    logp: torch.Tensor,
    logp_ref: torch.Tensor,
    *,
    kind: str = "k3",
    straight_through_k2: bool = False,
    clamp: float | None = None,
) -> torch.Tensor:
    """Per-token KL(pi_theta || pi_ref) estimate from sampled tokens, delta = logp - logp_ref (Schulman):
    k1 = delta, k2 = delta^2 / 2, k3 = exp(-delta) + delta - 1 (>= 0), computed without any clamp.

    ``low_var_kl`` is verl's clamped k3 (``core_algos.py::kl_penalty``): exponent -delta clamped to +-20 and the
    result to +-10. ``clamp``: clip the result to [-clamp, clamp]; ``None`` means no clamp (for ``low_var_kl``
    ``None`` means verl's 10). ``straight_through_k2``: forward value of ``kind``, gradient of k2 (verl ``k3+``).
    """
    _check_same("logp_ref", logp_ref, logp)
    if kind not in KL_KINDS:
        raise ValueError(f"kind must be one of {KL_KINDS}, got {kind!r}")
    if clamp is not None and not clamp > 0:
        raise ValueError(f"clamp must be > 0 or None, got {clamp}")
    delta = logp - logp_ref
    if kind == "k1":
        value = delta
    elif kind == "k2":
        value = 0.5 * delta**2
    else:
        neg = -delta
        if kind == "low_var_kl":
            neg = torch.clamp(neg, -LOW_VAR_KL_EXP_CLAMP, LOW_VAR_KL_EXP_CLAMP)
            clamp = LOW_VAR_KL_CLAMP if clamp is None else clamp
        value = torch.exp(neg) - neg - 1.0
    if clamp is not None:
        value = torch.clamp(value, -clamp, clamp)
    if straight_through_k2:
        k2 = 0.5 * delta**2
        value = k2 - k2.detach() + value.detach()
    return value


@register_aggregation("token_mean")
def token_mean(loss: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """sum M L / sum M (verl default; TRL ``bnpo``)."""
    m = mask.to(loss.dtype)
    return masked(loss, mask).sum() / m.sum().clamp_min(1.0)


EMPTY_ROWS = ("skip", "count")


def _mean_over_rows(row_values: torch.Tensor, mask: torch.Tensor, empty_rows: str) -> torch.Tensor:
    """Mean of per-row values over the rows with at least one masked token (``skip``, verl ``agg_loss``: a fully
    masked row is neither numerator nor denominator) or over all B rows (``count``, TRL ``grpo``'s reading)."""
    if empty_rows not in EMPTY_ROWS:
        raise ValueError(f"empty_rows must be one of {EMPTY_ROWS}, got {empty_rows!r}")
    if empty_rows == "count":
        return row_values.mean()
    live = mask.bool().any(-1)
    return masked(row_values, live).sum() / live.sum().clamp_min(1)


@register_aggregation("seq_mean_token_mean")
def seq_mean_token_mean(loss: torch.Tensor, mask: torch.Tensor, *, empty_rows: str = "skip") -> torch.Tensor:
    """(1/B') sum_i (sum_t M L / sum_t M), B' the rows with a masked token (``empty_rows="count"``: B', TRL
    ``grpo``, becomes B)."""
    m = mask.to(loss.dtype)
    return _mean_over_rows(masked(loss, mask).sum(-1) / m.sum(-1).clamp_min(1.0), mask, empty_rows)


@register_aggregation("seq_mean_token_sum")
def seq_mean_token_sum(loss: torch.Tensor, mask: torch.Tensor, *, empty_rows: str = "skip") -> torch.Tensor:
    """(1/B') sum_i sum_t M L, B' as in :func:`seq_mean_token_mean`."""
    return _mean_over_rows(masked(loss, mask).sum(-1), mask, empty_rows)


@register_aggregation("seq_sum_over_width")
def seq_sum_over_width(loss: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """sum M L / T_max, T_max = the mask width (verl ``seq-mean-token-sum-norm``)."""
    return masked(loss, mask).sum() / mask.shape[-1]


@register_aggregation("dr_grpo")
def dr_grpo_mean(loss: torch.Tensor, mask: torch.Tensor, *, max_len: int) -> torch.Tensor:
    """sum M L / (B * max_completion_length) (TRL ``dr_grpo``)."""
    return masked(loss, mask).sum() / (loss.shape[0] * max_len)


@register_aggregation("global_token_mean")
def global_token_mean(loss: torch.Tensor, mask: torch.Tensor, *, global_tokens: float) -> torch.Tensor:
    """sum M L / (active tokens over all ranks): rank losses sum to the single-rank token mean (verl, OpenRLHF)."""
    return masked(loss, mask).sum() / global_tokens


def aggregate(loss: torch.Tensor, mask: torch.Tensor, mode: str, **kwargs) -> torch.Tensor:
    """Aggregate a per-token loss with the mode registered as ``mode`` (``max_len`` for ``dr_grpo``,
    ``global_tokens`` for ``global_token_mean``, optional ``empty_rows`` for the seq-mean modes)."""
    _check_same("mask", mask, loss)
    return AGGREGATIONS.lookup(mode)(loss, mask, **kwargs)


def clipped_policy_loss(
    logp: torch.Tensor,
    logp_old: torch.Tensor,
    logp_ref: torch.Tensor | None,
    adv: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float,
    eps_high: float,
    dual_clip_c: float | None,
    kl_coef: float,
    kl_kind: str,
    agg_mode: str,
    kl_clamp: float | None = None,
    ratio_level: str = "token",
    segment_ids: torch.Tensor | None = None,
    **agg_kwargs,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """L = -agg(l) + beta * agg(KL) with one aggregation for both terms (verl actor with ``use_kl_loss``).

    ``kl_kind`` / ``kl_clamp`` go to :func:`kl_estimate` (``low_var_kl`` is verl's clamped k3). Positions with
    mask 0 contribute nothing, whatever they hold (padding log-probs of -inf, NaN advantages).
    Returns the scalar loss and detached parts (``pg_loss``, ``kl``, ``clip_frac``: :func:`clip_fraction` at
    the ratio level used).
    """
    obj, binds = _surrogate(
        logp,
        logp_old,
        adv,
        mask,
        ratio_level=ratio_level,
        eps_low=eps_low,
        eps_high=eps_high,
        dual_clip_c=dual_clip_c,
        segment_ids=segment_ids,
    )
    pg = -aggregate(obj, mask, agg_mode, **agg_kwargs)
    loss = pg
    kl_val = torch.zeros((), dtype=logp.dtype)
    if kl_coef:
        if logp_ref is None:
            raise ValueError("kl_coef > 0 needs logp_ref")
        kl = kl_estimate(masked(logp, mask), masked(logp_ref, mask), kind=kl_kind, clamp=kl_clamp)
        kl_val = aggregate(kl, mask, agg_mode, **agg_kwargs)
        loss = loss + kl_coef * kl_val
    parts = {"pg_loss": pg.detach(), "kl": kl_val.detach(), "clip_frac": clip_fraction(binds, mask).detach()}
    return loss, parts
