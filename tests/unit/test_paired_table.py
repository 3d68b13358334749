"""The one table form of paired comparisons: glue_paired's dict in receipts -> evidence pages and ledger."""

import json
from pathlib import Path

from agentpost.record import glue_paired
from agentpost.evidence import levels
from agentpost.evidence.paired_table import is_paired, paired_outcome, paired_rows
from agentpost.record.recording import _jsonable
from agentpost.stats.paired import ArmMeta, compare

A = {1: [3.0, 2.0], 2: [4.0, 1.0], 3: [2.0, 2.0]}
B = {1: [2.0, 1.0], 2: [1.0, 1.0], 3: [2.0, 1.0]}


def recorded(**kw):
    """A comparison as a receipt holds it: the JSON form of as_dict(), as glue_paired writes it."""
    r = compare(
        A,
        B,
        meta_a=ArmMeta("c", "d", 1),
        meta_b=ArmMeta("c", "d", 1),
        higher_is_better=False,
        min_effect=0.05,
        name_a="A",
        name_b="B",
        **kw,
    )
    return json.loads(json.dumps(_jsonable(r.as_dict())))


def receipt(seed, chapter="kite", **metrics):
    return {"chapter": chapter, "profile": "smoke", "seed": seed, "metrics": metrics}


def test_rows_show_every_field_of_the_one_form():
    table = paired_rows(
        [
            receipt(2, cmp=recorded()),
            receipt(1, cmp=recorded(shared_items=True), other=1.5),
            receipt(1, chapter="actkv", x=recorded()),
        ]
    )
    lines = table.strip().splitlines()
    assert lines[0].startswith("| chapter | profile | run seed | comparison") and len(lines) == 2 + 3
    assert lines[2].startswith("| actkv | smoke | 1 | `x` (B − A)")  # sorted by chapter, profile, name, seed
    crossed = next(line for line in lines if "| kite | smoke | 1 |" in line)
    # estimate -1, 95% CI wide across 0 and -0.05: inconclusive; crossed 3 seeds x 2 shared items
    assert "| -1 |" in crossed and "| 0.05 | **inconclusive** |" in crossed and "3 × 2 shared" in crossed
    nested = next(line for line in lines if "| kite | smoke | 2 |" in line)
    assert "[-2.242, +0.2421]" in nested and "/ 1.67 / — |" in nested and "3 × 6 nested" in nested
    assert all(line.count("|") == lines[0].count("|") for line in lines)


def test_no_comparison_no_table_and_old_forms_are_not_read():
    old = {"mean_diff": -1.0, "ci_low": -2, "ci_high": 0, "verdict": "better"}  # v1 dict: lacks the v2 fields
    assert not is_paired(old) and paired_rows([receipt(1, cmp=old, n=3)]) == ""


def test_ledger_outcome_reads_the_verdict_from_the_dict(tmp_path):
    runs = [levels.Run(Path(tmp_path), receipt(s, cmp=recorded())) for s in (1, 2)]
    note = levels._outcome(runs, ("cmp",))
    assert note.startswith("cmp = inconclusive (B − A -1") and note.count("inconclusive") == 2
    assert paired_outcome(recorded()) in note


def test_glue_paired_records_the_dict_form(monkeypatch):
    shown = []
    monkeypatch.setattr("agentpost.record.recording._display", lambda bundle, name, **_: shown.append(bundle))
    r = compare(A, B, meta_a=ArmMeta("c", "d", 1), meta_b=ArmMeta("c", "d", 1), higher_is_better=False, min_effect=0.05)
    glue_paired("paired_b_vs_a", r)
    scrap = shown[0]["application/scrapbook.scrap.json+json"]
    assert is_paired(scrap["data"]) and scrap["data"]["verdict"] == "inconclusive"
    assert shown[0]["text/plain"] == r.summary()
