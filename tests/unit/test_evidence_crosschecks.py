"""Cheap cross-checks of validate: a run of another chapter, per-cell timings that do not fit the run,
and seeds cloned from one run."""

from __future__ import annotations

import nbformat

from agentpost.record.environment import GLUE_NAME
from agentpost.evidence.validate import _check_cell_timing, _check_chapter, copied_seeds, gpu_evidence_problems


def _problems(check, *args) -> list[tuple[str, str]]:
    found = []
    check(*args, lambda field, message: found.append((field, message)))
    return found


def _nb(cells: list[tuple[str, str, float]], start="2026-01-01T00:00:00+00:00", end="2026-01-01T00:01:00+00:00"):
    nb = nbformat.v4.new_notebook()
    for s, e, d in cells:
        cell = nbformat.v4.new_code_cell("x = 1")
        cell.metadata["papermill"] = {"start_time": s, "end_time": e, "duration": d}
        nb.cells.append(cell)
    nb.metadata["papermill"] = {"start_time": start, "end_time": end, "duration": 60.0, "input_path": "kite.ipynb"}
    return nb


def test_cell_timings_must_fit_the_run():
    ok = _nb(
        [
            ("2026-01-01T00:00:01+00:00", "2026-01-01T00:00:11+00:00", 10.0),
            ("2026-01-01T00:00:11+00:00", "2026-01-01T00:00:51+00:00", 40.0),
        ]
    )
    assert _problems(_check_cell_timing, ok, ok.metadata["papermill"]) == []
    old = _nb([("2019-01-01T00:00:01+00:00", "2019-01-01T00:00:11+00:00", 10.0)])
    assert _problems(_check_cell_timing, old, old.metadata["papermill"])[0][0] == "notebook.cells[0].timing"
    long = _nb([("2026-01-01T00:00:01+00:00", "2026-01-01T00:00:11+00:00", 99_999.0)])
    assert "duration 99999.0 s" in _problems(_check_cell_timing, long, long.metadata["papermill"])[0][1]
    overlap = _nb(
        [
            ("2026-01-01T00:00:01+00:00", "2026-01-01T00:00:41+00:00", 40.0),
            ("2026-01-01T00:00:05+00:00", "2026-01-01T00:00:45+00:00", 40.0),
        ]
    )
    assert _problems(_check_cell_timing, overlap, overlap.metadata["papermill"])[0][0] == "notebook.cells[1].timing"


def test_a_run_executed_from_another_chapters_notebook_never_counts():
    nb = _nb([])
    receipt = {"chapter": "paired-protocol", "hashes": {"source_notebook": "not a real hash"}}
    assert _problems(_check_chapter, receipt, nb) == [
        ("chapter", "papermill executed 'kite.ipynb', not paired-protocol.ipynb")
    ]


def test_seeds_with_identical_metrics_are_copies():
    env = {"kind": "cpu"}
    runs = [{"seed": s, "metrics": {"acc": 0.5, GLUE_NAME: {"cuda_event_ms": s, **env}}} for s in (42, 43, 44)]
    assert copied_seeds(runs) == [[42, 43, 44]]
    runs[2]["metrics"]["acc"] = 0.6
    assert copied_seeds(runs) == [[42, 43]]
    runs[1]["metrics"]["acc"] = 0.7
    assert copied_seeds(runs) == []
    copies = [
        {
            "seed": s,
            "metrics": {"acc": 0.5},
            "device": {},
            "packages": {},
            "kind": "profile",
            "status": "ok",
            "hashes": {"source_notebook": "s", "parameters": "p", "code_tree": "c", "data": {}},
            "chapter": "kite",
            "profile": "a100",
        }
        for s in (1, 2, 3)
    ]
    assert any("identical metrics" in reason for reason in gpu_evidence_problems(copies))


def test_staleness_is_judged_by_the_code_the_run_imported(tmp_path, monkeypatch):
    """A schema-4 receipt is old only when a file its kernel imported changed (or went); an edit elsewhere in the
    tree does not stale it. A path outside the code root never reads as unchanged."""
    from agentpost.evidence import receipt as rc
    from agentpost.record.hashing import sha256_file
    from agentpost.evidence.validate import stale_inputs

    (tmp_path / "agentpost").mkdir()
    used, other = tmp_path / "agentpost" / "used.py", tmp_path / "agentpost" / "other.py"
    used.write_text("x = 1\n")
    other.write_text("y = 1\n")
    (tmp_path.parent / "outside.py").write_text("z = 1\n")
    monkeypatch.setattr(rc, "code_root", lambda: tmp_path)
    imported = {"agentpost/used.py": sha256_file(used)}
    receipt = {
        "chapter": "paired-protocol",
        "schema_version": 4,
        "hashes": {"source_notebook": "?", "code_tree": "old", "data": {}},
        "imported_code": imported,
    }
    assert "imported_code" not in stale_inputs(receipt) and "hashes.code_tree" not in stale_inputs(receipt)
    other.write_text("y = 2\n")  # not imported by the run
    assert rc.changed_code(imported, by_code=False) == []
    used.write_text("x = 2\n")
    assert rc.changed_code(imported, by_code=False) == ["agentpost/used.py"] and "imported_code" in stale_inputs(
        receipt
    )
    used.unlink()
    assert rc.changed_code(imported, by_code=False) == ["agentpost/used.py"]
    escape = {"../outside.py": sha256_file(tmp_path.parent / "outside.py")}
    assert rc.changed_code(escape, by_code=False) == ["../outside.py"]
    older = {k: v for k, v in receipt.items() if k != "imported_code"}  # schema 3: the whole tree decides
    assert "hashes.code_tree" in stale_inputs(older)


def test_the_counted_configuration_is_the_one_with_most_seeds_so_a_stray_run_hides_nothing():
    """16 committed seeds under older code stay the evidence when one seed is run later with newer code; between
    equal seed counts the most recent configuration counts. Invalid runs form no configuration."""
    from pathlib import Path

    from agentpost.evidence.levels import Run, configurations, counted_configuration

    def run(seed, code, end, problems=()):
        receipt = {
            "chapter": "kite",
            "profile": "cpu",
            "kind": "profile",
            "seed": seed,
            "hashes": {"source_notebook": "s", "parameters": "p", "code_tree": code, "data": {}},
            "timing": {"end": end},
        }
        return Run(Path(f"seed-{seed}"), receipt, list(problems))

    committed = [run(s, "old", f"2026-11-0{1 + s % 5}T00:00:00") for s in range(16)]
    stray = [run(99, "new", "2026-12-01T00:00:00")]
    assert counted_configuration(committed + stray) == committed
    assert [len(g) for g in configurations(stray + committed)] == [16, 1]
    older, newer = [run(1, "a", "2026-11-01T00:00:00")], [run(2, "b", "2026-11-02T00:00:00")]
    assert counted_configuration(older + newer) == newer
    assert counted_configuration([run(3, "c", "2026-12-02T00:00:00", problems=["device"])]) == []
