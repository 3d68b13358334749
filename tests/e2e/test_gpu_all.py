"""The GPU entry point rehearsed on the CPU: `benchmarks/gpu_all.sh --dry-run-cpu` in a throwaway project runs the
kernel tests in the Triton interpreter, a kernel benchmark at tiny sizes and the paired-protocol `a100` profile at
tiny sizes on the CPU (ad-hoc runs: the sizes are overrides), then validates and packs the runs. `agentpost validate`
reads the runs and finds them sound, and the GPU-evidence rules refuse them for the reasons a CPU cannot fake, so
the GPU path cannot rot unseen."""

import json
import os
import shutil
import subprocess
import sys
import tarfile

import pytest

from tests.e2e.conftest import REPO, agentpost, make_project, run_folders

pytestmark = pytest.mark.slow  # about a minute on 2 cores

ITEMS = ["kernel-tests", "bench-deltas-kernel", "profile-paired-protocol", "profile-kite"]


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    project = make_project(tmp_path_factory.mktemp("gpu-all"))
    shutil.copytree(
        REPO / "benchmarks", project / "benchmarks", ignore=shutil.ignore_patterns("receipts", "__pycache__")
    )
    out = project / "out"
    env = {
        **os.environ,
        "AGENTPOST_ROOT": str(project),
        "PYTHON": sys.executable,
        "AGENTPOST_DATA": str(REPO.parent / "shared" / "data"),
        "OUT": str(out),
    }
    env.pop("AGENTPOST_TRITON_GPU", None)
    # a rehearsal applies no budget (agentpost/run/gpu_plan.py): on a busy CPU it takes longer, never fails for it; the
    # timeout only ends a hang
    proc = subprocess.run(
        ["bash", str(project / "benchmarks" / "gpu_all.sh"), "--dry-run-cpu", "--only", *ITEMS],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    return project, out, proc


def test_dry_run_runs_every_item_it_has_sizes_for(rehearsal):
    project, out, proc = rehearsal
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    summary = json.loads((out / "gpu_all.json").read_text())
    assert summary["mode"].startswith("CPU dry run")
    status = {i["name"]: (i["status"], i["note"]) for i in summary["items"]}
    assert status == {
        "kernel-tests": ("done", ""),
        "bench-deltas-kernel": ("done", ""),
        "profile-paired-protocol": ("done", ""),
        "profile-kite": ("skipped", "no CPU dry-run sizes in gpu_predictions.yaml"),
    }
    assert "passed" in (out / "kernel-tests.log").read_text()
    receipt = json.loads((out / "deltas_kernel_cpu.json").read_text())
    assert receipt and (out / "gpu_all.txt").read_text().splitlines()[1].split()[:4] == [
        "item",
        "kind",
        "predicted",
        "min",
    ]


def test_dry_run_receipts_validate_as_runs_but_not_as_gpu_evidence(rehearsal):
    project, out, _ = rehearsal
    runs = run_folders(project / "book" / "runs" / "paired-protocol" / "a100")
    assert len(runs) == 1 and json.loads((runs[0] / "receipt.json").read_text())["device"]["kind"] == "cpu"
    report = agentpost(project, "validate", str(project / "book" / "runs" / "paired-protocol" / "a100"))
    assert report.returncode == 0 and "1 run(s) checked, 0 problem(s)" in report.stdout, report.stdout + report.stderr
    assert "counts as GPU evidence" not in report.stdout
    log = (out / "validate.log").read_text()
    assert "1 run(s) checked, 0 problem(s)" in log
    line = next(x for x in log.splitlines() if x.startswith("GPU evidence paired-protocol/a100 (ad-hoc): "))
    for reason in (
        "did not run on an allowed CUDA device",
        "record no CUDA build of torch",
        "recorded no CUDA event timing",
        "ad-hoc runs",
        "1 successful seeds",
    ):
        assert reason in line, line
    with tarfile.open(out / "a100-runs.tar.gz.part0") as tar:
        names = tar.getnames()
    assert any(n.endswith("receipt.json") and n.startswith("book/runs/paired-protocol/a100/") for n in names)
