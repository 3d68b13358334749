"""The paired public comparison protocol: the one way a chapter compares two methods.

Rules (issue "evidence pipeline", DESIGN.md "Evidence levels"):

1. Both arms must share checkpoint, data version, update count and generation-token cap (:class:`ArmMeta`),
   and be measured on at least three seeds; otherwise :func:`compare` refuses with :class:`ProtocolError`.
2. Hyperparameters and methods are chosen on validation data only: :func:`select_on_validation` accepts
   :class:`Split` objects and refuses one named ``"test"``.
3. The test comparison is paired item by item within each seed. Reported: per-seed mean differences and the
   pooled mean difference (seeds x items), a percentile bootstrap 95% CI that resamples items within each seed,
   a paired t-test and a Wilcoxon signed-rank test on the pooled differences, the minimum detectable effect at
   80% power, and a verdict.

Differences are always ``b - a`` ("method minus baseline"); ``higher_is_better`` says which sign is "better".
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Hashable, Iterable, Mapping, Sequence

import numpy as np
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
    n_pairs: int
    per_seed_mean_diff: dict[str, float]
    mean_diff: float
    ci_low: float
    ci_high: float
    t_stat: float
    t_pvalue: float
    wilcoxon_pvalue: float
    sign_test_pvalue: float
    mde_80: float
    min_effect: float
    higher_is_better: bool
    verdict: str
    meta: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        arrow = "higher" if self.higher_is_better else "lower"
        return (
            f"{self.name_b} - {self.name_a}: mean diff {self.mean_diff:+.4g} "
            f"(95% CI [{self.ci_low:+.4g}, {self.ci_high:+.4g}], {self.n_seeds} seeds x "
            f"{self.n_pairs // max(self.n_seeds, 1)} items; t-test p={self.t_pvalue:.3g}, "
            f"Wilcoxon p={self.wilcoxon_pvalue:.3g}; MDE@80% {self.mde_80:.3g}; {arrow} is better) "
            f"-> {self.verdict}"
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


def bootstrap_ci(diffs_per_seed: Sequence[np.ndarray], *, n_boot: int = 4000, level: float = 0.95,
                 rng: np.random.Generator | int = 0) -> tuple[float, float]:
    """Percentile bootstrap CI of the pooled mean difference, resampling items within each seed (stratified)."""
    rng = np.random.default_rng(rng)
    total = sum(d.size for d in diffs_per_seed)
    boots = np.zeros(n_boot)
    for d in diffs_per_seed:
        idx = rng.integers(0, d.size, size=(n_boot, d.size))
        boots += d[idx].sum(axis=1)
    boots /= total
    lo, hi = np.quantile(boots, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(lo), float(hi)


def minimum_detectable_effect(diffs: np.ndarray, *, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest true mean difference a two-sided paired t-test at ``alpha`` detects with probability ``power``.

    Normal approximation with the t quantiles: MDE = (t_{1-alpha/2, n-1} + t_{power, n-1}) * sd(d) / sqrt(n).
    """
    n = diffs.size
    sd = float(np.std(diffs, ddof=1)) if n > 1 else float("inf")
    q = _st.t.ppf(1 - alpha / 2, n - 1) + _st.t.ppf(power, n - 1)
    return float(q * sd / np.sqrt(n))


def sign_test_pvalue(diffs: np.ndarray) -> float:
    """Two-sided exact sign test (zeros dropped)."""
    pos, neg = int((diffs > 0).sum()), int((diffs < 0).sum())
    if pos + neg == 0:
        return 1.0
    return float(_st.binomtest(pos, pos + neg, 0.5).pvalue)


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
    """Paired test comparison of arm ``b`` against arm ``a`` over seeds.

    ``a[seed]`` and ``b[seed]`` are per-item test values (e.g. per-article NLL) on the same items in the same order.
    ``min_effect`` (required, no default) is the smallest difference that matters to the chapter, stated and
    justified where the chapter calls this: when nothing is significant and the run could not have detected an
    effect of that size (MDE > ``min_effect``) the verdict is ``underpowered`` rather than ``no detectable
    difference``. ``shared_items`` says the same items (same list, same order) are scored in every seed, so item is
    a crossed factor.
    """
    if not isinstance(min_effect, (int, float)) or isinstance(min_effect, bool) or not min_effect > 0:
        raise ProtocolError(f"min_effect must be a positive number (the smallest effect of interest), got {min_effect!r}")
    _check_meta(meta_a, meta_b)
    seeds, per_seed = _paired_arrays(a, b)
    d = np.concatenate(per_seed)
    mean = float(d.mean())
    lo, hi = bootstrap_ci(per_seed, n_boot=n_boot, rng=rng)
    if np.allclose(d, d[0]):
        t_stat, t_p = (0.0, 1.0) if d[0] == 0 else (float(np.sign(d[0]) * np.inf), 0.0)
        w_p = 1.0 if d[0] == 0 else 0.0
    else:
        t = _st.ttest_1samp(d, 0.0)
        t_stat, t_p = float(t.statistic), float(t.pvalue)
        w_p = float(_st.wilcoxon(d, zero_method="wilcox").pvalue) if np.any(d != 0) else 1.0
    mde = minimum_detectable_effect(d, alpha=alpha)
    significant = t_p < alpha and (lo > 0 or hi < 0)
    if significant:
        good = (mean > 0) == higher_is_better
        verdict = "better" if good else "worse"
    elif mde > min_effect and min_effect > 0:
        verdict = "underpowered"
    else:
        verdict = "no detectable difference"
    return PairedResult(
        name_a=name_a,
        name_b=name_b,
        n_seeds=len(seeds),
        n_pairs=int(d.size),
        per_seed_mean_diff={str(s): float(x.mean()) for s, x in zip(seeds, per_seed)},
        mean_diff=mean,
        ci_low=lo,
        ci_high=hi,
        t_stat=t_stat,
        t_pvalue=t_p,
        wilcoxon_pvalue=w_p,
        sign_test_pvalue=sign_test_pvalue(d),
        mde_80=mde,
        min_effect=float(min_effect),
        higher_is_better=higher_is_better,
        verdict=verdict,
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
