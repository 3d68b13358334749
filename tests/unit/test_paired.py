"""The paired comparison protocol v2 against hand-computed numbers, scipy and statsmodels (claims C1, C2).

Calibration by simulation (coverage, false-positive rate) is in test_paired_calibration.py.
"""

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from agentpost.stats import CONCLUSIVE, VERDICT_CLASSES
from agentpost.stats.paired import (
    DF_FLOOR,
    ArmMeta,
    ProtocolError,
    Split,
    bounded_floor,
    compare,
    crossed_mean_squares,
    crossed_t,
    crossed_variance_df,
    mde_multiplier,
    power,
    select_on_validation,
    verdict_class,
)

META_A = ArmMeta("ckpt", "data-v1", updates=10, max_new_tokens=64)
META_B = ArmMeta("ckpt", "data-v1", updates=10, max_new_tokens=64)
# d = b - a: seed 1 (-1, -1), seed 2 (-3, 0), seed 3 (0, -1); seed means -1, -1.5, -0.5
TOY_A = {1: [3.0, 2.0], 2: [4.0, 1.0], 3: [2.0, 2.0]}
TOY_B = {1: [2.0, 1.0], 2: [1.0, 1.0], 3: [2.0, 1.0]}


def run(a, b, **kw):
    kw = {"meta_a": META_A, "meta_b": META_B, "higher_is_better": False, "min_effect": 0.05, **kw}
    return compare(a, b, **kw)


@pytest.mark.claim("paired-protocol", "C1")
def test_three_seed_example_by_hand():
    r = run(TOY_A, TOY_B)
    # Seed means m = (-1, -1.5, -0.5): mean -1, sd 0.5, se = 0.5 / sqrt(3) = 0.288675, t = -sqrt(12), df = 2.
    assert r.per_seed_mean_diff == {"1": -1.0, "2": -1.5, "3": -0.5}
    assert r.estimate == pytest.approx(-1.0, abs=1e-15)
    assert r.se == pytest.approx(0.5 / math.sqrt(3), rel=1e-12) and r.df == 2
    assert r.t_stat == pytest.approx(-math.sqrt(12), rel=1e-12)
    # t_{0.975, 2} = 4.302653 (table value): CI = -1 -/+ 4.302653 * 0.288675 = [-2.242068, 0.242068].
    assert r.ci_low == pytest.approx(-2.242068, abs=1e-6) and r.ci_high == pytest.approx(0.242068, abs=1e-6)
    # df = 2 has a closed-form t cdf: P(T > t) = 1/2 - t / (2 sqrt(2 + t^2)); t^2 = 12 -> p = 1 - sqrt(12/14).
    assert r.p_value == pytest.approx(1 - math.sqrt(12 / 14), rel=1e-10)
    # MDE: 80% power with 2 df needs about 6.6 standard errors (noncentral t), far above min_effect 0.05.
    assert r.mde == pytest.approx(mde_multiplier(2.0) * r.se) and r.mde > 1.5
    # The 95% CI [-2.24, +0.24] contains 0 and the 90% CI is not inside (-0.05, 0.05): nothing decided.
    assert (r.verdict, r.verdict_class, r.direction) == ("inconclusive", "inconclusive", None)
    assert (r.n_seeds, r.n_items, r.design) == (3, 6, "independent")
    # Nested components: var(m) = 0.25, within-seed variances (0, 4.5, 0.5), n_s = 2:
    # seed = 0.25 - mean(0, 2.25, 0.25) = -0.583 -> 0; item = pooled within = (0 + 4.5 + 0.5) / 3.
    assert r.variance_components == {"seed": 0.0, "item": pytest.approx(5 / 3), "residual": None}


