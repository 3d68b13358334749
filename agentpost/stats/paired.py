"""The paired public comparison protocol (v2): the one way a chapter compares two methods.

Rules (DESIGN.md "Evidence levels", issue 9):

1. Both arms must share checkpoint, data version, update count and generation-token cap (:class:`ArmMeta`),
   and be measured on at least three seeds; otherwise :func:`compare` refuses with :class:`ProtocolError`.
2. Hyperparameters and methods are chosen on validation data only: :func:`select_on_validation` accepts
   :class:`Split` objects and refuses one named ``"test"``.
3. The test comparison is paired item by item within each seed, and the **seed is the unit of replication**
   (one independent training/evaluation run; Bouthillier et al., "Accounting for Variance in Machine Learning
   Benchmarks", MLSys 2021). Items inside a seed are repeated measures, never independent replications.

Two designs, with differences ``d[s, j] = b[s][j] - a[s][j]`` for seed ``s`` and item ``j``:

* **independent** (``shared_items=False``; each seed scores its own items, items nested in seeds): the model is
  ``d[s, j] = mu + u_s + e_sj``. The seed means ``m_s`` are independent and identically distributed (given equal
  item counts), so the estimate is their mean and the 95% CI is the one-sample t interval on ``m_s`` with
  ``S - 1`` degrees of freedom -- exactly ``scipy.stats.ttest_1samp(m)``, which is also ``ttest_rel`` on the
  arms' seed means. Exact under normal seed means for any split of variance between seeds and items.
* **crossed** (``shared_items=True``; the same item list is scored in every seed): the model is
  ``d[s, j] = mu + u_s + v_j + e_sj`` with random seed, item and residual effects (the two-way random-effects
  model of Clark, "The language-as-fixed-effect fallacy", 1973; Baayen, Davidson & Bates 2008). The estimate is the
  grand mean, whose variance is ``sigma_seed^2/S + sigma_item^2/n + sigma_resid^2/(S n)``; it is estimated from the
  two-way ANOVA mean squares and the t interval uses Satterthwaite's (1946) degrees of freedom for that linear
  combination of mean squares, evaluated conservatively for the few-df seed term (:func:`crossed_t`).

A bootstrap over three seeds alone cannot carry the seed-level variance (it undercovers; see
:mod:`agentpost.stats.calibration`), so the verdict uses the t model; a percentile bootstrap over seeds (and, in
the crossed design, over seeds and items: Owen's pigeonhole bootstrap, Ann. Appl. Stat. 2007) is reported as
``bootstrap_ci`` for comparison with rliable-style intervals (Agarwal et al., NeurIPS 2021).

The minimum detectable effect comes from the same t model: the true difference a two-sided t test at ``alpha``
with the estimated standard error and degrees of freedom detects with probability ``power`` (exact power from the
noncentral t, ``scipy.stats.nct``). Verdict: *better*/*worse* when ``p < alpha``; otherwise *underpowered* when
the MDE exceeds the smallest effect of interest ``min_effect``, else *no detectable difference*.

Differences are always ``b - a`` ("method minus baseline"); ``higher_is_better`` says which sign is "better".
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Hashable, Iterable, Mapping, Sequence

import numpy as np
from scipy import optimize as _opt
from scipy import stats as _st

MIN_SEEDS = 3


class ProtocolError(ValueError):
    """The comparison would break the paired protocol (too few seeds, unmatched arms, test data in selection)."""


@dataclass(frozen=True)
class ArmMeta:
    """What both arms of a comparison must share (carried as run metadata)."""

    checkpoint: str
    data_version: str
    updates: int
    max_new_tokens: int | None = None


@dataclass(frozen=True)
class Split:
    """A named data split. Selection only accepts ``train``/``validation``-like splits, never ``test``."""

    name: str
    data: Any

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError("Split.name must be a non-empty string")


@dataclass
class PairedResult:
    """Outcome of :func:`compare` (all differences are ``b - a``)."""

    name_a: str
    name_b: str
    n_seeds: int
    n_items: int  # distinct items: per seed when crossed, summed over seeds when nested
    design: str  # "independent" | "crossed"
    method: str
    estimate: float
    ci_low: float
    ci_high: float
    se: float
    df: float
    t_stat: float
    p_value: float
    mde: float
    power: float  # power of the test at min_effect under the fitted t model
    min_effect: float
    alpha: float
    higher_is_better: bool
    verdict: str
    variance_components: dict[str, float | None]
    per_seed_mean_diff: dict[str, float]
    wilcoxon_pvalue: float  # signed-rank test on the seed means (robustness check, not used for the verdict)
    bootstrap_ci: list[float]  # percentile bootstrap (over seeds; seeds x items when crossed), for comparison
    meta: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        arrow = "higher" if self.higher_is_better else "lower"
        items = f"{self.n_items} shared items" if self.design == "crossed" else f"{self.n_items} items nested in seeds"
        return (
            f"{self.name_b} - {self.name_a}: {self.estimate:+.4g} "
            f"(95% CI [{self.ci_low:+.4g}, {self.ci_high:+.4g}], {self.n_seeds} seeds x {items}; "
            f"t({self.df:.3g}) p={self.p_value:.3g}; MDE@80% {self.mde:.3g} vs smallest effect of interest "
            f"{self.min_effect:.3g}; {arrow} is better) -> {self.verdict}"
        )


def _check_meta(meta_a: ArmMeta, meta_b: ArmMeta) -> None:
    if not isinstance(meta_a, ArmMeta) or not isinstance(meta_b, ArmMeta):
        raise ProtocolError("compare needs ArmMeta for both arms (checkpoint, data_version, updates, max_new_tokens)")
    for name in ("checkpoint", "data_version", "updates", "max_new_tokens"):
        va, vb = getattr(meta_a, name), getattr(meta_b, name)
        if va != vb:
            raise ProtocolError(f"arms differ in {name}: {va!r} vs {vb!r}; a paired comparison needs them equal")


def _paired_arrays(a: Mapping[Hashable, Sequence[float]], b: Mapping[Hashable, Sequence[float]]):
    if not isinstance(a, Mapping) or not isinstance(b, Mapping):
        raise ProtocolError("compare takes {seed: per-item values} mappings for both arms")
    if set(a) != set(b):
        raise ProtocolError(f"arms were run on different seeds: {sorted(map(str, a))} vs {sorted(map(str, b))}")
    if len(a) < MIN_SEEDS:
        raise ProtocolError(f"a paired comparison needs at least {MIN_SEEDS} seeds, got {len(a)}")
    seeds = sorted(a, key=str)
    pairs = []
    for seed in seeds:
        xa = np.asarray(a[seed], dtype=np.float64).ravel()
        xb = np.asarray(b[seed], dtype=np.float64).ravel()
        if xa.shape != xb.shape or xa.size == 0:
            raise ProtocolError(f"seed {seed}: arms must score the same non-empty item list ({xa.size} vs {xb.size})")
        if not (np.isfinite(xa).all() and np.isfinite(xb).all()):
            raise ProtocolError(f"seed {seed}: non-finite values")
        pairs.append(xb - xa)
    return seeds, pairs


# ---------------------------------------------------------------- estimators (vectorised over leading axes)

def seed_level_t(seed_means: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Estimate, standard error and df of the one-sample t model on seed means (last axis = seeds).

    ``estimate = mean(m)``, ``se = sd(m, ddof=1) / sqrt(S)``, ``df = S - 1`` (Student 1908), as in
    ``scipy.stats.ttest_1samp``.
    """
    m = np.asarray(seed_means, dtype=np.float64)
    s = m.shape[-1]
    est = m.mean(axis=-1)
    se = m.std(axis=-1, ddof=1) / math.sqrt(s)
    return est, se, np.full(est.shape, float(s - 1))


