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
noncentral t, ``scipy.stats.nct``).

Verdicts say how big (issue 27). The smallest effect of interest ``min_effect`` = delta defines a region of practical
equivalence [-delta, delta] (Kruschke's ROPE, 2018; Lakens's TOST equivalence test, 2017), and every result falls in
one of :data:`VERDICT_CLASSES`: *matters* (the 95% CI lies wholly beyond delta on one side), *equivalent* (the 90%
CI, i.e. two one-sided tests at ``alpha`` each, lies inside (-delta, delta)), *detectable* (the 95% CI excludes 0 but
neither of the above: a difference that may be negligible), *inconclusive*, or *no_information* (every per-item
difference is exactly zero). :data:`CONCLUSIVE` are the classes that decide a claim.

Bounded outcomes (0/1 successes, or values declared ``bounds=(lo, hi)``) near a floor or ceiling get a standard error
that cannot collapse: the variance of the estimate is floored at the pooled variance of the differences, shrunk by
half a pseudo-pair in each cell of the paired 2 x 2 table (Agresti & Min, "Simple improved confidence intervals for
comparing matched proportions", Stat. Med. 2005), divided by the number of cells; and the MDE counts the extra
variance a true effect adds to bounded outcomes (see :func:`bounded_floor` and :func:`minimum_detectable_effect`).

Differences are always ``b - a`` ("method minus baseline"); ``higher_is_better`` says which sign is "better".
"""

from __future__ import annotations

import functools
import math
import numbers
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Hashable, Iterable, Mapping, Sequence

import numpy as np
from scipy import optimize as _opt
from scipy import stats as _st

MIN_SEEDS = 3

#: The verdict classes, in the order a reader meets them, with what each means (``min_effect`` = delta).
VERDICT_CLASSES = {
    "matters": "the 95% CI lies wholly beyond the smallest effect of interest on one side: a difference that matters",
    "detectable": "the 95% CI excludes 0 but is neither wholly beyond delta nor inside (-delta, delta): a detectable "
    "difference that may be negligible",
    "equivalent": "the 90% CI (two one-sided tests at alpha) lies inside (-delta, delta): practically equivalent",
    "inconclusive": "none of the above: the data cannot tell (the planner says how many seeds x items would)",
    "no_information": "identical arms: every per-item difference is exactly zero, nothing to learn",
}
#: The classes that decide a claim one way or the other.
CONCLUSIVE = ("matters", "equivalent")

#: Smallest degrees of freedom a t reference gets. Satterthwaite's df for a combination of mean squares with a
#: negative coefficient (the crossed design's ``MS_item - MS_resid``) can fall far below 1 (0.2 for 0/1 outcomes
#: with equal seed means), where the t quantiles and the MDE search blow up; 1 df (the Cauchy) is the widest usual
#: reference and keeps every result finite.
DF_FLOOR = 1.0

#: Draw counts one bootstrap chunk may hold (replicates x (seeds + items)); larger inputs are resampled chunk by
#: chunk, which gives the same distribution of replicates.
BOOT_CHUNK_ELEMENTS = 1 << 22
#: Most index draws (replicates x (seeds + items)) ``compare`` spends on its reported bootstrap interval; beyond it
#: the number of replicates is reduced (3 seeds x 40,000 shared items: 838 replicates) and ``method`` says so.
BOOT_MAX_DRAWS = 1 << 25


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
    verdict: str  # short label: better / worse / "better, may be negligible" / equivalent / inconclusive / ...
    verdict_class: str  # one of VERDICT_CLASSES
    direction: str | None  # "better" | "worse" when the 95% CI excludes 0, else None
    ci90_low: float  # the 90% CI of the equivalence test (TOST at alpha per side)
    ci90_high: float
    bounds: list[float] | None  # outcome bounds (0/1 outcomes detected, or declared) that floored the variance
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
        cls = self.verdict_class.replace("_", " ")
        if self.verdict_class == "equivalent" and self.direction:
            cls += f" (detectably {self.direction}, by less than the smallest effect of interest)"
        return (
            f"{self.name_b} - {self.name_a}: {self.estimate:+.4g} "
            f"(95% CI [{self.ci_low:+.4g}, {self.ci_high:+.4g}], {self.n_seeds} seeds x {items}; "
            f"t({self.df:.3g}) p={self.p_value:.3g}; MDE@80% {self.mde:.3g} vs smallest effect of interest "
            f"{self.min_effect:.3g}; {arrow} is better) -> {self.verdict} [{cls}]"
        )


def check_meta(meta_a: ArmMeta, meta_b: ArmMeta) -> None:
    """Refuse a pairing of arms whose starting checkpoint, data, update count or token cap differ."""
    if not isinstance(meta_a, ArmMeta) or not isinstance(meta_b, ArmMeta):
        raise ProtocolError("compare needs ArmMeta for both arms (checkpoint, data_version, updates, max_new_tokens)")
    for name in ("checkpoint", "data_version", "updates", "max_new_tokens"):
        va, vb = getattr(meta_a, name), getattr(meta_b, name)
        if va != vb:
            raise ProtocolError(f"arms differ in {name}: {va!r} vs {vb!r}; a paired comparison needs them equal")


def _labelled(x, where: str) -> tuple[list | None, np.ndarray]:
    """``(item ids or None, 1-D float values)`` of one arm's values at one seed: a pandas Series (ids = index), a
    ``{item_id: value}`` mapping, or a positional 1-D sequence."""
    if isinstance(x, Mapping):
        ids, values = list(x.keys()), list(x.values())
    elif hasattr(x, "index") and hasattr(x, "to_numpy"):  # pandas Series (a DataFrame is refused below as 2-D)
        ids, values = (list(x.index) if getattr(x, "ndim", 1) == 1 else None), x.to_numpy()
    else:
        ids, values = None, x
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as err:
        raise ProtocolError(f"{where}: values are not numbers ({err})") from None
    if arr.ndim != 1:
        raise ProtocolError(f"{where}: per-item values must be one-dimensional, got shape {arr.shape}")
    if ids is not None and len(set(ids)) != len(ids):
        raise ProtocolError(f"{where}: duplicate item ids")
    return ids, arr


def _aligned(xa, xb, order, where: str):
    """Arm values of one seed as two arrays in ``order`` (item ids) or in position; refuses mismatches."""
    ia, va = _labelled(xa, f"{where}, arm a")
    ib, vb = _labelled(xb, f"{where}, arm b")
    if (ia is None) != (ib is None):
        raise ProtocolError(f"{where}: one arm has item ids and the other is positional; give ids for both or neither")
    if ia is None:
        if va.shape != vb.shape or va.size == 0:
            raise ProtocolError(f"{where}: arms must score the same non-empty item list ({va.size} vs {vb.size})")
        return None, va, vb
    order = ia if order is None else order
    pa, pb = dict(zip(ia, va)), dict(zip(ib, vb))
    for name, got in (("arm a", pa), ("arm b", pb)):
        if set(got) != set(order) or not order:
            odd = sorted(map(str, set(got) ^ set(order)))[:5]
            raise ProtocolError(f"{where}, {name}: item ids differ from the item list being paired (e.g. {odd})")
    return order, np.array([pa[k] for k in order]), np.array([pb[k] for k in order])


def _paired_arrays(a, b, *, shared_items: bool):
    """Seeds and per-seed arm values paired item by item (by id when ids are given; in the same id order in every
    seed when items are shared), refusing what cannot be paired."""
    if not isinstance(a, Mapping) or not isinstance(b, Mapping):
        raise ProtocolError("compare takes {seed: per-item values} mappings for both arms")
    if set(a) != set(b):
        raise ProtocolError(f"arms were run on different seeds: {sorted(map(str, a))} vs {sorted(map(str, b))}")
    if len(a) < MIN_SEEDS:
        raise ProtocolError(f"a paired comparison needs at least {MIN_SEEDS} seeds, got {len(a)}")
    seeds = sorted(a, key=str)
    order, arms = None, []
    for seed in seeds:
        ids, xa, xb = _aligned(a[seed], b[seed], order if shared_items else None, f"seed {seed}")
        order = ids if shared_items else None
        if not (np.isfinite(xa).all() and np.isfinite(xb).all()):
            raise ProtocolError(f"seed {seed}: non-finite values")
        arms.append((xa, xb))
    return seeds, arms


def _bounds(arms, bounds) -> tuple[float, float] | None:
    """The outcome bounds: declared ``(lo, hi)`` (checked against the data), or (0, 1) when every value is 0 or 1."""
    values = np.concatenate([x for pair in arms for x in pair])
    if bounds is None:
        return (0.0, 1.0) if np.isin(values, (0.0, 1.0)).all() else None
    try:
        lo, hi = (float(v) for v in bounds)
    except (TypeError, ValueError):
        raise ProtocolError(f"bounds must be a pair (low, high) of numbers, got {bounds!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ProtocolError(f"bounds must be finite with low < high, got {bounds!r}")
    if values.min() < lo or values.max() > hi:
        raise ProtocolError(
            f"values in [{values.min():.4g}, {values.max():.4g}] fall outside the declared bounds {bounds!r}"
        )
    return lo, hi


def _real(value, name: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real) or not math.isfinite(float(value)):
        raise ProtocolError(f"{name} must be a finite number, got {value!r}")
    return float(value)


# ---------------------------------------------------------------- estimators (vectorised over leading axes)


def seed_level_t(seed_means: np.ndarray, weights: np.ndarray | None = None):
    """Estimate, standard error and df of the t model on seed means (last axis = seeds).

    Equal weights: ``estimate = mean(m)``, ``se = sd(m, ddof=1) / sqrt(S)``, ``df = S - 1`` (Student 1908), as in
    ``scipy.stats.ttest_1samp``. Weights ``w`` (item counts): ``estimate = sum w m / sum w`` (the pooled item mean)
    with the cluster-robust (CR1) standard error ``sqrt(S/(S-1) sum w'^2 (m - estimate)^2)``, ``w' = w / sum w``,
    seeds as clusters (Liang & Zeger 1986), df ``S - 1``; with equal weights this is the same t test.
    """
    m = np.asarray(seed_means, dtype=np.float64)
    s = m.shape[-1]
    if weights is None:
        est = m.mean(axis=-1)
        se = m.std(axis=-1, ddof=1) / math.sqrt(s)
    else:
        w = np.asarray(weights, dtype=np.float64) / np.sum(weights)
        est = (w * m).sum(axis=-1)
        se = np.sqrt(s / (s - 1) * (w**2 * (m - est[..., None]) ** 2).sum(axis=-1))
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


def crossed_variance_df(ms_u, ms_v, ms_e, s: int, n: int, *, upper: float = SEED_DF_UPPER_CONFIDENCE):
    """``(S n Var(mean), df)`` of the crossed design from its mean squares (observed, or expected when planning).

    ``S n Var = MS_seed + c (MS_item - MS_resid)`` with ``c = [MS_item > MS_resid]``; df are Satterthwaite's (1946)
    ``(sum a_k M_k)^2 / sum (a_k M_k)^2 / df_k`` with ``MS_seed`` at its one-sided ``upper`` bound
    ``MS_seed (S-1) / chi2_{1-upper, S-1}`` (in the df only), ``S - 1`` when every mean square is 0, and never below
    :data:`DF_FLOOR`.
    """
    ms_u, ms_v, ms_e = (np.asarray(x, dtype=np.float64) for x in (ms_u, ms_v, ms_e))
    c = (ms_v > ms_e).astype(np.float64)
    var_sn = ms_u + c * (ms_v - ms_e)
    dfs = (s - 1.0, n - 1.0, (s - 1.0) * (n - 1.0))
    terms = (ms_u * (s - 1) / _st.chi2.ppf(1 - upper, s - 1), c * ms_v, -c * ms_e)
    spread = sum(t**2 / k for t, k in zip(terms, dfs))
    with np.errstate(invalid="ignore", divide="ignore"):
        df = np.where(spread > 0, sum(terms) ** 2 / spread, s - 1.0)
    return var_sn, np.maximum(df, DF_FLOOR)


def crossed_t(d: np.ndarray, *, upper: float = SEED_DF_UPPER_CONFIDENCE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Estimate, standard error and df of the grand mean in the crossed design ``d[..., seed, item]``.

    ``Var(mean) = s_u^2/S + s_v^2/n + s_e^2/(S n)``, estimated by :func:`crossed_variance_df`: the seed-mean
    variance ``MS_seed/(S n)`` already carries ``s_u^2/S + s_e^2/(S n)`` and is never truncated; the shared-item term
    ``s_v^2/n`` is invisible in the seed means and is added from ``MS_item - MS_resid`` (truncated at zero). Without
    an item component this is exactly the t test on seed means.
    """
    d = np.asarray(d, dtype=np.float64)
    s, n = d.shape[-2:]
    var_sn, df = crossed_variance_df(*crossed_mean_squares(d), s, n, upper=upper)
    return d.mean(axis=(-2, -1)), np.sqrt(var_sn / (s * n)), df


def bounded_floor(d: np.ndarray, width: float, *, axis=None):
    """Shrunken variance of one paired difference of outcomes bounded in an interval of ``width`` (over ``axis``).

    With ``x = d / width`` in [-1, 1] over ``N`` pairs, half a pseudo-pair in each cell of the paired 2 x 2 table
    (Agresti & Min 2005: 0.5 at +1, 0.5 at -1, 1 at 0): ``width^2 [(sum x^2 + 1)/(N + 2) - (sum x / (N + 2))^2]``. For
    0/1 outcomes with ``n+`` and ``n-`` discordant pairs it is ``q+ + q- - (q+ - q-)^2`` with ``q = (n + 0.5)/(N + 2)``.
    Divided by ``N`` it is a lower bound (in expectation) on the variance of the estimate in both designs, since
    pooling all cells gives every component a weight of at most its own (``1/N <= 1/S, 1/n``).
    """
    x = np.asarray(d, dtype=np.float64) / width
    k = (x.size if axis is None else math.prod(x.shape[a] for a in np.atleast_1d(axis))) + 2.0
    return width**2 * ((np.sum(x**2, axis=axis) + 1.0) / k - (np.sum(x, axis=axis) / k) ** 2)


def floor_se(se, df, floor_var, n_seeds: int, *, bounded: bool):
    """``(se, df, floored)`` with the variance of the estimate floored at ``floor_var`` (vectorised).

    Bounded outcomes: always ``se^2 >= floor_var`` (:func:`bounded_floor` / N). Unbounded: only a zero ``se`` while
    the differences vary (equal seed means) is lifted to the pooled variance / N. Where the floor binds the df are
    the seed-level ``S - 1``.
    """
    se, df, floor_var = (np.asarray(x, dtype=np.float64) for x in (se, df, floor_var))
    floored = se**2 < floor_var if bounded else (se == 0) & (floor_var > 0)
    return np.where(floored, np.sqrt(floor_var), se), np.where(floored, n_seeds - 1.0, df), floored


def t_interval(est, se, df, *, alpha: float = 0.05):
    """``(low, high, t, p)`` of the two-sided t test of ``mean = 0`` and its ``1 - alpha`` interval."""
    q = _st.t.ppf(1 - alpha / 2, df)
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.divide(est, se)
    return est - q * se, est + q * se, t, 2 * _st.t.sf(np.abs(t), df)


def verdict_class(est, se, df, min_effect, *, alpha: float = 0.05):
    """The :data:`VERDICT_CLASSES` key of each result (vectorised; ``no_information`` is decided by the caller).

    *matters*: the ``1 - alpha`` CI lies beyond ``min_effect`` on one side; *equivalent*: the ``1 - 2 alpha`` CI lies
    inside ``(-min_effect, min_effect)`` (TOST at ``alpha``; Lakens 2017); *detectable*: the ``1 - alpha`` CI
    excludes 0; else *inconclusive*. *matters* and *equivalent* cannot both hold (the 90% CI lies inside the 95% CI).
    """
    lo, hi, _, _ = t_interval(est, se, df, alpha=alpha)
    lo90, hi90, _, _ = t_interval(est, se, df, alpha=2 * alpha)
    matters = (lo > min_effect) | (hi < -min_effect)
    equivalent = (lo90 > -min_effect) & (hi90 < min_effect)
    detectable = (lo > 0) | (hi < 0)
    return np.select([matters, equivalent, detectable], ["matters", "equivalent", "detectable"], "inconclusive")


def power(effect: float, se: float, df: float, *, alpha: float = 0.05) -> float:
    """Exact power of the two-sided t test at ``alpha`` when the true difference is ``effect``.

    ``P(|T'| > t_{1-alpha/2, df})`` with ``T'`` noncentral t, noncentrality ``effect / se`` (``scipy.stats.nct``).
    """
    q = _st.t.ppf(1 - alpha / 2, df)
    nc = effect / se
    return float(_st.nct.sf(q, df, nc) + _st.nct.sf(q, df, -nc))  # P(T' < -q | nc) = P(T' > q | -nc)


@functools.lru_cache(maxsize=4096)
def mde_multiplier(df: float, *, alpha: float = 0.05, target: float = 0.8) -> float:
    """``k`` with ``power(k * se, se, df) = target``: the MDE is ``k`` standard errors (exact, noncentral t)."""
    df = max(float(df), DF_FLOOR)
    q = _st.t.ppf(1 - alpha / 2, df)
    high = 2 * q
    while power(high, 1.0, df, alpha=alpha) < target:
        high *= 2
    return float(_opt.brentq(lambda k: power(k, 1.0, df, alpha=alpha) - target, 0.0, high))


def bounded_extra_variance(effect, observed, width: float, n_cells: float):
    """Variance a true difference ``effect`` adds to the estimate of bounded outcomes beyond what the observed
    difference already carries: ``max(0, g(|effect|) - g(|observed|)) / N`` with ``g(x) = x (width - x)`` for
    ``x <= width / 2`` (the variance of a difference that moves ``x / width`` of the pairs by ``width``; for 0/1
    outcomes at a floor, ``p_b (1 - p_b) - p_a (1 - p_a)`` to first order)."""

    def g(x):
        x = np.minimum(np.abs(x), width / 2)
        return x * (width - x)

    return np.maximum(0.0, g(effect) - g(observed)) / n_cells


def minimum_detectable_effect(
    se: float, df: float, *, alpha: float = 0.05, target: float = 0.8, bounded: tuple[float, float, float] | None = None
) -> float:
    """Smallest true difference the t test detects with probability ``target`` (80%) at the fitted SE and df.

    ``k(df) se`` with ``k`` from :func:`mde_multiplier`. For bounded outcomes (``bounded = (observed, width, N)``)
    the effect's own variance counts: the MDE solves ``D = k sqrt(se^2 + extra(D))`` with ``extra`` from
    :func:`bounded_extra_variance` (bisection; unique root since ``extra`` grows slower than ``D^2``).
    """
    k = mde_multiplier(df, alpha=alpha, target=target)
    if bounded is None or not se > 0:
        return k * float(se)
    observed, width, n_cells = bounded
    lo, hi = 0.0, k * math.sqrt(se**2 + width**2 / (4 * n_cells))
    for _ in range(60):
        mid = (lo + hi) / 2
        if mid < k * math.sqrt(se**2 + float(bounded_extra_variance(mid, observed, width, n_cells))):
            lo = mid
        else:
            hi = mid
    return hi


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
        return {
            "seed": float(max(0.0, (ms_u - ms_e) / n)),
            "item": float(max(0.0, (ms_v - ms_e) / s)),
            "residual": float(ms_e),
        }
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
    Each replicate is scored from its draw counts (a matrix product, no gathered copy of the data), in chunks of
    replicates whose counts hold at most about :data:`BOOT_CHUNK_ELEMENTS` values, so memory stays bounded for any
    number of items.
    """
    x = np.asarray(x, dtype=np.float64)
    s, n = x.shape[-2:] if crossed else (x.shape[-1], 1)
    chunk = max(1, BOOT_CHUNK_ELEMENTS // (x.size // n + s + n))
    parts = []
    for start in range(0, n_boot, chunk):
        size = min(chunk, n_boot - start)
        si = rng.integers(0, s, size=(size, s))
        seeds = _counts(si, s)  # replicate x seed: how often each seed was drawn
        if crossed:  # sum_sj c_s c'_j d_sj / (S n): a matrix product of draw counts instead of a gather
            items = _counts(rng.integers(0, n, size=(size, n)), n)
            parts.append(np.einsum("bs,...sb->...b", seeds, x @ items.T) / (s * n))
        else:
            parts.append(x @ seeds.T / s)
    boots = np.concatenate(parts, axis=-1)
    lo, hi = np.quantile(boots, [alpha / 2, 1 - alpha / 2], axis=-1)
    return lo, hi


def _counts(draws: np.ndarray, size: int) -> np.ndarray:
    """Row-wise counts of the values ``0..size-1`` in ``draws`` (replicates x draws)."""
    offsets = size * np.arange(draws.shape[0])[:, None]
    return np.bincount((draws + offsets).ravel(), minlength=draws.shape[0] * size).reshape(-1, size).astype(np.float64)


def _label(cls: str, direction: str | None) -> str:
    if cls == "matters":
        return direction
    if cls == "detectable":
        return f"{direction}, may be negligible"
    if cls == "equivalent" and direction:  # inside the margin, yet the 95% CI excludes 0: say which way
        return f"equivalent, detectably {direction}"
    return cls.replace("_", " ")


def compare(
    a: Mapping[Hashable, Any],
    b: Mapping[Hashable, Any],
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
    bounds: tuple[float, float] | None = None,
) -> PairedResult:
    """Paired test comparison of arm ``b`` against arm ``a`` over seeds (see the module docstring for the model).

    ``a[seed]`` and ``b[seed]`` are per-item test values: either positional 1-D sequences (the same items in the same
    order in both arms), or labelled by item id -- a pandas Series (ids = index) or a ``{item_id: value}`` dict --
    in which case the arms are paired by id (different id sets are refused; so are one labelled and one positional
    arm, and 2-D input). ``shared_items`` says the same items are scored in every seed (crossed design; with ids, every
    seed must hold the same id set). In the nested design seeds may hold different numbers of items: seeds are
    weighted by item count (the estimate is the pooled item mean, with a cluster-robust standard error over seeds;
    :func:`seed_level_t`), which the result's ``method`` states.

    ``min_effect`` (required, finite, > 0) is the smallest difference that matters to the chapter, in the metric's
    units, stated and justified where the chapter calls this; it sets the verdict class. ``bounds``: the outcome's
    range for the variance floor; by default 0/1 outcomes are detected and bounded in (0, 1). ``n_boot`` and ``rng``
    drive only the reported comparison interval ``bootstrap_ci``.

    Degenerate data: identical arms are *no_information* (t, p, MDE and power NaN unless bounded, whose floor still
    sizes them); unbounded differences that all equal one non-zero value are deterministic: a zero-width CI, NaN t, p
    and MDE, and the class from that value against ``min_effect`` (``method`` says so).
    """
    min_effect = _real(min_effect, "min_effect")
    if not min_effect > 0:
        raise ProtocolError(f"min_effect must be positive (the smallest effect of interest), got {min_effect!r}")
    alpha = _real(alpha, "alpha")
    if not 0 < alpha < 0.5:
        raise ProtocolError(f"alpha must be in (0, 0.5), got {alpha!r}")
    if not isinstance(higher_is_better, (bool, np.bool_)):
        raise ProtocolError(f"higher_is_better must be True or False, got {higher_is_better!r}")
    higher_is_better = bool(higher_is_better)
    check_meta(meta_a, meta_b)
    seeds, arms = _paired_arrays(a, b, shared_items=shared_items)
    bounds = _bounds(arms, bounds)
    per_seed = [xb - xa for xa, xb in arms]
    sizes = np.array([x.size for x in per_seed])
    if shared_items and len(set(sizes)) != 1:
        raise ProtocolError(
            f"shared_items=True needs the same item list in every seed, got item counts {sorted(set(sizes))}"
        )
    everything = np.concatenate(per_seed)
    n_items = int(sizes[0])
    seed_means = np.array([x.mean() for x in per_seed])
    # With one shared item the item effect is part of the estimand, and the crossed model is the seed-level one.
    crossed = bool(shared_items) and n_items > 1
    if crossed:
        est, se, df = crossed_t(np.stack(per_seed))
        method = (
            "crossed seeds x items: grand mean, SE from two-way ANOVA mean squares, t interval with "
            f"Satterthwaite df (seed mean square at its {SEED_DF_UPPER_CONFIDENCE:.0%} upper bound)"
        )
    elif len(set(sizes)) == 1:
        est, se, df = seed_level_t(seed_means)
        method = "seed is the unit: one-sample t interval on per-seed mean differences, df = seeds - 1"
    else:
        est, se, df = seed_level_t(seed_means, sizes)
        method = (
            f"seed is the unit, seeds weighted by item count ({sizes.min()}-{sizes.max()} items): pooled item "
            "mean, cluster-robust SE over seeds, df = seeds - 1"
        )
    est, se, df = float(est), float(se), float(df)
    n_cells = float(everything.size)
    width = None if bounds is None else bounds[1] - bounds[0]
    floor = (bounded_floor(everything, width) if width else everything.var()) / n_cells
    se, df, floored = (float(x) for x in floor_se(se, df, floor, len(seeds), bounded=width is not None))
    if floored:
        method += (
            f"; variance floored at the {'Agresti-Min shrunken bounded' if width else 'pooled'} variance of "
            "the differences / pairs (df = seeds - 1)"
        )
    lo, hi, t_stat, p = (float(x) for x in t_interval(est, se, df, alpha=alpha))
    lo90, hi90, _, _ = (float(x) for x in t_interval(est, se, df, alpha=2 * alpha))
    if se > 0:
        bounded = None if width is None else (est, width, n_cells)
        mde = minimum_detectable_effect(se, df, alpha=alpha, bounded=bounded)
        se_at = math.sqrt(se**2 + (float(bounded_extra_variance(min_effect, est, width, n_cells)) if width else 0.0))
        pw = power(min_effect, se_at, df, alpha=alpha)
    else:  # unbounded and every difference is the same: no scale to test or size an effect against
        mde = pw = t_stat = p = math.nan
        if np.any(everything != 0):
            method += (
                f"; deterministic: every per-item difference equals {everything[0]:.6g}, so the CI has zero "
                "width and the class compares that value with the smallest effect of interest"
            )
    if not np.any(everything != 0):
        cls = "no_information"
    else:
        cls = str(verdict_class(est, se, df, min_effect, alpha=alpha))
    direction = None
    if cls != "no_information" and (lo > 0 or hi < 0):
        direction = "better" if (est > 0) == higher_is_better else "worse"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        w_p = float(_st.wilcoxon(seed_means).pvalue) if np.any(seed_means != 0) else 1.0
    draws = len(seeds) + (n_items if crossed else 0)
    if n_boot * draws > BOOT_MAX_DRAWS:
        n_boot = max(1, BOOT_MAX_DRAWS // draws)
        method += f"; bootstrap_ci from {n_boot} replicates (capped: {len(seeds)} seeds x {n_items} items)"
    boot = bootstrap_interval(
        np.stack(per_seed) if crossed else seed_means,
        crossed,
        n_boot=n_boot,
        alpha=alpha,
        rng=np.random.default_rng(rng),
    )
    return PairedResult(
        name_a=name_a,
        name_b=name_b,
        n_seeds=len(seeds),
        n_items=int(n_items if shared_items else sizes.sum()),
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
        power=pw,
        min_effect=min_effect,
        alpha=alpha,
        higher_is_better=higher_is_better,
        verdict=_label(cls, direction),
        verdict_class=cls,
        direction=direction,
        ci90_low=lo90,
        ci90_high=hi90,
        bounds=None if bounds is None else list(bounds),
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
