"""Ctrl-C during a batch: scheduling stops at once, the running run's kernel ends, no temporary
folder is left (neither the run's scratch folder nor a ``.tmp-`` one under the runs root), the finished runs stay
intact and valid, and the command exits 130 with one line."""

import os
import signal
import subprocess
import sys
import time

import pytest
import yaml

from tests.e2e.conftest import DATA, make_project, run_folders

#: The protocol chapter at its smallest: one run takes seconds, not minutes.
QUICK = {
    "seeds": [1, 2, 3],
    "parameters": {
        "train_fraction": 0.05,
        "n_boot": 50,
        "lambda_step": 0.25,
        "bigram_k_grid": [0.01],
        "calibration_sets": 20,
        "calibration_boot": 20,
    },
}


def _default_sigint() -> None:
    """A terminal's foreground command gets Ctrl-C; a test run from a background job inherits SIGINT ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_the_batch_and_cleans_up(tmp_path):
    project = make_project(tmp_path)
    (project / "params" / "paired-protocol" / "quick.yaml").write_text(yaml.safe_dump(QUICK))
    scratch = tmp_path / "scratch"  # where runs execute before they are committed (agentpost.run.execute.produce)
    scratch.mkdir()
    env = {**os.environ, "AGENTPOST_ROOT": str(project), "AGENTPOST_DATA": str(DATA), "TMPDIR": str(scratch)}
    err_path = tmp_path / "stderr.txt"
    with open(err_path, "w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "agentpost", "run", "paired-protocol", "--profile", "quick"],
            cwd=project,
            env=env,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            start_new_session=True,  # its own process group: the test plays the terminal
            preexec_fn=_default_sigint,
        )
        runs = project / "book" / "runs" / "paired-protocol" / "quick"
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not (
            run_folders(runs) and "paired-protocol/2: cell" in err_path.read_text()
        ):
            assert proc.poll() is None, err_path.read_text()[-2000:] + proc.stdout.read()
            time.sleep(0.5)
        assert list(scratch.glob("agentpost-run-*")), "the second run should be executing"
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group
        out, _ = proc.communicate(timeout=120)
    stderr = err_path.read_text()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "Error" not in stderr, stderr
    said = [line for line in stderr.replace("\r", "\n").splitlines() if line.startswith("agentpost")]
    assert said == [
        "agentpost: interrupted: 1 of 3 run(s) finished; the others were stopped and their temporary "
        "folders removed (Ctrl-C)"
    ], stderr
    assert "seed-1-" in out and "seed-2-" not in out  # the summary of what finished
    assert not list((project / "book" / "runs").rglob(".tmp-*")), "no temporary folder may be left"
    assert not list(scratch.iterdir()), "no scratch folder (run or kernel sockets) may be left"
    finished = run_folders(project)
    assert [f.name.split("-")[1] for f in finished] == ["1"]
    check = subprocess.run(
        [sys.executable, "-m", "agentpost", "validate", str(finished[0])],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0, check.stdout + check.stderr


def test_a_run_that_breaks_outside_its_notebook_is_a_failed_result_not_a_traceback():
    """The local backend reports an exception raised outside papermill (here: a spec that was never planned) as
    that run's failure and goes on; the command line prints it in the summary instead of a traceback."""
    from agentpost.run.backends import LocalBackend
    from agentpost.run.params import RunSpec

    unplanned = RunSpec("paired-protocol", "smoke", 7, parameters={})
    results = list(LocalBackend().submit([unplanned], jobs=1))
    assert [r.status for r in results] == ["failed"]
    assert results[0].error.startswith("ValueError: execute: the spec has no run key")


def _start(project, scratch, err_path, *args):
    env = {**os.environ, "AGENTPOST_ROOT": str(project), "AGENTPOST_DATA": str(DATA), "TMPDIR": str(scratch)}
    return subprocess.Popen(
        [sys.executable, "-m", "agentpost", "run", "paired-protocol", "--profile", "quick", *args],
        cwd=project,
        env=env,
        stdout=subprocess.PIPE,
        stderr=open(err_path, "w"),
        text=True,
        start_new_session=True,
    )


def _quick_project(tmp_path):
    project = make_project(tmp_path)
    (project / "params" / "paired-protocol" / "quick.yaml").write_text(yaml.safe_dump(QUICK))
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    return project, scratch


