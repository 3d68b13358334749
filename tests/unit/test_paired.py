"""The paired comparison protocol v2 against hand-computed numbers, scipy and statsmodels (claims C1, C2).

Calibration by simulation (coverage, false-positive rate) is in test_paired_calibration.py.
"""

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from agentpost.stats.paired import (
    ArmMeta,
    ProtocolError,
    Split,
    compare,
    crossed_mean_squares,
    crossed_t,
    mde_multiplier,
    power,
    select_on_validation,
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
    assert r.verdict == "underpowered"
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
    assert r.variance_components == {"seed": pytest.approx((ms_seed - ms_resid) / 2),
                                     "item": pytest.approx((ms_item - ms_resid) / 3), "residual": pytest.approx(ms_resid)}
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
    assert r.verdict == "no detectable difference"  # MDE ~ 1e-12 is far below min_effect


@pytest.mark.claim("paired-protocol", "C1")
def test_matches_statsmodels_mixedlm_reml():
    smf = pytest.importorskip("statsmodels.formula.api")
    rng = np.random.default_rng(5)
    s, n = 4, 20
    crossed = 0.3 + rng.normal(0, 0.5, (s, 1)) + rng.normal(0, 0.7, (1, n)) + rng.normal(0, 0.4, (s, n))
    nested = 0.3 + rng.normal(0, 0.5, (s, 1)) + rng.normal(0, 0.7, (s, n))
    zeros = {k: np.zeros(n) for k in range(s)}
    frame = pd.DataFrame({"d": crossed.ravel(), "seed": np.repeat(np.arange(s), n), "item": np.tile(np.arange(n), s),
                          "g": 1})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = smf.mixedlm("d ~ 1", frame, groups="g", re_formula="0",
                          vc_formula={"seed": "0+C(seed)", "item": "0+C(item)"}).fit(reml=True)
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
        sm_power.TTestPower().power(effect_size=0.5 / (0.25 * math.sqrt(10)), nobs=10, alpha=0.05), rel=1e-6)
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
    assert r.verdict == "underpowered" and r.mde > 0.05
    assert run(same, noisy, min_effect=10.0).verdict == "no detectable difference"
    for shared in (False, True):  # identical arms: zero difference, zero MDE, t undefined (0/0) as in scipy
        r = run(same, same, shared_items=shared)
        assert r.verdict == "no detectable difference" and r.estimate == 0 and r.mde == 0 and r.df == 2


@pytest.mark.claim("paired-protocol", "C2")
@pytest.mark.parametrize("field,value", [("checkpoint", "other"), ("data_version", "v2"), ("updates", 11), ("max_new_tokens", 32)])
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
    for bad in (0.0, -0.1, None, True):
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
    for key in ("name_a", "name_b", "n_seeds", "n_items", "estimate", "ci_low", "ci_high", "p_value", "mde",
                "min_effect", "higher_is_better", "verdict", "variance_components", "per_seed_mean_diff", "design",
                "method"):
        assert key in d
    assert "B - A: -1" in r.summary() and "underpowered" in r.summary()
