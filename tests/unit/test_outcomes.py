"""One seed, one run: the recording call, declared comparisons and the harness that computes them across runs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from agentpost.catalogue import Comparison, _load, chapters
from agentpost.evidence.comparisons import compute_one
from agentpost.evidence.levels import Run
from agentpost.record.outcomes import (
    arm_facts,
    fingerprint,
    outcomes_html,
    outcomes_payload,
    outcomes_text,
    record_outcomes,
)
from agentpost.record.recording import SCRAP_MIME, rendering_problem

FACTS = arm_facts(checkpoint="c0", data_version="d0", updates=10)


def payload(arms: dict, items=None, facts=None):
    items = items if items is not None else [f"q{i}" for i in range(len(next(iter(arms.values()))))]
    return outcomes_payload("acc", arms, items=items, facts=facts or {a: FACTS for a in arms})


def test_payload_keeps_items_and_sorts_arms():
    data = payload({"b": [1, 0, 1], "a": [0, 0, 1]})
    assert data["items"] == ["q0", "q1", "q2"]
    assert list(data["arms"]) == ["a", "b"]
    assert data["arms"]["b"] == [1.0, 0.0, 1.0]
    assert data["facts"]["a"]["updates"] == 10


def test_mapping_outcomes_are_aligned_by_item_id():
    data = outcomes_payload(
        "acc", {"a": {"x": 1, "y": 2}, "b": {"y": 20, "x": 10}}, items=None, facts={"a": FACTS, "b": FACTS}
    )
    assert data["items"] == ["x", "y"] and data["arms"]["b"] == [10.0, 20.0]


@pytest.mark.parametrize(
    "arms, items, facts, message",
    [
        ({"a": [1, 2]}, ["x"], None, "2 values for 1 items"),
        ({"a": [1, 2]}, ["x", "x"], None, "repeats"),
        ({"a": [1, float("nan")]}, ["x", "y"], None, "non-finite"),
        ({"a": [[1, 2]]}, ["x"], None, "1-D"),
        ({"a": [1]}, ["x"], {"b": FACTS}, "facts are needed"),
        ({"a": [1]}, ["x"], {"a": {"checkpoint": "c"}}, "lack"),
        ({"a": {"x": 1}, "b": {"z": 1}}, None, None, "other items"),
    ],
)
def test_bad_outcomes_are_refused_by_name(arms, items, facts, message):
    with pytest.raises(ValueError, match=message):
        outcomes_payload("acc", arms, items=items, facts=facts or {a: FACTS for a in arms})


def test_arm_facts_refuse_a_typed_update_count():
    with pytest.raises(ValueError, match="updates"):
        arm_facts(checkpoint="c", data_version="d", updates="10")


def test_fingerprint_is_content_addressed():
    torch = pytest.importorskip("torch")
    a = {"w": torch.arange(6.0).reshape(2, 3)}
    assert fingerprint(a) == fingerprint({"w": torch.arange(6.0).reshape(2, 3)})
    assert fingerprint(a) != fingerprint({"w": torch.arange(6.0).reshape(3, 2)})
    assert fingerprint([1, 2]) != fingerprint([2, 1])


def test_record_outcomes_renders_its_data(monkeypatch):
    shown = []
    monkeypatch.setattr("agentpost.record.outcomes._display", lambda bundle, name, **_: shown.append(bundle))
    record_outcomes("acc", {"b": [1, 0], "a": [0, 0]}, items=["x", "y"], facts={"a": FACTS, "b": FACTS})
    bundle = shown[0]
    assert bundle[SCRAP_MIME]["name"] == "outcomes_acc"
    assert "a  mean 0" in bundle["text/plain"] and "b  mean 0.5" in bundle["text/plain"]
    assert rendering_problem(bundle) is None
    forged = dict(bundle, **{"text/plain": bundle["text/plain"].replace("0.5", "0.9")})
    assert rendering_problem(forged) == "its per-arm summary differs from its recorded outcomes"
    data = bundle[SCRAP_MIME]["data"]
    assert (
        outcomes_html(data).startswith('<pre class="agentpost-outcomes">')
        and outcomes_text(data) in bundle["text/plain"]
    )


# ---------------------------------------------------------------- the harness across seed runs


def fake_run(seed: int, arms: dict, items: list, facts: dict | None = None) -> Run:
    data = outcomes_payload("acc", arms, items=items, facts=facts or {a: FACTS for a in arms})
    receipt = {"seed": seed, "status": "ok", "kind": "profile", "metrics": {"outcomes_acc": data}}
    return Run(Path(f"seed-{seed}"), receipt)


COMP = Comparison(
    id="b_vs_a",
    claim="C1",
    metric="acc",
    a="a",
    b="b",
    higher_is_better=True,
    min_effect=0.1,
    why="test",
    items="crossed",
)


def test_items_are_paired_by_id_not_position():
    rng = np.random.default_rng(0)
    items = [f"q{i}" for i in range(40)]
    runs, shuffled = [], []
    for seed in (1, 2, 3):
        a = rng.normal(size=40)
        b = a + 0.5 + rng.normal(scale=0.1, size=40)
        runs.append(fake_run(seed, {"a": a, "b": b}, items))
        order = rng.permutation(40)  # the same outcomes recorded in another item order
        shuffled.append(fake_run(seed, {"a": a[order], "b": b[order]}, [items[i] for i in order]))
    plain = compute_one("x", "smoke", COMP, runs)
    mixed = compute_one("x", "smoke", COMP, shuffled)
    assert plain.problem is None and plain.seeds == [1, 2, 3]
    assert mixed.result["estimate"] == pytest.approx(plain.result["estimate"])
    assert mixed.result["ci_low"] == pytest.approx(plain.result["ci_low"])


def test_copied_seeds_are_not_replications():
    items = ["x", "y", "z"]
    runs = [fake_run(s, {"a": [0, 1, 0], "b": [1, 1, 0]}, items) for s in (1, 2, 3)]
    out = compute_one("x", "smoke", COMP, runs)
    assert out.copies == {2: 1, 3: 1} and out.seeds == [1]
    assert out.result is None and "at least 3 seeds" in out.problem


def test_seeds_that_agree_on_one_metric_only_are_replications():
    """Independent runs that converge to the same discrete policy can coincide on one 0/1 metric; they are copies
    only when every recorded outcome agrees (dropping coincident draws would bias the estimate)."""
    items = ["x", "y", "z"]
    runs = []
    for s in (1, 2, 3):
        run = fake_run(s, {"a": [0, 1, 0], "b": [1, 1, 0]}, items)
        run.receipt["metrics"]["outcomes_f1"] = outcomes_payload(
            "f1", {"a": [0.1 * s, 0.5, 0.2], "b": [0.3, 0.5, s]}, items=items, facts={"a": FACTS, "b": FACTS}
        )
        runs.append(run)
    out = compute_one("x", "smoke", COMP, runs)
    assert out.copies == {} and out.seeds == [1, 2, 3] and out.problem is None


def test_unmatched_arm_facts_are_refused_unless_declared():
    items = ["x", "y"]
    more = arm_facts(checkpoint="c0", data_version="d0", updates=20)
    runs = [fake_run(s, {"a": [0, s], "b": [1, s]}, items, {"a": FACTS, "b": more}) for s in (1, 2, 3)]
    assert "updates" in compute_one("x", "smoke", COMP, runs).problem
    allowed = Comparison(**{**COMP.__dict__, "may_differ": ("updates",)})
    assert compute_one("x", "smoke", allowed, runs).problem is None


def test_crossed_design_refuses_other_items_in_a_seed():
    runs = [
        fake_run(1, {"a": [0, 1], "b": [1, 1]}, ["x", "y"]),
        fake_run(2, {"a": [0, 0], "b": [1, 0]}, ["x", "y"]),
        fake_run(3, {"a": [0, 1], "b": [0, 1]}, ["x", "w"]),
    ]
    problem = compute_one("x", "smoke", COMP, runs).problem
    assert "seed 3" in problem and "item ids differ" in problem and "declare items: nested" in problem
    nested = Comparison(**{**COMP.__dict__, "items": "nested"})
    assert compute_one("x", "smoke", nested, runs).problem is None


def test_missing_arm_is_named():
    runs = [fake_run(s, {"a": [0, 1]}, ["x", "y"]) for s in (1, 2, 3)]
    assert "no arm b" in compute_one("x", "smoke", COMP, runs).problem


def test_catalogue_comparisons_are_checked(tmp_path):
    good = {
        "id": "t",
        "title": "T",
        "claims": [{"id": "C1", "text": "x"}],
        "comparisons": [
            {
                "id": "b_vs_a",
                "claim": "C1",
                "metric": "acc",
                "a": "a",
                "b": "b",
                "higher_is_better": True,
                "min_effect": 0.05,
                "why": "five points",
            }
        ],
    }
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(good))
    assert _load(path).comparisons[0].shared_items
    for bad, message in [
        ({"claim": "C9"}, "claim"),
        ({"min_effect": 0}, "min_effect"),
        ({"higher_is_better": "yes"}, "higher_is_better"),
        ({"items": "both"}, "items"),
        ({"color": 1}, "unknown keys"),
        ({"min_effect": float("inf")}, "min_effect"),
    ]:
        raw = {**good, "comparisons": [{**good["comparisons"][0], **bad}]}
        path.write_text(yaml.safe_dump(raw))
        with pytest.raises(ValueError, match=message):
            _load(path)


def test_every_declared_comparison_names_a_claim_and_a_reason():
    for ch in chapters():
        for c in ch.comparisons:
            assert c.why and c.claim in {cl.id for cl in ch.claims}, (ch.id, c.id)


def test_comparisons_section_draws_a_forest_plot(tmp_path):
    from agentpost.evidence.comparison_pages import comparisons_section, headline_section

    rng = np.random.default_rng(1)
    items = [f"q{i}" for i in range(30)]
    runs = [
        fake_run(s, {"a": (a := rng.normal(size=30)), "b": a + 1 + rng.normal(scale=0.1, size=30)}, items)
        for s in (1, 2, 3)
    ]
    headline = Comparison(**{**COMP.__dict__, "headline": True})
    computed = [
        compute_one("x", "smoke", headline, runs),
        compute_one("x", "smoke", Comparison(**{**COMP.__dict__, "id": "b_vs_c", "a": "c"}), runs),
    ]
    lines = comparisons_section("x", "smoke", computed, tmp_path)
    text = "\n".join(lines)
    assert (tmp_path / "x-smoke-forest.png").stat().st_size > 1000
    assert "`b_vs_a` ★" in text and "not computed: seed 1: outcomes\\_acc has no arm c" in text
    assert "| x · smoke, 3 seeds | `b_vs_a` (C1) |" in headline_section({("x", "smoke"): computed})


def test_verdicts_notebook_glues_values_prose_can_cite(tmp_path):
    from agentpost.catalogue import chapter
    from agentpost.record.recording import read_scraps
    from agentpost.evidence.verdicts import write_verdicts

    rng = np.random.default_rng(2)
    items = [f"q{i}" for i in range(30)]
    runs = [
        fake_run(s, {"a": (a := rng.normal(size=30)), "b": a + 1 + rng.normal(scale=0.1, size=30)}, items)
        for s in (1, 2, 3)
    ]
    computed = {"smoke": [compute_one("x", "smoke", COMP, runs)], "a100-hub": [compute_one("x", "a100-hub", COMP, [])]}
    path = write_verdicts(chapter("kite"), computed, tmp_path)
    import json

    scraps = read_scraps(json.loads(path.read_text()))
    assert scraps["smoke_b_vs_a_seeds"] == 3 and scraps["smoke_b_vs_a_estimate"] == pytest.approx(1, abs=0.1)
    assert scraps["a100_hub_b_vs_a_verdict"].startswith("not computed")
    nbformat = pytest.importorskip("nbformat")
    nbformat.validate(nbformat.reads(path.read_text(), as_version=4))
    assert not list(tmp_path.glob(".*png"))  # the plot is inside the notebook


def test_init_fingerprint_names_the_layout_and_seed_not_the_sampled_floats():
    import torch

    from agentpost.record.outcomes import init_fingerprint

    def built(seed, width=4):
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Embedding(10, width), torch.nn.Linear(width, 3))

    assert init_fingerprint(built(1), 1) == init_fingerprint(built(1), 1)  # two arms built alike share it
    assert init_fingerprint(built(1), 1) != init_fingerprint(built(2), 2)
    assert init_fingerprint(built(1), 1) != init_fingerprint(built(1, width=5), 1)
    model = built(1)
    with torch.no_grad():
        model[0].weight.add_(1e-7)  # last-bit noise of another kernel path does not move it
    assert init_fingerprint(model, 1) == init_fingerprint(built(1), 1)
