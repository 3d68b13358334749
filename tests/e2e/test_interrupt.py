"""Ctrl-C during a batch (issue 18): scheduling stops at once, the running run's kernel ends, no temporary
folder is left, the finished runs stay intact and valid, and the command exits 130 with one line."""

import os
import signal
import subprocess
import sys
import time

import yaml

from tests.e2e.conftest import DATA, make_project, run_folders

#: The protocol chapter at its smallest: one run takes seconds, not minutes.
QUICK = {"seeds": [1, 2, 3], "parameters": {"train_fraction": 0.05, "n_boot": 50, "lambda_step": 0.25,
                                            "bigram_k_grid": [0.01], "calibration_sets": 20, "calibration_boot": 20}}


def test_ctrl_c_stops_the_batch_and_cleans_up(tmp_path):
    project = make_project(tmp_path)
    (project / "params" / "paired-protocol" / "quick.yaml").write_text(yaml.safe_dump(QUICK))
    env = {**os.environ, "AGENTPOST_ROOT": str(project), "AGENTPOST_DATA": str(DATA)}
    err_path = tmp_path / "stderr.txt"
    with open(err_path, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "agentpost", "run", "paired-protocol", "--profile", "quick"],
                                cwd=project, env=env, stdout=subprocess.PIPE, stderr=err, text=True,
                                start_new_session=True)  # its own process group: the test plays the terminal
        runs = project / "book" / "runs" / "paired-protocol" / "quick"
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not (run_folders(runs) and "paired-protocol/2: cell" in err_path.read_text()):
            assert proc.poll() is None, err_path.read_text()
            time.sleep(0.5)
        assert list(runs.glob(".tmp-seed-2-*")), "the second run should be executing"
        os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group
        out, _ = proc.communicate(timeout=120)
    stderr = err_path.read_text()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "Error" not in stderr, stderr
    said = [line for line in stderr.replace("\r", "\n").splitlines() if line.startswith("agentpost")]
    assert said == ["agentpost: interrupted: 1 of 3 run(s) finished; the others were stopped and their temporary "
                    "folders removed (Ctrl-C)"], stderr
    assert "seed-1-" in out and "seed-2-" not in out  # the summary of what finished
    assert not list((project / "book" / "runs").rglob(".tmp-*")), "no temporary folder may be left"
    finished = run_folders(project)
    assert [f.name.split("-")[1] for f in finished] == ["1"]
    check = subprocess.run([sys.executable, "-m", "agentpost", "validate", str(finished[0])], cwd=project, env=env,
                           capture_output=True, text=True)
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