def crossed_mean_squares(d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Two-way ANOVA mean squares ``(MS_seed, MS_item, MS_resid)`` of ``d[..., seed, item]`` (no replication).

    ``E[MS_seed] = s_e^2 + n s_u^2``, ``E[MS_item] = s_e^2 + S s_v^2``, ``E[MS_resid] = s_e^2`` under the crossed
    random-effects model ``d = mu + u_s + v_j + e_sj``.
    """
    d = np.asarray(d, dtype=np.float64)
    s, n = d.shape[-2:]
    grand = d.mean(axis=(-2, -1), keepdims=True)
    rows = d.mean(axis=-1, keepdims=True)
    cols = d.mean(axis=-2, keepdims=True)
    ms_seed = n * ((rows - grand) ** 2).sum(axis=(-2, -1)) / (s - 1)
    ms_item = s * ((cols - grand) ** 2).sum(axis=(-2, -1)) / (n - 1)
    ms_resid = ((d - rows - cols + grand) ** 2).sum(axis=(-2, -1)) / ((s - 1) * (n - 1))
    return ms_seed, ms_item, ms_resid


#: One-sided confidence level of the upper bound on the seed mean square at which the crossed design's
#: Satterthwaite df are evaluated. The plug-in df (level 0.5 would be close to it) are liberal with three seeds when
#: the seed term dominates (simulated false-positive rate 0.079 at alpha 0.05), because a small draw of the 2-df
#: seed mean square shrinks the SE and raises the df together; Cochran-Cox critical values are conservative when
#: items dominate (simulated coverage 0.973). 0.7 was chosen on the calibration suite
#: (:mod:`agentpost.stats.calibration`, 4000 data sets per design) among 0.6, 0.7, 0.75, 0.8 and 0.9.
SEED_DF_UPPER_CONFIDENCE = 0.7


def crossed_t(d: np.ndarray, *, upper: float = SEED_DF_UPPER_CONFIDENCE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Estimate, standard error and df of the grand mean in the crossed design ``d[..., seed, item]``.

    ``Var(mean) = s_u^2/S + s_v^2/n + s_e^2/(S n)``. Its estimate is ``(MS_seed + c (MS_item - MS_resid)) / (S n)``
    with ``c = [MS_item > MS_resid]`` (the item component truncated at zero): the seed-mean variance ``MS_seed/(S n)``
    already carries ``s_u^2/S + s_e^2/(S n)`` and is never truncated; the shared-item term ``s_v^2/n`` is invisible
    in the seed means and is added from the item mean square. The degrees of freedom are Satterthwaite's (1946)
    ``(sum a_k M_k)^2 / sum (a_k M_k)^2 / df_k`` for that combination, with ``MS_seed`` replaced by its one-sided
    ``upper`` confidence bound ``MS_seed (S-1) / chi2_{1-upper, S-1}`` (in the df only; see
    :data:`SEED_DF_UPPER_CONFIDENCE`). Without an item component this is exactly the t test on seed means; when
    every difference is the same (all mean squares 0) the df are ``S - 1``.
    """
    d = np.asarray(d, dtype=np.float64)
    s, n = d.shape[-2:]
    ms_u, ms_v, ms_e = crossed_mean_squares(d)
    c = (ms_v > ms_e).astype(np.float64)
    var_sn = ms_u + c * (ms_v - ms_e)
    dfs = (s - 1.0, n - 1.0, (s - 1.0) * (n - 1.0))
    terms = (ms_u * (s - 1) / _st.chi2.ppf(1 - upper, s - 1), c * ms_v, -c * ms_e)
    spread = sum(t**2 / k for t, k in zip(terms, dfs))
    # Identical differences everywhere (all mean squares 0) leave the df undefined; take the seed-level S - 1.
    with np.errstate(invalid="ignore", divide="ignore"):
        df = np.where(spread > 0, sum(terms) ** 2 / spread, s - 1.0)
    return d.mean(axis=(-2, -1)), np.sqrt(var_sn / (s * n)), df


def t_interval(est, se, df, *, alpha: float = 0.05):
    """``(low, high, t, p)`` of the two-sided t test of ``mean = 0`` and its ``1 - alpha`` interval."""
    q = _st.t.ppf(1 - alpha / 2, df)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.divide(est, se)
    return est - q * se, est + q * se, t, 2 * _st.t.sf(np.abs(t), df)


def power(effect: float, se: float, df: float, *, alpha: float = 0.05) -> float:
    """Exact power of the two-sided t test at ``alpha`` when the true difference is ``effect``.

    ``P(|T'| > t_{1-alpha/2, df})`` with ``T'`` noncentral t, noncentrality ``effect / se`` (``scipy.stats.nct``).
    """
    q = _st.t.ppf(1 - alpha / 2, df)
    nc = effect / se
    return float(_st.nct.sf(q, df, nc) + _st.nct.sf(q, df, -nc))  # P(T' < -q | nc) = P(T' > q | -nc)


def mde_multiplier(df: float, *, alpha: float = 0.05, target: float = 0.8) -> float:
    """``k`` with ``power(k * se, se, df) = target``: the MDE is ``k`` standard errors (exact, noncentral t)."""
    q = _st.t.ppf(1 - alpha / 2, df)
    high = 2 * q
    while power(high, 1.0, df, alpha=alpha) < target:
        high *= 2
    return float(_opt.brentq(lambda k: power(k, 1.0, df, alpha=alpha) - target, 0.0, high))


def minimum_detectable_effect(se: float, df: float, *, alpha: float = 0.05, target: float = 0.8) -> float:
    """Smallest true difference the t test detects with probability ``target`` (80%) at the fitted SE and df."""
    return mde_multiplier(df, alpha=alpha, target=target) * float(se)


def variance_components(per_seed: Sequence[np.ndarray], crossed: bool) -> dict[str, float | None]:
    """Between-seed, between-item and residual variance of the differences (method-of-moments, truncated at 0).

    Crossed: from :func:`crossed_mean_squares`. Nested (independent items): ``seed = max(0, var(m_s) -
    mean_s(var_s / n_s))`` and ``item`` = pooled within-seed variance; item and residual effects are confounded
    when items are nested in seeds, so ``residual`` is ``None`` (it is inside ``item``).
    """
    if crossed:
        d = np.stack(per_seed)
        ms_u, ms_v, ms_e = crossed_mean_squares(d)
        s, n = d.shape
        return {"seed": float(max(0.0, (ms_u - ms_e) / n)), "item": float(max(0.0, (ms_v - ms_e) / s)),
                "residual": float(ms_e)}
    sizes = np.array([x.size for x in per_seed])
    within = np.array([x.var(ddof=1) if x.size > 1 else 0.0 for x in per_seed])
    means = np.array([x.mean() for x in per_seed])
    item = float(((sizes - 1) * within).sum() / (sizes - 1).sum()) if (sizes > 1).any() else None
    seed = float(max(0.0, means.var(ddof=1) - (np.mean(within / sizes) if item is not None else 0.0)))
    return {"seed": seed, "item": item, "residual": None}


def bootstrap_interval(x: np.ndarray, crossed: bool, *, n_boot: int, alpha: float, rng: np.random.Generator):
    """Percentile bootstrap ``(low, high)`` of the estimate, vectorised over leading axes (reported for comparison
    only; it undercovers with few seeds).

    Nested design: ``x`` holds seed means ``(..., S)`` and seeds are resampled. Crossed design: ``x`` holds the
    differences ``(..., S, n)`` and seeds and items are resampled independently (Owen's pigeonhole bootstrap, 2007).
    """
    x = np.asarray(x, dtype=np.float64)
    if crossed:
        s, n = x.shape[-2:]
        si = rng.integers(0, s, size=(n_boot, s, 1))
        ii = rng.integers(0, n, size=(n_boot, 1, n))
        boots = x[..., si, ii].mean(axis=(-2, -1))
    else:
        boots = x[..., rng.integers(0, x.shape[-1], size=(n_boot, x.shape[-1]))].mean(axis=-1)
    lo, hi = np.quantile(boots, [alpha / 2, 1 - alpha / 2], axis=-1)
    return lo, hi


def compare(
    a: Mapping[Hashable, Sequence[float]],
    b: Mapping[Hashable, Sequence[float]],
    *,
    meta_a: ArmMeta,
    meta_b: ArmMeta,
    higher_is_better: bool,
    min_effect: float,
    shared_items: bool = False,
    name_a: str = "a",
    name_b: str = "b",
    alpha: float = 0.05,
    n_boot: int = 4000,
    rng: int = 0,
) -> PairedResult:
    """Paired test comparison of arm ``b`` against arm ``a`` over seeds (see the module docstring for the model).

    ``a[seed]`` and ``b[seed]`` are per-item test values (e.g. per-article NLL) on the same items in the same order.
    ``min_effect`` (required, no default) is the smallest difference that matters to the chapter, in the metric's
    units, stated and justified where the chapter calls this. ``shared_items`` says the same items (same list, same
    order) are scored in every seed, so item is a crossed factor. ``n_boot`` and ``rng`` drive only the reported
    comparison interval ``bootstrap_ci``.
    """
    if not isinstance(min_effect, (int, float)) or isinstance(min_effect, bool) or not min_effect > 0:
        raise ProtocolError(f"min_effect must be a positive number (the smallest effect of interest), got {min_effect!r}")
    if not 0 < alpha < 1:
        raise ProtocolError(f"alpha must be in (0, 1), got {alpha!r}")
    _check_meta(meta_a, meta_b)
    seeds, per_seed = _paired_arrays(a, b)
    sizes = {x.size for x in per_seed}
    if shared_items and len(sizes) != 1:
        raise ProtocolError(f"shared_items=True needs the same item list in every seed, got item counts {sorted(sizes)}")
    n_items = per_seed[0].size
    # With one shared item the item effect is part of the estimand, and the crossed model is the seed-level one.
    crossed = bool(shared_items) and n_items > 1
    if crossed:
        est, se, df = crossed_t(np.stack(per_seed))
        method = ("crossed seeds x items: grand mean, SE from two-way ANOVA mean squares, t interval with "
                  f"Satterthwaite df (seed mean square at its {SEED_DF_UPPER_CONFIDENCE:.0%} upper bound)")
    else:
        est, se, df = seed_level_t(np.array([x.mean() for x in per_seed]))
        method = "seed is the unit: one-sample t interval on per-seed mean differences, df = seeds - 1"
    est, se, df = float(est), float(se), float(df)
    lo, hi, t_stat, p = (float(x) for x in t_interval(est, se, df, alpha=alpha))
    mde = minimum_detectable_effect(se, df, alpha=alpha)
    seed_means = np.array([x.mean() for x in per_seed])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        w_p = float(_st.wilcoxon(seed_means).pvalue) if np.any(seed_means != 0) else 1.0
    if p < alpha:
        verdict = "better" if (est > 0) == higher_is_better else "worse"
    elif mde > min_effect:
        verdict = "underpowered"
    else:
        verdict = "no detectable difference"
    boot = bootstrap_interval(np.stack(per_seed) if crossed else seed_means, crossed, n_boot=n_boot, alpha=alpha,
                              rng=np.random.default_rng(rng))
    return PairedResult(
        name_a=name_a,
        name_b=name_b,
        n_seeds=len(seeds),
        n_items=int(n_items if shared_items else sum(x.size for x in per_seed)),
        design="crossed" if shared_items else "independent",
        method=method,
        estimate=est,
        ci_low=lo,
        ci_high=hi,
        se=se,
        df=df,
        t_stat=t_stat,
        p_value=p,
        mde=mde,
        power=power(float(min_effect), se, df, alpha=alpha) if se > 0 else 1.0,
        min_effect=float(min_effect),
        alpha=float(alpha),
        higher_is_better=bool(higher_is_better),
        verdict=verdict,
        variance_components=variance_components(per_seed, crossed),
        per_seed_mean_diff={str(s): float(m) for s, m in zip(seeds, seed_means)},
        wilcoxon_pvalue=w_p,
        bootstrap_ci=[float(boot[0]), float(boot[1])],
        meta={**asdict(meta_a), "shared_items": bool(shared_items)},
    )


def select_on_validation(
    candidates: Iterable[Any],
    score: Callable[[Any, Split], float],
    validation: Split,
    *,
    higher_is_better: bool,
) -> tuple[Any, dict[Any, float]]:
    """Choose the candidate (a hyperparameter value or a method) with the best validation score.

    ``score(candidate, validation)`` sees only the validation split; passing a split named ``test`` raises
    :class:`ProtocolError`. Returns ``(best, {candidate: score})``; ties go to the earlier candidate.
    """
    if not isinstance(validation, Split):
        raise ProtocolError("select_on_validation takes a Split; wrap validation data as Split('validation', data)")
    if validation.name.lower().startswith("test"):
        raise ProtocolError("select_on_validation was given the test split; selection may only see validation data")
    candidates = list(candidates)
    if not candidates:
        raise ProtocolError("select_on_validation: no candidates")
    scores = {c: float(score(c, validation)) for c in candidates}
    sign = 1.0 if higher_is_better else -1.0
    best = max(candidates, key=lambda c: (sign * scores[c], -candidates.index(c)))
    return best, scores