def test_sigterm_to_the_batch_stops_it_like_ctrl_c(tmp_path):
    """`kill PID` (SIGTERM to the batch process alone, as a scheduler or systemd sends it): the running run is
    stopped, its folders removed, the summary printed, exit 143; no run is committed afterwards."""
    project, scratch = _quick_project(tmp_path)
    err_path = tmp_path / "stderr.txt"
    proc = _start(project, scratch, err_path)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and "paired-protocol/1: cell" not in err_path.read_text():
        assert proc.poll() is None, err_path.read_text()
        time.sleep(0.5)
    os.kill(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    stderr = err_path.read_text()
    assert proc.returncode == 143, stderr
    assert "Traceback" not in stderr and "(SIGTERM)" in stderr, stderr
    time.sleep(3)  # a child that outlived its parent would commit now
    assert not run_folders(project) and not list((project / "book" / "runs").rglob(".tmp-*"))
    assert not list(scratch.iterdir()), "no scratch folder (run or kernel sockets) may be left"


def test_two_identical_batches_compute_each_run_once(tmp_path):
    """A second batch on the same runs root waits for the first (one line says so), then reuses its runs; the
    first batch's temporary folders are never touched."""
    project, scratch = _quick_project(tmp_path)
    first_err, second_err = tmp_path / "first.txt", tmp_path / "second.txt"
    first = _start(project, scratch, first_err, "--seeds", "1")
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and "paired-protocol/1: cell" not in first_err.read_text():
        assert first.poll() is None, first_err.read_text()
        time.sleep(0.5)
    second = _start(project, scratch, second_err, "--seeds", "1")
    out1, _ = first.communicate(timeout=600)
    out2, _ = second.communicate(timeout=600)
    assert first.returncode == 0 and second.returncode == 0, first_err.read_text() + second_err.read_text()
    assert "another batch is running" in second_err.read_text()
    assert " ok " in out1 and " cached " in out2, out1 + out2
    assert len(run_folders(project)) == 1


def _wait_for_a_cell(proc, err_path, cell: int = 3) -> None:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and f"paired-protocol/1: cell {cell}/" not in err_path.read_text():
        assert proc.poll() is None, err_path.read_text()
        time.sleep(0.2)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_to_the_whole_group_stops_the_batch_without_a_traceback(tmp_path, signum):
    """Issue 47: SIGTERM or SIGHUP to the batch's process group (a closed terminal, `kill -- -PGID`) reaches the
    kernels and multiprocessing's resource tracker too; before, they printed a ZMQError traceback (the kernel asked
    to shut down gracefully mid-cell), asyncio's "Task exception was never retrieved ... DeadKernelError" and three
    resource_tracker KeyError tracebacks."""
    project, scratch = _quick_project(tmp_path)
    err_path = tmp_path / "stderr.txt"
    proc = _start(project, scratch, err_path)
    _wait_for_a_cell(proc, err_path)
    os.killpg(proc.pid, signum)
    proc.communicate(timeout=120)
    stderr = err_path.read_text()
    assert proc.returncode == 128 + signum, stderr
    for noise in ("Traceback", "Task exception", "resource_tracker", "Error"):
        assert noise not in stderr, stderr
    time.sleep(2)
    assert not list(scratch.iterdir()), "no scratch folder, socket or connection file may be left"


def test_kill_9_of_the_group_leaves_only_scratch_folders_the_next_batch_reclaims(tmp_path):
    """The kernels' connection files live in the run's scratch folder (never ``$TMPDIR/tmp*.json``), so what a
    kill -9 leaves is removed by the next batch's reclaim."""
    project, scratch = _quick_project(tmp_path)
    err_path = tmp_path / "stderr.txt"
    proc = _start(project, scratch, err_path)
    _wait_for_a_cell(proc, err_path)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    time.sleep(3)  # the kernel notices its parent is gone
    left = sorted(p.name for p in scratch.iterdir())
    assert left and all(name.startswith("agentpost-") for name in left), left
    reclaimed = subprocess.run(
        [sys.executable, "-c", "from agentpost.run.execute import reclaim_scratch; print(reclaim_scratch())"],
        env={**os.environ, "TMPDIR": str(scratch)},
        capture_output=True,
        text=True,
    )
    assert reclaimed.stdout.strip() == str(len(left)), reclaimed.stderr
    assert not list(scratch.iterdir())