@pytest.mark.claim("paired-protocol", "C1")
def test_crossed_example_by_hand():
    # Same items in every seed: d[s, j] with a clear item effect (column 2 is lower by about 2).
    d = np.array([[0.0, -2.0], [-1.0, -2.5], [0.5, -2.5]])
    a = {s: [0.0, 0.0] for s in range(3)}
    b = {s: list(d[s]) for s in range(3)}
    r = run(a, b, shared_items=True)
    # grand -1.25; row means (-1, -1.75, -1); column means (-1/6, -7/3)
    ms_seed = 2 * ((0.25) ** 2 + 0.5**2 + 0.25**2) / 2  # 0.375
    ms_item = 3 * ((-1 / 6 + 1.25) ** 2 + (-7 / 3 + 1.25) ** 2) / 1  # 7.041667
    resid = d - d.mean(1, keepdims=True) - d.mean(0, keepdims=True) + d.mean()
    ms_resid = (resid**2).sum() / 2  # (1/6)^2 * 2 ... = 0.291667
    assert np.allclose(crossed_mean_squares(d), (ms_seed, ms_item, ms_resid))
    assert ms_resid == pytest.approx(0.2916667, abs=1e-6) and ms_item == pytest.approx(7.0416667, abs=1e-6)
    se = math.sqrt((ms_seed + ms_item - ms_resid) / 6)
    upper = ms_seed * 2 / stats.chi2.ppf(0.3, 2)  # seed mean square at its 70% upper bound, for the df only
    df = (upper + ms_item - ms_resid) ** 2 / (upper**2 / 2 + ms_item**2 / 1 + ms_resid**2 / 2)
    assert r.estimate == pytest.approx(-1.25) and r.se == pytest.approx(se) and r.df == pytest.approx(df)
    q = stats.t.ppf(0.975, df)
    assert (r.ci_low, r.ci_high) == (pytest.approx(-1.25 - q * se), pytest.approx(-1.25 + q * se))
    assert r.variance_components == {
        "seed": pytest.approx((ms_seed - ms_resid) / 2),
        "item": pytest.approx((ms_item - ms_resid) / 3),
        "residual": pytest.approx(ms_resid),
    }
    assert (r.design, r.n_items) == ("crossed", 2)


@pytest.mark.claim("paired-protocol", "C1")
def test_crossed_without_item_component_is_the_seed_mean_t_test():
    rng = np.random.default_rng(4)
    e = rng.normal(size=(4, 25))
    d = rng.normal(scale=2.0, size=(4, 1)) + e - e.mean(0)  # every item mean equal: MS_item = 0 < MS_resid
    ms = crossed_mean_squares(d)
    assert ms[1] == pytest.approx(0.0, abs=1e-12) and ms[2] > 0
    est, se, df = crossed_t(d)
    ref = stats.ttest_1samp(d.mean(1), 0.0)
    assert float(est / se) == pytest.approx(ref.statistic, rel=1e-12) and float(df) == pytest.approx(3.0)


@pytest.mark.claim("paired-protocol", "C1")
def test_independent_design_matches_scipy_t_tests_and_wilcoxon():
    rng = np.random.default_rng(0)
    a = {s: rng.normal(size=40) for s in range(6)}
    b = {s: a[s] + 0.3 + rng.normal(scale=0.5, size=40) + rng.normal(scale=0.2) for s in range(6)}
    r = run(a, b, higher_is_better=True)
    ma, mb = np.array([a[s].mean() for s in range(6)]), np.array([b[s].mean() for s in range(6)])
    ref = stats.ttest_rel(mb, ma)
    assert r.t_stat == pytest.approx(ref.statistic, rel=1e-12) and r.p_value == pytest.approx(ref.pvalue, rel=1e-10)
    one = stats.ttest_1samp(mb - ma, 0.0)
    ci = one.confidence_interval(0.95)
    assert (r.ci_low, r.ci_high) == (pytest.approx(ci.low, rel=1e-12), pytest.approx(ci.high, rel=1e-12))
    assert r.wilcoxon_pvalue == pytest.approx(stats.wilcoxon(mb - ma).pvalue)
    assert r.verdict == "better"


@pytest.mark.claim("paired-protocol", "C1")
def test_tiny_differences_agree_with_scipy_no_shortcut():
    # v1 returned t = inf, p = 0 here through an np.allclose shortcut; scipy gives an ordinary t.
    rng = np.random.default_rng(7)
    a = {s: np.full(5, 1.0) for s in range(3)}
    b = {s: 1.0 + 1e-12 * rng.normal(size=5) for s in range(3)}
    r = run(a, b)
    m = np.array([np.mean(b[s] - a[s]) for s in range(3)])
    ref = stats.ttest_1samp(m, 0.0)
    assert math.isfinite(r.t_stat) and abs(r.t_stat) < 10
    assert r.t_stat == pytest.approx(ref.statistic, rel=1e-9) and r.p_value == pytest.approx(ref.pvalue, rel=1e-9)
    # MDE ~ 1e-12 is far below min_effect: the 90% CI lies inside (-0.05, 0.05)
    assert r.verdict == "equivalent" and r.verdict_class == "equivalent"


