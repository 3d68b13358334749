"""agentpost validate keeps what it found in the project's cache, keyed by everything it depends on: reading unchanged
runs again is fast, and no edit of a run (or of the rules) is ever hidden by an earlier answer."""

import json
import shutil

from agentpost.evidence import receipt as rc
from agentpost.evidence import validate
from agentpost.evidence.run_store import OUTCOMES_NAME


def _a_committed_run():
    return next(d for d in rc.run_dirs() if (d / OUTCOMES_NAME).is_file())


def test_a_cached_answer_is_reused_and_an_edit_is_never_hidden_by_it(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTPOST_CACHE", str(tmp_path / "cache"))
    run = _a_committed_run()
    first = validate.check_run(run)
    assert not first.problems and len(list((tmp_path / "cache" / "validated").glob("*.json"))) == 1
    monkeypatch.setattr(validate, "_check_run", lambda run_dir: (_ for _ in ()).throw(AssertionError("re-checked")))
    again = validate.check_run(run)  # from the cache: the notebook is not parsed again
    assert again.problems == [] and again.receipt == first.receipt and again.stale == first.stale
    assert validate.check_run(run, outcomes=False).receipt["metrics"] != first.receipt["metrics"]  # references
    monkeypatch.undo()
    monkeypatch.setenv("AGENTPOST_CACHE", str(tmp_path / "cache"))

    copy = tmp_path / "runs" / run.relative_to(rc.runs_root())
    shutil.copytree(run, copy)
    receipt = json.loads((copy / rc.RECEIPT_NAME).read_text())
    receipt["timing"]["wall_s"] += 1.0
    (copy / rc.RECEIPT_NAME).write_text(json.dumps(receipt))
    monkeypatch.setattr(rc, "runs_root", lambda: tmp_path / "runs")
    edited = validate.check_run(copy)
    assert "receipt_sha256" in {p.field for p in edited.problems}
    (copy / OUTCOMES_NAME).write_bytes(b"not parquet")
    assert OUTCOMES_NAME in {p.field for p in validate.check_run(copy).problems}
