"""Calibration of the paired protocol v2 by simulation (synthetic data sets; claim C1 of paired-protocol).

Each design of ``calibration.DESIGNS`` is simulated 4000 times at a true difference of 0.2 (coverage of the 95% CI) and
4000 times at 0 (false-positive rate of a better/worse verdict at alpha 0.05). With 4000 sets the Monte Carlo sd of a
rate near 0.95 is 0.0034, so the bounds [0.93, 0.97] are about 6 sd from the nominal 0.95. The verdict classes' error
rates and the power at the MDE reported for 0/1 outcomes near a floor (``calibration.BOUNDED_DESIGNS``) are checked the
same way.
"""

import numpy as np
import pytest

from agentpost.stats import calibration as cal
from agentpost.stats.paired import ArmMeta, compare

N_SETS = 4000


@pytest.fixture(scope="module")
def table():
    return cal.calibrate(n_sets=N_SETS, seed=2024)


@pytest.mark.claim("paired-protocol", "C4")
@pytest.mark.parametrize("design", [d.name for d in cal.DESIGNS])
def test_coverage_and_false_positive_rate(table, design):
    row = table[(table.design == design) & (table.estimator == "v2")].iloc[0]
    assert row.n_sets >= 1000
    assert 0.93 <= row.coverage <= 0.97, f"{design}: coverage {row.coverage}"
    assert row.fpr <= 0.06, f"{design}: false-positive rate {row.fpr}"


def test_designs_cover_the_issue_list():
    names = {(d.n_seeds, d.n_items, d.seed_sd > 0, d.shared_items, d.heavy_tails) for d in cal.DESIGNS}
    assert (3, 1, True, False, False) in names  # one item per seed
    assert (3, 30, False, False, False) in names  # 3 x 30 independent
    assert (3, 30, True, False, False) in names  # seed-level shift
    assert any(d.shared_items and d.n_seeds == 3 for d in cal.DESIGNS)
    assert any(d.heavy_tails for d in cal.DESIGNS)
    assert {5, 10} <= {d.n_seeds for d in cal.DESIGNS}
    shift = next(d for d in cal.DESIGNS if d.name == "seed shift sd 0.3")
    assert (shift.seed_sd, shift.noise_sd) == (0.3, 1.0)
    # issue 46: unequal items per seed (each of its designs), right-skewed few items, arm x seed effects at a floor
    counts = {d.item_counts for d in cal.DESIGNS}
    assert {(50, 50, 50, 10), (3, 10, 40), (10,) * 9 + (100,), (2, 5, 12, 60, 150)} <= counts
    assert any(d.skew and (d.n_seeds, d.n_items) == (3, 12) for d in cal.DESIGNS)
    assert {d.seed_logit_sd for d in cal.BOUNDED_DESIGNS} >= {0.0, 0.3, 0.6}


def test_unequal_designs_leave_absent_items_out():
    design = next(d for d in cal.DESIGNS if d.item_counts == (3, 10, 40))
    d = cal.simulate(design, 2, 0.0, np.random.default_rng(1))
    assert np.isfinite(d).sum(axis=-1).tolist() == [[3, 10, 40]] * 2
    est, se, df = cal.v2_estimates(d, False)
    m = np.nanmean(d, axis=-1)  # the seed means count equally
    assert (
        np.allclose(est, m.mean(axis=-1)) and np.allclose(se, m.std(axis=-1, ddof=1) / np.sqrt(3)) and (df == 2).all()
    )
    # true SE of the mean of seed means: sqrt(sum_s (0.09 + 1 / n_s)) / 3
    assert cal.true_se(design) == pytest.approx(np.sqrt(3 * 0.09 + 1 / 3 + 1 / 10 + 1 / 40) / 3)


@pytest.mark.claim("paired-protocol", "C4")
def test_vectorised_path_is_compare():
    """The simulator scores data sets with the same functions as compare: intervals agree set by set."""
    rng = np.random.default_rng(9)
    meta = ArmMeta("c", "d", 0)
    for design in (cal.DESIGNS[2], cal.DESIGNS[3]):
        sets = cal.simulate(design, 5, 0.1, rng)
        lo, hi, p = cal.v2_test(sets, design.shared_items)
        for k, d in enumerate(sets):
            r = compare(
                {s: np.zeros(d.shape[1]) for s in range(d.shape[0])},
                dict(enumerate(d)),
                meta_a=meta,
                meta_b=ArmMeta("c", "d", 0),
                higher_is_better=True,
                min_effect=0.1,
                shared_items=design.shared_items,
                n_boot=10,
            )
            assert (r.ci_low, r.ci_high, r.p_value) == (pytest.approx(lo[k]), pytest.approx(hi[k]), pytest.approx(p[k]))


def test_v1_reference_collapses_with_one_item_per_seed():
    """The pre-v2 estimator (reference only): its within-seed bootstrap CI has zero width with one item per seed."""
    rng = np.random.default_rng(0)
    sets = cal.simulate(cal.DESIGNS[0], 50, 0.2, rng)
    lo, hi, _ = cal.v1_reference(sets, n_boot=50, rng=rng)
    assert np.all(lo == hi) and not np.any((lo <= 0.2) & (0.2 <= hi))


def test_simulator_refuses_bad_designs():
    with pytest.raises(ValueError, match=">= 3 seeds"):
        cal.Design("two seeds", 2, 10)
    with pytest.raises(ValueError, match="shared_items=True"):
        cal.Design("item effect nested", 3, 10, item_sd=0.5)
    with pytest.raises(ValueError, match="n_sets"):
        cal.calibrate(n_sets=0)


