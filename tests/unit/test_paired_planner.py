"""The planner: seeds x items from a pilot's variance components, against hand-computed numbers."""

import math

import numpy as np
import pytest
from scipy import stats

from agentpost.stats import ProtocolError, plan
from agentpost.stats.paired import ArmMeta, compare, mde_multiplier
from agentpost.stats.planner import SEED_PLAN_UPPER_CONFIDENCE, assumed_components, predict


@pytest.mark.claim("paired-protocol", "C1")
def test_crossed_prediction_by_hand():
    comp = {"seed": 0.01, "item": 0.04, "residual": 0.02}
    p = predict(comp, 3, 30, design="crossed")
    # Var = 0.01/3 + 0.04/30 + 0.02/90 = 0.0048889; se = 0.0699206
    assert p["se"] == pytest.approx(math.sqrt(0.01 / 3 + 0.04 / 30 + 0.02 / 90)) and p["se"] == pytest.approx(0.0699206)
    # E[MS_seed] = 0.02 + 30 * 0.01 = 0.32 (at its 70% upper bound in the df: 0.32 * 2 / chi2_{0.3, 2} = 0.8972),
    # E[MS_item] = 0.02 + 3 * 0.04 = 0.14, E[MS_resid] = 0.02; chi2_{0.3, 2} = -2 ln 0.7.
    upper = 0.32 * 2 / (-2 * math.log(0.7))
    df = (upper + 0.14 - 0.02) ** 2 / (upper**2 / 2 + 0.14**2 / 29 + 0.02**2 / 58)
    assert (
        upper == pytest.approx(0.8972, abs=1e-4)
        and p["df"] == pytest.approx(df)
        and p["df"] == pytest.approx(2.5664, abs=1e-4)
    )
    assert p["mde"] == pytest.approx(mde_multiplier(df) * p["se"])


@pytest.mark.claim("paired-protocol", "C1")
def test_nested_plan_by_hand():
    comp = {"seed": 0.01, "item": 0.5, "residual": None}
    p = plan(comp, design="independent", min_effect=0.2)  # no pilot design: the components as given
    # pilot: Var = 0.01/3 + 0.5/90 = 0.0088889, df 2 -> MDE = k(2) * 0.0942809
    pilot = predict(comp, 3, 30, design="independent")
    assert pilot["se"] == pytest.approx(math.sqrt(0.01 / 3 + 0.5 / 90)) and pilot["df"] == 2
    assert pilot["mde"] == pytest.approx(mde_multiplier(2.0) * math.sqrt(0.01 / 3 + 0.5 / 90)) and pilot["mde"] > 0.2
    first = {d["seeds"]: d["items"] for d in p.designs}
    # 3 seeds: the seed term alone gives k(2) sqrt(0.01/3) = 0.326 > 0.2 -> never; 4 seeds: k(3) sqrt(0.0025) = 0.213
    assert 3 not in first and 4 not in first
    # 5 seeds, df 4: n = 100 -> se sqrt(0.002 + 0.001) = 0.0548, MDE 0.206 > 0.2; n = 200 -> se 0.05, MDE 0.188.
    assert first[5] == 200 and mde_multiplier(4.0) * math.sqrt(0.003) > 0.2 >= mde_multiplier(4.0) * 0.05
    assert all(d["mde"] <= 0.2 for d in p.designs) and p.as_dict()["design"] == "independent"
    # listed: the fewest seeds that reach 0.2, then only larger seed counts that need fewer items
    assert [d["seeds"] for d in p.designs][0] == 5 and all(
        later["items"] < earlier["items"] for earlier, later in zip(p.designs, p.designs[1:])
    )