@pytest.mark.claim("paired-protocol", "C1")
def test_matches_statsmodels_mixedlm_reml():
    smf = pytest.importorskip("statsmodels.formula.api")
    rng = np.random.default_rng(5)
    s, n = 4, 20
    crossed = 0.3 + rng.normal(0, 0.5, (s, 1)) + rng.normal(0, 0.7, (1, n)) + rng.normal(0, 0.4, (s, n))
    nested = 0.3 + rng.normal(0, 0.5, (s, 1)) + rng.normal(0, 0.7, (s, n))
    zeros = {k: np.zeros(n) for k in range(s)}
    frame = pd.DataFrame(
        {"d": crossed.ravel(), "seed": np.repeat(np.arange(s), n), "item": np.tile(np.arange(n), s), "g": 1}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = smf.mixedlm(
            "d ~ 1", frame, groups="g", re_formula="0", vc_formula={"seed": "0+C(seed)", "item": "0+C(item)"}
        ).fit(reml=True)
        fit2 = smf.mixedlm("d ~ 1", frame.assign(d=nested.ravel()), groups="seed").fit(reml=True)
    # Balanced data, positive components: REML equals the ANOVA (method-of-moments) estimates.
    r = run(zeros, {k: crossed[k] for k in range(s)}, shared_items=True)
    vc = dict(zip(fit.model.exog_vc.names, fit.vcomp))
    assert r.estimate == pytest.approx(fit.fe_params["Intercept"], rel=1e-6)
    assert r.se == pytest.approx(fit.bse["Intercept"], rel=1e-3)
    assert r.variance_components["seed"] == pytest.approx(vc["seed"], rel=1e-3)
    assert r.variance_components["item"] == pytest.approx(vc["item"], rel=1e-3)
    assert r.variance_components["residual"] == pytest.approx(fit.scale, rel=1e-3)
    r2 = run(zeros, {k: nested[k] for k in range(s)})
    assert r2.estimate == pytest.approx(fit2.fe_params["Intercept"], rel=1e-6)
    assert r2.se == pytest.approx(fit2.bse["Intercept"], rel=1e-3)
    assert r2.variance_components["seed"] == pytest.approx(float(fit2.cov_re.iloc[0, 0]), rel=1e-3)
    assert r2.variance_components["item"] == pytest.approx(fit2.scale, rel=1e-3)


@pytest.mark.claim("paired-protocol", "C1")
def test_power_and_mde_from_the_noncentral_t():
    # statsmodels' one-sample t power (noncentral t) computes the same quantity in sd units.
    sm_power = pytest.importorskip("statsmodels.stats.power")
    es = sm_power.TTestPower().solve_power(nobs=3, alpha=0.05, power=0.8, alternative="two-sided")
    assert mde_multiplier(2.0) == pytest.approx(es * math.sqrt(3), rel=1e-4)
    assert power(0.5, 0.25, 9.0) == pytest.approx(
        sm_power.TTestPower().power(effect_size=0.5 / (0.25 * math.sqrt(10)), nobs=10, alpha=0.05), rel=1e-6
    )
    # Simulated: seed means N(delta, 1), 5 seeds, delta = MDE at the true se -> rejected in 80% of data sets.
    rng = np.random.default_rng(2)
    se_true = 1 / math.sqrt(5)
    delta = mde_multiplier(4.0) * se_true
    m = rng.normal(delta, 1.0, size=(20000, 5))
    rejected = stats.ttest_1samp(m, 0.0, axis=1).pvalue < 0.05
    assert rejected.mean() == pytest.approx(0.8, abs=0.015)  # MC sd 0.003


@pytest.mark.claim("paired-protocol", "C1")
def test_bootstrap_ci_agrees_with_scipy_bootstrap_over_seed_means():
    rng = np.random.default_rng(1)
    a = {s: rng.normal(size=30) for s in range(10)}
    b = {s: a[s] + 0.2 + rng.normal(scale=0.3) + rng.normal(size=30) for s in range(10)}
    r = run(a, b, n_boot=20000, rng=3)
    m = np.array([np.mean(b[s] - a[s]) for s in range(10)])
    ref = stats.bootstrap((m,), np.mean, n_resamples=20000, method="percentile", random_state=0).confidence_interval
    width = ref.high - ref.low
    assert r.bootstrap_ci[0] == pytest.approx(ref.low, abs=0.03 * width)
    assert r.bootstrap_ci[1] == pytest.approx(ref.high, abs=0.03 * width)


@pytest.mark.claim("paired-protocol", "C1")
def test_every_verdict_is_reachable():
    same = {s: [1.0, 2.0, 3.0] for s in range(3)}
    shifted = {s: [x - 0.5 + 0.01 * s for x in same[s]] for s in range(3)}  # clearly lower: seed means -0.5 +- .01
    assert run(same, shifted).verdict == "better"
    assert run(same, shifted, higher_is_better=True).verdict == "worse"
    noisy = {s: [x + (0.2 if s == 1 else -0.1) for x in same[s]] for s in range(3)}  # seed means (-0.1, 0.2, -0.1)
    r = run(same, noisy, min_effect=0.05)
    assert r.verdict == "inconclusive" and r.mde > 0.05
    assert run(same, noisy, min_effect=10.0).verdict == "equivalent"
    for shared in (False, True):  # identical arms: zero difference, nothing to size an effect against
        r = run(same, same, shared_items=shared)
        assert (r.verdict, r.verdict_class, r.direction) == ("no information", "no_information", None)
        assert r.estimate == 0 and math.isnan(r.mde) and math.isnan(r.p_value) and r.df == 2


def _seed_means(means):
    """Arms whose per-seed differences are the given seed means (two items per seed, same difference)."""
    return ({s: [0.0, 0.0] for s in range(len(means))}, {s: [m, m] for s, m in enumerate(means)})


@pytest.mark.claim("paired-protocol", "C1")
def test_verdict_classes_by_hand():
    # Seed means (m - 0.1, m, m + 0.1): sd 0.1, se 0.1/sqrt(3) = 0.057735, df 2; 95% CI m -/+ 4.302653 * 0.057735
    # = m -/+ 0.248414; 90% CI m -/+ 2.919986 * 0.057735 = m -/+ 0.168585.
    assert tuple(VERDICT_CLASSES) == ("matters", "detectable", "equivalent", "inconclusive", "no_information")
    assert CONCLUSIVE == ("matters", "equivalent")
    cases = [  # (m, delta, class, verdict, direction) -- higher is better
        (0.5, 0.2, "matters", "better", "better"),  # 95% CI [0.2516, 0.7484] > 0.2
        (-0.5, 0.2, "matters", "worse", "worse"),
        (0.3, 0.2, "detectable", "better, may be negligible", "better"),  # [0.0516, 0.5484]: excludes 0, spans 0.2
        (0.0, 0.2, "equivalent", "equivalent", None),  # 90% CI [-0.1686, 0.1686] inside (-0.2, 0.2)
        # 90% CI [0.1314, 0.4686] inside (-0.5, 0.5) and the 95% CI excludes 0: the label keeps the direction
        (0.3, 0.5, "equivalent", "equivalent, detectably better", "better"),
        (0.1, 0.2, "inconclusive", "inconclusive", None),  # 95% [-0.148, 0.348]; 90% upper 0.2686 > 0.2
    ]
    for m, delta, cls, verdict, direction in cases:
        a, b = _seed_means([m - 0.1, m, m + 0.1])
        r = run(a, b, min_effect=delta, higher_is_better=True)
        assert r.se == pytest.approx(0.1 / math.sqrt(3)) and r.df == 2
        assert r.ci90_high - r.estimate == pytest.approx(stats.t.ppf(0.95, 2) * r.se)
        assert (r.verdict_class, r.verdict, r.direction) == (cls, verdict, direction), (m, delta)
        assert f"-> {verdict} [" in r.summary()
    detected_but_small = run(*_seed_means([0.2, 0.3, 0.4]), min_effect=0.5, higher_is_better=True)
    assert "detectably better, by less than the smallest effect of interest" in detected_but_small.summary()
    vec = verdict_class(np.array([0.5, 0.3, 0.0, 0.1]), 0.1 / math.sqrt(3), 2.0, 0.2)
    assert list(vec) == ["matters", "detectable", "equivalent", "inconclusive"]


@pytest.mark.claim("paired-protocol", "C1")
def test_binary_floor_by_hand_never_collapses():
    # 3 discordant (+1) items of 200 in every seed: equal seed means 0.015, so the seed-level sd is 0.
    a = {s: np.zeros(200) for s in range(3)}
    b = {s: np.r_[np.ones(3), np.zeros(197)] for s in range(3)}
    r = run(a, b, higher_is_better=True, min_effect=0.02)
    # Agresti-Min: N = 600 pairs, 9 at +1, none at -1: v = (9 + 1)/602 - (9/602)^2; se = sqrt(v / 600), df 2.
    v = 10 / 602 - (9 / 602) ** 2
    assert r.bounds == [0.0, 1.0] and r.se == pytest.approx(math.sqrt(v / 600)) and r.df == 2
    assert math.isfinite(r.t_stat) and r.p_value > 0.05 and r.ci_high - r.ci_low > 0.02
    assert r.verdict == "inconclusive" and "floored" in r.method
    # MDE with the effect's own variance: D = k(2) sqrt(se^2 + (D(1 - D) - 0.015 * 0.985) / 600)
    k = mde_multiplier(2.0)
    extra = (r.mde * (1 - r.mde) - 0.015 * 0.985) / 600
    assert r.mde == pytest.approx(k * math.sqrt(r.se**2 + extra), rel=1e-9) and r.mde > k * r.se
    # Crossed: the same three items flip in every seed, a real item effect: the SE stays above the floor.
    crossed = run(a, b, shared_items=True, higher_is_better=True, min_effect=0.02)
    assert crossed.se >= math.sqrt(v / 600) and math.isfinite(crossed.t_stat) and "floored" not in crossed.method
    assert bounded_floor(np.array([1.0, -1.0, 0.0, 0.0]), 1.0) == pytest.approx(3 / 6 - 0.0)
    # Declared bounds (0, 2): the same data in units of the width (x = d / 2).
    r2 = run(a, b, bounds=(0, 2), higher_is_better=True, min_effect=0.02)
    assert r2.se == pytest.approx(math.sqrt(4 * ((9 / 4 + 1) / 602 - (4.5 / 602) ** 2) / 600))


@pytest.mark.claim("paired-protocol", "C1")
def test_satterthwaite_df_below_one_is_floored():
    # 0/1 outcomes, per-seed (+1, -1) discordant counts (7, 0), (8, 1), (8, 1): equal seed means, MS_item just above
    # MS_resid, so the unfloored Satterthwaite df are 0.139 (scipy's t quantiles then fail or the MDE search hangs).
    d = np.zeros((3, 200))
    d[0, 0:7], d[1, 6:14], d[1, 100], d[2, 14:22], d[2, 101] = 1, 1, -1, 1, -1
    ms = crossed_mean_squares(d)
    upper = ms[0] * 2 / stats.chi2.ppf(0.3, 2)
    raw = (upper + ms[1] - ms[2]) ** 2 / (upper**2 / 2 + ms[1] ** 2 / 199 + ms[2] ** 2 / 398)
    assert raw < 0.2 and float(crossed_variance_df(*ms, 3, 200)[1]) == DF_FLOOR == 1.0
    a = {s: np.where(d[s] < 0, 1.0, 0.0) for s in range(3)}
    b = {s: np.where(d[s] > 0, 1.0, 0.0) for s in range(3)}
    for scale in (1.0, 2.0):  # 0/1 (bounded: variance floor) and 0/2 (unbounded: df floor)
        r = run(
            {s: scale * a[s] for s in a},
            {s: scale * b[s] for s in b},
            shared_items=True,
            higher_is_better=True,
            min_effect=0.02,
        )
        assert r.df >= 1 and all(math.isfinite(x) for x in (r.se, r.ci_low, r.ci_high, r.mde, r.power, r.p_value))
    assert r.bounds is None and r.df == 1.0


@pytest.mark.claim("paired-protocol", "C2")
def test_items_are_paired_by_id():
    ids = ["q1", "q2", "q3", "q4"]
    a = {s: pd.Series([1.0, 2.0, 3.0, 4.0 + s], index=ids) for s in range(3)}
    b = {s: pd.Series([2.5, 2.0, 3.5, 1.0 + s * 0.5], index=ids) for s in range(3)}
    positional = run({s: a[s].to_numpy() for s in a}, {s: b[s].to_numpy() for s in b}, shared_items=True)
    shuffled = {s: b[s].iloc[::-1] for s in b}  # same ids, other order: paired by id, not position
    for arm_b in (shuffled, {s: dict(b[s].items()) for s in b}):
        r = run(a, arm_b, shared_items=True)
        assert (r.estimate, r.se, r.df) == (positional.estimate, positional.se, positional.df)
    with pytest.raises(ProtocolError, match="item ids differ"):
        run(a, {s: b[s].rename({"q4": "q5"}) for s in b})
    with pytest.raises(ProtocolError, match="item ids differ"):  # shared items: every seed the same id set
        run({**a, 2: a[2].rename({"q4": "q9"})}, {**b, 2: b[2].rename({"q4": "q9"})}, shared_items=True)
    with pytest.raises(ProtocolError, match="ids for both or neither"):
        run(a, {s: b[s].to_numpy() for s in b})
    with pytest.raises(ProtocolError, match="one-dimensional"):  # (2, 3) vs (3, 2): never flattened
        run({s: np.zeros((2, 3)) for s in range(3)}, {s: np.zeros((3, 2)) for s in range(3)})
    with pytest.raises(ProtocolError, match="not numbers"):
        run({s: ["x", "y"] for s in (1, 2, 3)}, TOY_B)


@pytest.mark.claim("paired-protocol", "C1")
def test_unequal_items_per_seed_are_weighted_by_item_count():
    # differences: seed 1 (1, 1, 1, 1) mean 1, seed 2 (0, 0) mean 0, seed 3 (2, 2) mean 2; 8 items.
    a = {1: [0.0] * 4, 2: [0.0] * 2, 3: [0.0] * 2}
    b = {1: [1.0] * 4, 2: [0.0] * 2, 3: [2.0] * 2}
    r = run(a, b, higher_is_better=True)
    # weights (0.5, 0.25, 0.25): estimate = 0.5 + 0 + 0.5 = 1; CR1 se^2 = 3/2 (0.25 * 0 + 0.0625 * 1 + 0.0625 * 1)
    assert r.estimate == pytest.approx(1.0) and r.se == pytest.approx(math.sqrt(1.5 * 0.125)) and r.df == 2
    assert r.n_items == 8 and "weighted by item count" in r.method
    equal = run({1: [0.0] * 2, 2: [0.0] * 2, 3: [0.0] * 2}, {1: [1.0] * 2, 2: [0.0] * 2, 3: [2.0] * 2})
    assert equal.se == pytest.approx(stats.sem([1.0, 0.0, 2.0])) and "weighted" not in equal.method


def test_large_inputs_bootstrap_in_bounded_memory():
    rng = np.random.default_rng(3)
    a = {s: rng.normal(size=40_000) for s in range(3)}
    b = {s: a[s] + 0.01 + rng.normal(scale=0.1, size=40_000) for s in range(3)}
    r = run(a, b, shared_items=True, higher_is_better=True)
    assert r.bootstrap_ci[0] < r.bootstrap_ci[1] and "bootstrap_ci from 838 replicates" in r.method


@pytest.mark.claim("paired-protocol", "C2")
def test_argument_types():
    r = run(TOY_A, TOY_B, min_effect=np.float32(0.05), alpha=np.float64(0.05), higher_is_better=np.bool_(False))
    assert r.min_effect == pytest.approx(0.05) and r.higher_is_better is False
    for bad in ("False", 0, None):
        with pytest.raises(ProtocolError, match="higher_is_better"):
            run(TOY_A, TOY_B, higher_is_better=bad)
    for bad in (math.inf, math.nan, "0.1", np.float64(-1.0)):
        with pytest.raises(ProtocolError, match="min_effect"):
            run(TOY_A, TOY_B, min_effect=bad)
    with pytest.raises(ProtocolError, match="alpha"):
        run(TOY_A, TOY_B, alpha=0.5)
    # A deterministic difference (every item, every seed: +0.5, e.g. a step count of scripted controllers): a
    # zero-width CI, no t, p or MDE, and the class from the value itself.
    r = run({s: [1.0, 2.0] for s in range(3)}, {s: [1.5, 2.5] for s in range(3)}, higher_is_better=True)
    assert (r.ci_low, r.ci_high, r.verdict_class, r.verdict) == (0.5, 0.5, "matters", "better")
    assert math.isnan(r.t_stat) and math.isnan(r.p_value) and math.isnan(r.mde) and "deterministic" in r.method
    assert (
        run({s: [1.0, 2.0] for s in range(3)}, {s: [1.5, 2.5] for s in range(3)}, min_effect=1.0).verdict
        == "equivalent, detectably worse"
    )
    with pytest.raises(ProtocolError, match="outside the declared bounds"):
        run(TOY_A, TOY_B, bounds=(0, 1))


@pytest.mark.claim("paired-protocol", "C2")
@pytest.mark.parametrize(
    "field,value", [("checkpoint", "other"), ("data_version", "v2"), ("updates", 11), ("max_new_tokens", 32)]
)
def test_refuses_unmatched_arms(field, value):
    other = ArmMeta(**{**META_A.__dict__, field: value})
    with pytest.raises(ProtocolError, match=field):
        run(TOY_A, TOY_B, meta_b=other)


@pytest.mark.claim("paired-protocol", "C2")
def test_refuses_bad_input_before_work():
    with pytest.raises(ProtocolError, match="at least 3 seeds"):
        run({1: [1.0], 2: [2.0]}, {1: [1.0], 2: [2.0]})
    with pytest.raises(ProtocolError, match="different seeds"):
        run(TOY_A, {**TOY_B, 4: [1.0, 1.0]})
    with pytest.raises(ProtocolError, match="same non-empty item list"):
        run(TOY_A, {**TOY_B, 3: [1.0]})
    with pytest.raises(ProtocolError, match="shared_items=True needs the same item list"):
        run({**TOY_A, 4: [1.0]}, {**TOY_B, 4: [1.0]}, shared_items=True)
    for bad in (0.0, -0.1, None, True, math.inf):
        with pytest.raises(ProtocolError, match="min_effect"):
            run(TOY_A, TOY_B, min_effect=bad)
    with pytest.raises(TypeError, match="min_effect"):
        compare(TOY_A, TOY_B, meta_a=META_A, meta_b=META_B, higher_is_better=False)


@pytest.mark.claim("paired-protocol", "C2")
def test_selection_sees_validation_only():
    seen = []

    def score(c, split):
        seen.append(split.name)
        return -abs(c - split.data)

    best, scores = select_on_validation([1, 2, 3], score, Split("validation", 2.2), higher_is_better=True)
    assert best == 2 and scores[3] == pytest.approx(-0.8) and set(seen) == {"validation"}
    with pytest.raises(ProtocolError, match="test split"):
        select_on_validation([1, 2], score, Split("test", 2.0), higher_is_better=True)
    with pytest.raises(ProtocolError, match="takes a Split"):
        select_on_validation([1, 2], score, [1, 2], higher_is_better=True)


def test_result_round_trips_as_dict_and_summary():
    r = run(TOY_A, TOY_B, name_a="A", name_b="B")
    d = r.as_dict()
    for key in (
        "name_a",
        "name_b",
        "n_seeds",
        "n_items",
        "estimate",
        "ci_low",
        "ci_high",
        "p_value",
        "mde",
        "min_effect",
        "higher_is_better",
        "verdict",
        "variance_components",
        "per_seed_mean_diff",
        "design",
        "method",
    ):
        assert key in d
    for key in ("verdict_class", "direction", "ci90_low", "ci90_high", "bounds", "se", "df", "p_value", "power"):
        assert key in d
    assert "B - A: -1" in r.summary() and "-> inconclusive [inconclusive]" in r.summary()
