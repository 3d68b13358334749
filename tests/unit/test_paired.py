"""The paired comparison protocol against scipy and hand-computed numbers (claims C1, C2 of paired-protocol)."""

import numpy as np
import pytest
from scipy import stats

from agentpost.stats.paired import (
    ArmMeta,
    ProtocolError,
    Split,
    bootstrap_ci,
    compare,
    minimum_detectable_effect,
    select_on_validation,
    sign_test_pvalue,
)

META = ArmMeta("ckpt", "data-v1", updates=10, max_new_tokens=64)
TOY_A = {1: [3.0, 2.0], 2: [4.0, 1.0], 3: [2.0, 2.0]}
TOY_B = {1: [2.0, 1.0], 2: [2.0, 1.0], 3: [1.0, 1.0]}


@pytest.mark.claim("paired-protocol", "C1")
def test_worked_example_by_hand():
    # d = b - a = (-1, -1, -2, 0, -1, -1): mean -1, sd = sqrt(0.4), t = -1 / (sqrt(0.4)/sqrt(6)) = -3.873
    r = compare(TOY_A, TOY_B, meta_a=META, meta_b=META, higher_is_better=False, min_effect=0.05)
    assert r.mean_diff == pytest.approx(-1.0)
    assert r.t_stat == pytest.approx(-1 / (np.sqrt(0.4) / np.sqrt(6)), rel=1e-12)
    assert r.per_seed_mean_diff == {"1": -1.0, "2": -1.0, "3": -1.0}
    # MDE = (t_{0.975,5} + t_{0.8,5}) * sd / sqrt(n) = (2.5706 + 0.9195) * 0.63246 / 2.4495
    assert r.mde_80 == pytest.approx((2.570582 + 0.919544) * np.sqrt(0.4) / np.sqrt(6), rel=1e-5)
    assert r.verdict == "better"  # lower is better and the difference is significantly negative
    assert r.n_pairs == 6 and r.n_seeds == 3


@pytest.mark.claim("paired-protocol", "C1")
def test_statistics_match_scipy():
    rng = np.random.default_rng(0)
    a = {s: rng.normal(size=40) for s in range(3)}
    b = {s: a[s] + 0.3 + rng.normal(scale=0.5, size=40) for s in range(3)}
    r = compare(a, b, meta_a=META, meta_b=META, higher_is_better=True, min_effect=0.05)
    d = np.concatenate([b[s] - a[s] for s in range(3)])
    t = stats.ttest_rel(np.concatenate([b[s] for s in range(3)]), np.concatenate([a[s] for s in range(3)]))
    assert r.t_stat == pytest.approx(t.statistic) and r.t_pvalue == pytest.approx(t.pvalue)
    assert r.wilcoxon_pvalue == pytest.approx(stats.wilcoxon(d).pvalue)
    assert r.sign_test_pvalue == pytest.approx(stats.binomtest(int((d > 0).sum()), d.size).pvalue)
    assert r.ci_low < d.mean() < r.ci_high
    assert r.verdict == "better"


@pytest.mark.claim("paired-protocol", "C1")
def test_bootstrap_ci_covers_true_mean_and_matches_scipy_width():
    rng = np.random.default_rng(1)
    d = [rng.normal(0.2, 1.0, size=200) for _ in range(3)]
    lo, hi = bootstrap_ci(d, n_boot=4000, rng=0)
    pooled = np.concatenate(d)
    ref = stats.bootstrap((pooled,), np.mean, n_resamples=4000, method="percentile", random_state=0).confidence_interval
    assert lo < pooled.mean() < hi
    assert (hi - lo) == pytest.approx(ref.high - ref.low, rel=0.1)


@pytest.mark.claim("paired-protocol", "C1")
def test_mde_is_the_effect_detected_with_80_percent_power():
    # Simulate: with true mean = MDE, a two-sided t-test at 0.05 rejects in about 80% of samples.
    rng = np.random.default_rng(2)
    n, sd = 30, 1.0
    mde = minimum_detectable_effect(rng.normal(0, sd, size=n))
    rejections = 0
    for _ in range(2000):
        x = rng.normal(mde, sd, size=n)
        rejections += stats.ttest_1samp(x, 0).pvalue < 0.05
    # the MDE used the sd of one sample, so power is near but not exactly 0.8
    assert 0.6 < rejections / 2000 < 0.95


@pytest.mark.claim("paired-protocol", "C1")
def test_sign_test_and_verdicts():
    assert sign_test_pvalue(np.array([1.0, 1.0, 1.0, 1.0, 1.0])) == pytest.approx(2 * 0.5**5)
    same = {s: [1.0, 2.0, 3.0] for s in range(3)}
    r = compare(same, same, meta_a=META, meta_b=META, higher_is_better=True, min_effect=0.05)
    assert r.verdict == "no detectable difference" and r.mean_diff == 0
    rng = np.random.default_rng(3)
    a = {s: rng.normal(size=5) for s in range(3)}
    b = {s: a[s] + rng.normal(scale=2.0, size=5) for s in range(3)}
    r = compare(a, b, meta_a=META, meta_b=META, higher_is_better=True, min_effect=0.1)
    assert r.verdict == "underpowered" and r.mde_80 > 0.1


@pytest.mark.claim("paired-protocol", "C2")
@pytest.mark.parametrize("field,value", [("checkpoint", "other"), ("data_version", "v2"), ("updates", 11), ("max_new_tokens", 32)])
def test_refuses_unmatched_arms(field, value):
    other = ArmMeta(**{**META.__dict__, field: value})
    with pytest.raises(ProtocolError, match=field):
        compare(TOY_A, TOY_B, meta_a=META, meta_b=other, higher_is_better=False, min_effect=0.05)


@pytest.mark.claim("paired-protocol", "C2")
def test_refuses_too_few_seeds_and_mismatched_items():
    with pytest.raises(ProtocolError, match="at least 3 seeds"):
        compare({1: [1.0], 2: [2.0]}, {1: [1.0], 2: [2.0]}, meta_a=META, meta_b=META, higher_is_better=True, min_effect=0.05)
    with pytest.raises(ProtocolError, match="different seeds"):
        compare(TOY_A, {**TOY_B, 4: [1.0, 1.0]}, meta_a=META, meta_b=META, higher_is_better=True, min_effect=0.05)
    with pytest.raises(ProtocolError, match="same non-empty item list"):
        compare(TOY_A, {**TOY_B, 3: [1.0]}, meta_a=META, meta_b=META, higher_is_better=True, min_effect=0.05)


@pytest.mark.claim("paired-protocol", "C2")
def test_selection_sees_validation_only():
    seen = []

    def score(c, split):
        seen.append(split.name)
        return -abs(c - split.data)

    best, scores = select_on_validation([1, 2, 3], score, Split("validation", 2.2), higher_is_better=True, min_effect=0.05)
    assert best == 2 and scores[3] == pytest.approx(-0.8) and set(seen) == {"validation"}
    with pytest.raises(ProtocolError, match="test split"):
        select_on_validation([1, 2], score, Split("test", 2.0), higher_is_better=True, min_effect=0.05)
    with pytest.raises(ProtocolError, match="takes a Split"):
        select_on_validation([1, 2], score, [1, 2], higher_is_better=True, min_effect=0.05)