@pytest.mark.claim("paired-protocol", "C1")
def test_a_zero_seed_estimate_is_planned_at_its_upper_bound_by_hand():
    """3 seeds x 30 nested items, seed variance estimated as 0, item variance 0.5: the seed mean square is read as
    MS_within = 0.5 (2 df); its 60% upper bound is 0.5 * 2 / chi2_{0.4, 2} = 1 / (-2 ln 0.6) = 0.978808, so the plan
    assumes a seed variance of (0.978808 - 0.5) / 30 = 0.0159603, not 0."""
    comp = {"seed": 0.0, "item": 0.5, "residual": None}
    assumed = assumed_components(comp, (3, 30), design="independent", level=0.6)
    assert assumed["seed"] == pytest.approx((1 / (-2 * math.log(0.6)) - 0.5) / 30) == pytest.approx(0.0159603, abs=1e-7)
    p = plan(comp, design="independent", min_effect=0.2, pilot=(3, 30), seed_upper=0.6)
    assert p.assumed == assumed and p.components["seed"] == 0.0 and "upper bound" in p.method
    assert p.pilot == predict(assumed, 3, 30, design="independent")
    # a positive estimate is raised to its bound too: MS = 0.5 + 30 * 0.01 = 0.8 -> (0.8 * 1.957616 - 0.5) / 30
    raised = assumed_components({"seed": 0.01, "item": 0.5}, (3, 30), design="independent", level=0.6)
    assert (
        raised["seed"]
        == pytest.approx((0.8 * 2 / (-2 * math.log(0.6)) - 0.5) / 30)
        == pytest.approx(0.035536, abs=1e-6)
    )


def test_designs_are_capped_at_the_items_that_exist():
    comp = {"seed": 0.0001, "item": 4.0, "residual": None}
    free = plan(comp, design="independent", min_effect=0.2)
    assert free.designs[0]["items"] > 151
    capped = plan(comp, design="independent", min_effect=0.2, max_items=151, seeds=range(3, 200))
    assert all(d["items"] <= 151 for d in capped.designs) and capped.designs[0]["items"] == 151
    assert capped.designs[0]["seeds"] > free.designs[0]["seeds"] and capped.max_items == 151


def test_a_thousand_seed_counts_plan_quickly():
    import time

    start = time.perf_counter()
    p = plan({"seed": 0.005, "item": 0.3, "residual": 0.1}, design="crossed", min_effect=0.02, seeds=range(3, 1001))
    assert time.perf_counter() - start < 2.0 and p.designs and p.designs[0]["seeds"] > 100


@pytest.mark.claim("paired-protocol", "C1")
def test_prediction_matches_compare_on_a_noiseless_pilot():
    """A pilot whose mean squares equal their expectations reproduces compare's SE and df exactly."""
    s, n = 3, 4
    # Construct d = u_s + v_j + e_sj with orthogonal effects so that MS match chosen values.
    u = np.array([-1.0, 0.0, 1.0]) * 0.3
    v = np.array([-1.5, -0.5, 0.5, 1.5]) * 0.4
    e = np.outer([1.0, -2.0, 1.0], [1.0, -1.0, -1.0, 1.0]) * 0.1
    d = u[:, None] + v[None, :] + e
    r = compare(
        {k: np.zeros(n) for k in range(s)},
        dict(enumerate(d)),
        meta_a=ArmMeta("c", "d", 1),
        meta_b=ArmMeta("c", "d", 1),
        higher_is_better=True,
        min_effect=0.1,
        shared_items=True,
    )
    p = predict(r.variance_components, s, n, design="crossed")
    assert p["se"] == pytest.approx(r.se) and p["df"] == pytest.approx(r.df) and p["mde"] == pytest.approx(r.mde)


def test_plan_refuses_bad_input():
    with pytest.raises(ProtocolError, match="design"):
        plan({"seed": 0.1, "item": 0.1, "residual": 0.1}, design="paired", min_effect=0.1)
    with pytest.raises(ProtocolError, match="min_effect"):
        plan({"seed": 0.1, "item": 0.1, "residual": 0.1}, design="crossed", min_effect=0)
    with pytest.raises(ProtocolError, match="alpha"):
        plan({"seed": 0.1, "item": 0.1, "residual": 0.1}, design="crossed", min_effect=0.1, alpha="x")
    with pytest.raises(ProtocolError, match="max_items"):
        plan({"seed": 0.1, "item": 0.1, "residual": 0.1}, design="crossed", min_effect=0.1, max_items=0)
    with pytest.raises(ProtocolError, match="variance component 'seed'"):
        plan({"seed": -1.0, "item": 0.1, "residual": 0.1}, design="crossed", min_effect=0.1)
    assert stats.chi2.ppf(0.3, 2) == pytest.approx(-2 * math.log(0.7))


