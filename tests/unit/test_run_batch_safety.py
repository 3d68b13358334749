"""What keeps one batch from harming another: the runs root's lock, scratch folders reclaimed only when
their process is gone, symbolic links refused, and YAML/seed parsing that reads numbers as numbers."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import threading

import pytest

from agentpost.errors import UsageError


def test_reclaim_removes_only_scratch_of_dead_processes(tmp_path, monkeypatch):
    import tempfile

    from agentpost.run.execute import reclaim_scratch

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    gone = [tmp_path / f"agentpost-run-{dead_pid}-abc", tmp_path / f"agentpost-k{dead_pid}-def"]
    kept = [
        tmp_path / f"agentpost-run-{os.getpid()}-ghi",
        tmp_path / "agentpost-run-xyz",
        tmp_path / "agentpost-kernel-1",
        tmp_path / "other-1-x",
    ]
    for path in gone + kept:
        path.mkdir()
        (path / "file").write_text("x")
    assert reclaim_scratch() == 2
    assert not any(p.exists() for p in gone) and all(p.exists() for p in kept)


def test_a_second_batch_waits_for_the_runs_root_lock(tmp_path, monkeypatch):
    import io

    from agentpost.evidence import receipt as rc
    from agentpost.run.batch import runs_lock

    monkeypatch.setattr(rc, "runs_root", lambda: tmp_path / "runs")
    order, said = [], io.StringIO()
    with runs_lock(said):

        def second():
            with runs_lock(said):
                order.append("second")

        thread = threading.Thread(target=second)
        thread.start()
        thread.join(1.0)
        assert thread.is_alive() and "another batch is running" in said.getvalue()
        order.append("first done")
    thread.join(5.0)
    assert order == ["first done", "second"]


def test_symlinked_run_folders_are_refused_before_any_work(tmp_path, monkeypatch):
    from agentpost.evidence import receipt as rc
    from agentpost.evidence.validate import check_run
    from agentpost.run.batch import refuse_links
    from agentpost.run.params import RunSpec

    root = tmp_path / "book" / "runs"
    monkeypatch.setattr(rc, "runs_root", lambda: root)
    spec = RunSpec("kite", "smoke", 1, {}, run_key="k")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / rc.RECEIPT_NAME).write_text("{}")
    (elsewhere / rc.NOTEBOOK_NAME).write_text("{}")
    spec.folder.parent.mkdir(parents=True)
    spec.folder.symlink_to(elsewhere)
    with pytest.raises(UsageError, match=r"runs/kite/smoke/seed-1-k is a symbolic link"):
        refuse_links([spec])
    assert rc.run_dirs(root) == [spec.folder]  # listed, so validate names it rather than skipping it
    report = check_run(spec.folder)
    assert report.malformed and "symbolic links" in report.problems[0].message


@pytest.mark.parametrize(
    "text, value",
    [
        ("1e-1", 0.1),
        ("-2.5E3", -2500.0),
        ("0x10", 16),
        ("4_3", "4_3"),
        ("yes", "yes"),
        ("1:20", "1:20"),
        ("true", True),
        ("[1, .5]", [1, 0.5]),
    ],
)
def test_yaml_values_are_read_as_yaml_1_2(text, value):
    from agentpost.catalogue.params import parse_overrides

    assert parse_overrides([f"x={text}"]) == {"x": value}


def test_non_finite_values_need_a_declared_infinite_bound():
    from agentpost.catalogue.params import Declared, non_finite_problem

    assert "NaN" in non_finite_problem(math.nan, Declared(0, math.inf))
    assert "refused" in non_finite_problem([1.0, math.inf], Declared(0, None))
    assert non_finite_problem(math.inf, Declared(0, math.inf)) is None
    assert non_finite_problem({"a": 1.0}, None) is None


def test_seed_messages_are_short_and_name_the_culprit():
    from agentpost.catalogue.params import parse_seeds

    with pytest.raises(UsageError) as err:
        parse_seeds(",".join(map(str, [*range(10_000), 77])), None, "--seeds")
    assert "duplicate seeds [77]" in str(err.value) and len(str(err.value)) < 200
    for bad in ("٤٣", "4_3", "+44", " 1e3"):
        with pytest.raises(UsageError, match="seeds must be integers"):
            parse_seeds(bad, None, "--seeds")


def test_a_run_lost_before_it_made_a_folder_is_failed_not_an_invalid_folder():
    """A run whose process died before writing anything has no folder: the summary shows "-", and the closing list
    of invalid runs does not validate the checkout's root in its place."""
    from agentpost.cli import _invalid_runs
    from agentpost.run.backends import _lost
    from agentpost.run.batch import summary_table
    from agentpost.run.params import RunSpec

    lost = _lost(RunSpec("kite", "smoke", 42, {}), "worker died")
    assert lost.status == "failed" and lost.run_dir == ""
    assert _invalid_runs([lost]) == []
    row, failed = summary_table([lost]).splitlines()[2:]
    assert row.split()[-1] == "-" and failed == "FAILED kite seed 42: worker died"


def test_a_stray_receipt_is_listed_where_it_lies_and_hides_no_run(tmp_path):
    from agentpost.evidence import receipt as rc

    root = tmp_path / "runs"
    runs = [root / "kite" / "cpu" / f"seed-{s}-k" for s in (1, 2)]
    for folder in (root, root / "kite", *runs):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / rc.RECEIPT_NAME).write_text("{}")
    assert rc.run_dirs(root) == sorted([root, root / "kite", *runs])  # the strays are listed, the runs too
    assert rc.run_dirs(runs[0]) == [runs[0]]  # a run folder named alone is that run
