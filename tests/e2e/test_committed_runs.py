"""Committed GPU-profile runs (everything under book/runs except smoke) must validate."""

import subprocess
import sys

import pytest

from agentpost.project import project_root


def test_committed_runs_validate():
    runs = project_root() / "book" / "runs"
    committed = (
        sorted(p for p in runs.glob("*/*") if p.is_dir() and p.name != "smoke" and not p.parent.name.startswith("."))
        if runs.is_dir()
        else []
    )  # not .slurm-logs/
    if not committed:
        pytest.skip("no GPU-profile runs are committed yet")
    result = subprocess.run(
        [sys.executable, "-m", "agentpost", "validate", *map(str, committed)],
        capture_output=True,
        text=True,
        cwd=project_root(),
    )
    assert result.returncode == 0, result.stdout + result.stderr