def test_v1_reference_for_takes_the_maps_compare_takes():
    from agentpost.stats.calibration import v1_reference_for

    a = {1: [0.0, 0.0, 0.0], 2: [0.0, 0.0, 0.0], 3: [0.0, 0.0, 0.0]}
    b = {1: [1.0, 1.1, 0.9], 2: [1.0, 1.2, 0.8], 3: [1.05, 0.95, 1.0]}
    ref = v1_reference_for(a, b, higher_is_better=True, min_effect=0.1)
    # nine pooled differences, mean 1.0: significant and above 0 -> "better"; MDE from the pooled sd with 8 df
    pooled = [1.0, 1.1, 0.9, 1.0, 1.2, 0.8, 1.05, 0.95, 1.0]
    import numpy as np
    from scipy import stats

    q = stats.t.ppf(0.975, 8) + stats.t.ppf(0.8, 8)
    assert ref["verdict"] == "better"
    assert ref["mde"] == pytest.approx(q * np.std(pooled, ddof=1) / 3)
    assert ref["ci_low"] > 0.9 and ref["ci_high"] < 1.1


@pytest.fixture(scope="module")
def classes():
    return cal.class_rates(n_sets=N_SETS, seed=2027)


@pytest.mark.claim("paired-protocol", "C4")
@pytest.mark.parametrize("design", [d.name for d in cal.DESIGNS if not d.skew])
def test_verdict_class_error_rates(classes, design):
    """Issue 27: P(matters or detectable | 0) <= alpha; P(matters | +-delta) <= alpha/2; P(equivalent | +-delta)
    <= alpha (TOST), at delta = 1.5 and 4 true standard errors; bounds leave about 4 Monte Carlo sd of slack."""
    rows = classes[classes.design == design]
    null, edge = rows[rows.truth == "0"], rows[rows.truth != "0"]
    assert (null.error <= 0.06).all(), null
    assert (edge.error <= 0.035).all(), edge
    assert (edge.equivalent_error <= 0.065).all(), edge
    # The classes are reachable: at delta = 4 se most null data sets are declared equivalent.
    assert null[null.delta_in_se == 4.0].equivalent.iloc[0] > 0.5


def test_skewed_few_items_exceed_the_class_rates_by_little(classes):
    """Right-skewed items (centred exponential), 3 seeds x 12 items: false positives and coverage hold (suite above),
    but a wrong class at +-delta reaches about 0.066 (equivalent, nominal 0.05) and 0.037 (matters, nominal 0.025):
    the t on three means of twelve skewed items is itself skewed. Stated in book/evidence-levels.md; this pins how
    far (the lognormal designs of ``SKEWED_BEYOND`` go further, see benchmarks/paired_class_rates.py)."""
    rows = classes[classes.design == "skewed 3x12"]
    null, edge = rows[rows.truth == "0"], rows[rows.truth != "0"]
    assert (null.error <= 0.06).all() and (edge.error <= 0.045).all() and (edge.equivalent_error <= 0.08).all(), rows


@pytest.mark.claim("paired-protocol", "C4")
def test_power_at_the_reported_mde_near_a_floor():
    """Issues 27 and 46: 0/1 outcomes at success rates 0.02-0.05 (and 0.97), 3 seeds x 200 items, also with an effect
    that varies by seed (arm x seed logit sd 0.3-0.6): the data sets at the median MDE reported on pilots without an
    effect are detected 70-90% of the time (target 80%); CIs cover the expected difference and rarely fire at 0."""
    table = cal.bounded_power(n_sets=N_SETS, n_mde=300, seed=11, references=False)
    assert set(table.design) == {d.name for d in cal.BOUNDED_DESIGNS}
    for row in table.itertuples():
        assert 0.7 <= row.detection_at_mde <= 0.9, row
        assert row.coverage >= 0.94 and row.fpr <= 0.06, row


def test_bounded_truth_by_hand():
    """Without a seed effect the expected difference is the effect; with one it is E[expit(l_b + z)] - E[expit(l_a +
    z)], here against a 200,000-draw Monte Carlo mean."""
    plain = cal.BOUNDED_DESIGNS[0]
    assert cal.bounded_truth(plain, 0.05) == 0.05 and cal.bounded_truth(cal.BOUNDED_DESIGNS[3], 0.05) == -0.05
    varying = next(d for d in cal.BOUNDED_DESIGNS if d.seed_logit_sd == 0.6)
    z = np.random.default_rng(0).standard_normal(200_000)
    expit = lambda x: 1 / (1 + np.exp(-x))  # noqa: E731
    mc = expit(np.log(0.07 / 0.93) + 0.6 * z).mean() - expit(np.log(0.02 / 0.98) + 0.6 * z).mean()
    assert cal.bounded_truth(varying, 0.05) == pytest.approx(mc, abs=3e-4)


@pytest.mark.slow
@pytest.mark.claim("paired-protocol", "C4")
def test_planner_first_design_is_powered_from_three_seed_pilots():
    """Issue 46: from 3-seed pilots of its four designs, the first design the planner lists reaches a mean power of
    at least 0.75 at the margin (0.80-1.00 measured with 100 pilots; before: 0.31-0.68)."""
    table = cal.planner_power(n_pilots=60, n_sets=300, seed=3)
    assert (table.mean_power >= 0.75).all(), table
