"""Design checks on synthetic runs built to fail each one (agentpost.evidence.design_checks), their declarations
(agentpost.catalogue.design), the ledger reading the strongest profile, and verdict labels that keep direction."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agentpost.catalogue import Comparison
from agentpost.catalogue.design import Competence, Design, Reference, Tuning, design, parse
from agentpost.evidence.comparisons import compute_one
from agentpost.evidence.design_checks import (
    checks_for,
    competence,
    design_section,
    headroom,
    identity,
    no_harm,
    summary,
    tuning,
)
from agentpost.evidence.levels import Run
from agentpost.record.outcomes import arm_facts, outcomes_payload

FACTS = arm_facts(checkpoint="c0", data_version="d0", updates=10)
ITEMS = [f"q{i}" for i in range(40)]
COMP = Comparison(
    id="b_vs_a", claim="C1", metric="acc", a="a", b="b", higher_is_better=True, min_effect=0.05, why="test"
)


def run(seed: int, arms: dict, metrics: dict | None = None, parameters: dict | None = None) -> Run:
    data = outcomes_payload("acc", arms, items=ITEMS, facts={a: FACTS for a in arms})
    receipt = {
        "seed": seed,
        "status": "ok",
        "kind": "profile",
        "metrics": {"outcomes_acc": data, **(metrics or {})},
        "parameters": parameters or {},
    }
    return Run(Path(f"seed-{seed}"), receipt)


def arms_at(seed: int, means: dict) -> dict:
    rng = np.random.default_rng(seed)
    return {arm: (rng.random(len(ITEMS)) < m).astype(float) for arm, m in means.items()}


def statuses(checks, kind):
    return [c.status for c in checks if c.kind == kind]


# ------------------------------------------------------------------ no harm


def test_no_harm_fails_a_trained_arm_below_its_starting_point():
    group = [run(s, arms_at(s, {"start": 0.7, "a": 0.3, "b": 0.72})) for s in range(6)]
    ref = Reference(trained=("a", "b"), why="t", arm="start")
    checks = no_harm(COMP, group, ref)
    assert [c.status for c in checks] == ["fail", "pass"]
    assert "a − start" in checks[0].text and "below its starting point" in checks[0].text


def test_no_harm_reads_a_per_seed_reference_and_another_metric_with_its_own_direction():
    # the reference is a scalar per seed (0.6); arm a's mean is about 0.3 at every seed: worse
    group = [run(s, arms_at(s, {"a": 0.3, "b": 0.6}), metrics={"acc_prior": 0.6}) for s in range(5)]
    checks = no_harm(COMP, group, Reference(trained=("a",), why="t", scalar="{metric}_prior"))
    assert statuses(checks, "no harm") == ["fail"]
    # a lower-is-better comparison whose no-harm check reads acc (higher is better) through checked_on
    lower = Comparison(**{**COMP.__dict__, "id": "lower", "metric": "loss", "higher_is_better": False})
    ref = Reference(trained=("a",), why="t", arm="b", checked_on=(("loss", "acc"),))
    assert statuses(no_harm(lower, group, ref, {"acc": COMP}), "no harm") == ["fail"]
    assert statuses(no_harm(lower, group, ref, {}), "no harm") == ["missing"]


def test_no_harm_is_missing_when_the_reference_is_not_recorded():
    group = [run(s, arms_at(s, {"a": 0.3, "b": 0.6})) for s in range(5)]
    checks = no_harm(COMP, group, Reference(trained=("a",), why="t", scalar="{metric}_prior"))
    assert statuses(checks, "no harm") == ["missing"]


# ------------------------------------------------------------------ competence


def test_competence_against_a_number_and_a_recorded_floor():
    group = [run(s, arms_at(s, {"a": 0.5, "b": 0.5}), metrics={"exact": 0.0, "bigram": 0.4}) for s in range(3)]
    fails = Competence(id="names", why="t", higher_is_better=True, metric="exact", floor=0.1)
    assert competence(fails, group).status == "fail"
    passes = Competence(
        id="arms", why="t", higher_is_better=True, outcomes="acc", arms=("a", "b"), floor_metric="bigram"
    )
    assert competence(passes, group).status == "pass"  # both arms near 0.5 > 0.4
    absent = Competence(id="x", why="t", higher_is_better=True, metric="not_recorded", floor=0.1)
    assert competence(absent, group).status == "missing"


# ------------------------------------------------------------------ headroom


def test_headroom_fails_when_no_arm_can_move_by_the_margin_or_the_baseline_sits_at_a_bound():
    flat = [run(s, {"a": np.full(40, 0.50), "b": np.full(40, 0.52), "c": np.full(40, 0.53)}) for s in range(3)]
    assert statuses(headroom(COMP, flat), "headroom") == ["fail"]  # spread 0.03 <= 0.05
    ceiling = [run(s, {"a": np.ones(40), "b": np.full(40, 0.5)}) for s in range(3)]
    bounded = Comparison(**{**COMP.__dict__, "bounds": (0.0, 1.0)})
    assert statuses(headroom(bounded, ceiling), "headroom") == ["pass", "fail"]  # a at the ceiling


# ------------------------------------------------------------------ tuning


def test_a_pick_at_a_grid_edge_at_most_seeds_fails_and_an_interior_pick_passes():
    grid = {"lr_grid": [1e-3, 3e-3, 1e-2]}
    edge = [run(s, arms_at(s, {"a": 0.5, "b": 0.5}), {"picked": {"a": 1e-2, "b": 3e-3}}, grid) for s in range(6)]
    knob = Tuning(knob="lr", grid="lr_grid", picks="picked")
    assert statuses(tuning(COMP, edge, knob, 1 / 3), "tuning") == ["fail", "pass"]
    two_of_six = [
        run(s, arms_at(s, {"a": 0.5, "b": 0.5}), {"picked": {"a": 1e-2 if s < 2 else 3e-3}}, grid) for s in range(6)
    ]
    assert statuses(
        tuning(COMP, two_of_six, Tuning(knob="lr", grid="lr_grid", picks="picked", arms=("a",)), 1 / 3), "tuning"
    ) == ["pass"]


def test_a_pick_resting_on_few_successes_fails():
    rows = [
        {"arm": "a", "env": "E", "lr": lr, "selected": lr == 2.0, "success": s}
        for lr, s in ((1.0, 0.02), (2.0, 0.06), (4.0, 0.0))
    ]
    params = {"episodes": 8, "seeds_v": [1, 2, 3, 4, 5, 6], "env_name": "E"}  # 48 trials: 0.06 x 48 = 2.9
    group = [run(s, arms_at(s, {"a": 0.5, "b": 0.5}), {"rows": rows}, params) for s in range(3)]
    knob = Tuning(
        knob="lr",
        grid_key="lr",
        table="rows",
        where={"env": "{env_name}"},
        score="success",
        trials=("episodes", "seeds_v"),
        min_successes=10,
        arms=("a",),
    )
    checks = tuning(COMP, group, knob, 1 / 3)
    assert [c.status for c in checks] == ["pass", "fail"]  # interior pick, but on 2.9 successes
    assert "2.88" in checks[1].text


def test_unequal_tuning_budgets_fail():
    rows = [{"arm": "b"}] * 4 + [{"arm": "a"}]
    group = [run(s, arms_at(s, {"a": 0.5, "b": 0.5}), {"variants": rows}) for s in range(3)]
    knob = Tuning(knob="reading", candidates="variants", arms={"a": "a", "b": "b"})
    checks = tuning(COMP, group, knob, 1 / 3)
    assert statuses(checks, "tuning") == ["fail"] and "b among 4" in checks[0].text


# ------------------------------------------------------------------ identity


def test_two_arms_equal_item_for_item_at_most_seeds_are_one_run():
    same = [run(s, {"a": (x := arms_at(s, {"x": 0.5})["x"]), "b": x.copy()}) for s in range(4)]
    assert statuses(identity(COMP, same, 0.5), "identity") == ["fail"]
    differ = [run(s, arms_at(s, {"a": 0.5, "b": 0.5})) for s in range(4)]
    assert statuses(identity(COMP, differ, 0.5), "identity") == ["pass"]


def test_a_sound_design_passes_every_check_and_pages_list_only_failures():
    group = [
        run(
            s, arms_at(s, {"start": 0.3, "a": 0.4, "b": 0.7}), {"exact": 0.5, "picked": 3e-3}, {"g": [1e-3, 3e-3, 1e-2]}
        )
        for s in range(5)
    ]
    declared = Design(
        reference=Reference(trained=("a", "b"), why="t", arm="start"),
        competence=(Competence(id="c", why="t", higher_is_better=True, metric="exact", floor=0.1),),
        tuning=(Tuning(knob="lr", grid="g", picks="picked", arms=("a", "b")),),
    )
    checks = checks_for(COMP, group, declared)
    assert {c.kind for c in checks} == {"no harm", "competence", "headroom", "tuning", "identity"}
    assert all(c.ok for c in checks), [c.line() for c in checks if not c.ok]
    assert summary(checks) == "design ok"
    computed = compute_one("x", "cpu", COMP, group)
    computed.checks = checks
    assert design_section([computed])[-1] == "- `b_vs_a`: **design ok**"


# ------------------------------------------------------------------ declarations


@pytest.mark.parametrize(
    "raw, message",
    [
        ({"reference": {"trained": ["a"], "why": "t"}}, "exactly one of arm"),
        ({"competence": [{"id": "c", "why": "t", "higher_is_better": True, "metric": "m"}]}, "floor"),
        ({"tuning": [{"knob": "lr", "picks": "p"}]}, "grid"),
        ({"tuning": [{"knob": "lr", "candidates": "v", "arms": ["a"]}]}, "tuning budget"),
        ({"edge_share": 2}, "edge_share"),
        ({"surprise": 1}, "unknown keys"),
    ],
)
def test_bad_declarations_are_refused_by_name(raw, message):
    with pytest.raises(ValueError, match=message):
        parse("x.yaml: design", raw)


def test_every_catalogue_design_parses_and_names_declared_arms():
    from agentpost.catalogue import chapters

    for ch in chapters():
        declared = design(ch.id)
        arms = {arm for c in ch.comparisons for arm in (c.a, c.b)}
        if declared.reference:
            assert set(declared.reference.trained) <= arms | {declared.reference.arm}, ch.id
        for knob in declared.tuning:
            named = knob.arms if isinstance(knob.arms, tuple) else tuple(knob.arms)
            assert set(named) <= arms, (ch.id, knob.knob)


# ------------------------------------------------------------------ labels and the ledger


def test_an_equivalent_verdict_keeps_its_direction():
    from agentpost.stats.paired import ArmMeta, compare

    rng = np.random.default_rng(0)
    a = {s: dict(zip(ITEMS, rng.normal(size=40))) for s in range(6)}
    b = {s: {i: v - 0.02 + rng.normal(scale=0.001) for i, v in a[s].items()} for s in a}
    meta = ArmMeta("c", "d", 1)
    r = compare(a, b, meta_a=meta, meta_b=meta, higher_is_better=True, min_effect=0.5, shared_items=True)
    assert r.verdict_class == "equivalent" and r.verdict == "equivalent, detectably worse"


def test_the_ledger_reads_the_strongest_profile_in_either_order(monkeypatch):
    from agentpost.catalogue import Claim, chapter
    from agentpost.evidence import levels

    monkeypatch.setattr(levels, "config", lambda: {"min_seeds": 3})
    monkeypatch.setattr(levels, "gpu_evidence_problems", lambda receipts: ["cpu"])
    monkeypatch.setattr(levels, "copied_seeds", lambda receipts: [])
    claim = Claim("C1", "t", ("acc_mean",))
    kite = chapter("kite")

    def runs_of(profile, seeds):
        return [
            Run(
                Path(f"{profile}-{s}"),
                {
                    "seed": s,
                    "status": "ok",
                    "kind": "profile",
                    "metrics": {"acc_mean": 0.1 * s},
                    "chapter": "kite",
                    "profile": profile,
                    "timing": {"end": "2026"},
                },
            )
            for s in seeds
        ]

    monkeypatch.setattr(levels, "counted_configuration", lambda group: group)
    smoke, cpu = runs_of("smoke", [1, 2, 3]), runs_of("cpu", list(range(1, 11)))
    for order in ([("kite", "smoke"), ("kite", "cpu")], [("kite", "cpu"), ("kite", "smoke")]):
        runs = {key: (smoke if key[1] == "smoke" else cpu) for key in order}
        status = levels.claim_status(kite, claim, {}, runs)
        assert status.reached == "diagnostic"
        assert status.notes["diagnostic"].startswith("profile cpu, seeds [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]")
        assert status.notes["other profiles"].startswith("smoke: diagnostic, 3 seeds")


def test_a_stronger_profile_whose_design_fails_is_not_replaced_by_a_weaker_one(monkeypatch):
    from agentpost.catalogue import Claim, chapter
    from agentpost.evidence import levels
    from agentpost.evidence.comparisons import Computed
    from agentpost.evidence.design_checks import Check

    monkeypatch.setattr(levels, "config", lambda: {"min_seeds": 3})
    monkeypatch.setattr(levels, "gpu_evidence_problems", lambda receipts: ["cpu"])
    monkeypatch.setattr(levels, "copied_seeds", lambda receipts: [])
    monkeypatch.setattr(levels, "counted_configuration", lambda group: group)
    claim = Claim("C1", "t", ("acc_mean",))

    def runs_of(seeds):
        return [
            Run(Path(f"r{s}"), {"seed": s, "status": "ok", "kind": "profile", "metrics": {"acc_mean": 0.5}})
            for s in seeds
        ]

    headline = Comparison(**{**COMP.__dict__, "headline": True})
    blocked = Computed("kite", "cpu", headline, seeds=list(range(10)), checks=[Check("identity", "fail", "same")])
    sound = Computed("kite", "smoke", headline, seeds=[0, 1, 2], checks=[Check("identity", "pass", "differ")])
    runs = {("kite", "smoke"): runs_of(range(3)), ("kite", "cpu"): runs_of(range(10))}
    status = levels.claim_status(
        chapter("kite"), claim, {}, runs, {("kite", "cpu"): [blocked], ("kite", "smoke"): [sound]}
    )
    assert status.reached == "none" and "NOT COUNTED" in status.notes["diagnostic"]
    assert "identity" in status.notes["diagnostic"] and status.notes["other profiles"].startswith("smoke: diagnostic")