def _computed(estimate, mde, verdict_class, components, n_seeds=5, n_items=10, min_effect=0.05):
    from agentpost.catalogue import Comparison
    from agentpost.evidence.comparisons import Computed

    comparison = Comparison(
        id="b_vs_a", claim="C1", metric="m", a="a", b="b", higher_is_better=True, min_effect=min_effect, why=""
    )
    result = {
        "estimate": estimate,
        "mde": mde,
        "verdict_class": verdict_class,
        "variance_components": components,
        "design": "crossed",
        "n_seeds": n_seeds,
        "n_items": n_items,
    }
    return Computed("kite", "cpu", comparison, result=result)


def test_what_would_settle_an_inconclusive_comparison_by_hand():
    """Above the margin the target MDE is the margin; at or below it (a detectable difference whose CI straddles
    the margin) it is the MDE whose 95% CI half-width MDE * 1.959964 / (1.959964 + 0.841621) equals
    | |estimate| - margin |: for estimate 0.04 and margin 0.05, 0.01 * 2.801585 / 1.959964 = 0.014294."""
    from agentpost.evidence.planning import SETTLE_SEEDS, settling_target, what_would_settle

    components = {"seed": 0.0016, "item": 0.0011, "residual": 0.0068}
    wide = _computed(0.01, 0.09, "inconclusive", components)
    assert settling_target(wide) == 0.05
    straddling = _computed(-0.04, 0.03, "detectable", components)
    assert settling_target(straddling) == pytest.approx(0.014294, abs=1e-6)
    options = what_would_settle(wide, wall_s=60.0)
    assert [o.items for o in options] == [10, 40]
    # the pilot (5 seeds x 10 items) is planned with its seed variance at the upper bound
    assumed = assumed_components(components, (5, 10), design="crossed", level=SEED_PLAN_UPPER_CONFIDENCE)
    assert assumed["seed"] > components["seed"]
    for o in options:  # the first seed count on the grid whose predicted MDE reaches the target, and not the one before
        assert predict(assumed, o.seeds, o.items, design="crossed")["mde"] <= 0.05 == o.target
        before = SETTLE_SEEDS[SETTLE_SEEDS.index(o.seeds) - 1]
        assert predict(assumed, before, o.items, design="crossed")["mde"] > 0.05
        # one run takes 60 s when items cost nothing, 60 s x items/10 when evaluation dominates; two at a time
        assert o.hours_jobs2 == pytest.approx((o.seeds / 120, o.seeds / 120 * o.items / 10))
    assert what_would_settle(_computed(0.2, 0.03, "matters", components), 60.0) == []
    assert what_would_settle(_computed(0.05, 0.03, "detectable", components), 60.0) == []  # estimate on the margin


def test_the_evidence_page_says_what_would_settle_only_the_inconclusive_comparisons():
    from agentpost.evidence.comparison_pages import settling_lines

    components = {"seed": 0.0016, "item": 0.0011, "residual": 0.0068}
    lines = settling_lines(
        [_computed(0.01, 0.09, "inconclusive", components), _computed(0.2, 0.03, "matters", components)], wall_s=60.0
    )
    said = [line for line in lines if line.startswith("- ")]
    assert len(said) == 1 and said[0].startswith("- `b_vs_a` (MDE 0.09, margin 0.05; needs MDE 0.05")
    assert " seeds at 10 items per seed (about " in said[0] and " seeds at 40 items per seed" in said[0]


def test_the_cli_report_names_the_assumed_seed_variance_the_target_and_the_item_cap():
    from agentpost.evidence.planning import PlanRow, render

    components = {"seed": 0.0, "item": 0.0011, "residual": 0.0068}
    c = _computed(0.01, 0.09, "inconclusive", components)
    c.result["verdict"] = "inconclusive"
    p = plan(components, design="crossed", min_effect=0.05, pilot=(5, 10), max_items=40)
    identical = _computed(0.0, float("nan"), "no_information", {"seed": 0.0, "item": 0.0, "residual": 0.0})
    identical.result["verdict"] = "no information"
    text = render([PlanRow(c, p, 60.0), PlanRow(identical, p, 60.0)], "kite", "cpu")
    assert f"variance seed 0 (upper bound used: {p.assumed['seed']:.3g})" in text and p.assumed["seed"] > 0
    assert "target MDE 0.05 (the margin); at most 40 items per seed exist" in text
    assert all(d["items"] <= 40 for d in p.designs)
    assert "identical arms in the pilot" in text and text.count("upper bound used") == 1
