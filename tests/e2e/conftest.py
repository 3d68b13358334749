"""A throwaway copy of the project (notebooks, params, book pages, config) for end-to-end runs.

``AGENTPOST_ROOT`` points the library (and the spawned run processes) at the copy, so runs, receipts, the
ledger and the built book land there and never in the checkout.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentpost.project import project_root

REPO = project_root()
DATA = REPO.parent / "shared" / "data"
TINY = ["-p", "train_fraction=0.05", "-p", "n_boot=200", "-p", "lambda_step=0.25", "-p", "bigram_k_grid=[0.01]"]


def make_project(dest: Path) -> Path:
    for name in ("pyproject.toml", "_config.yml"):
        shutil.copy(REPO / name, dest / name)
    for folder in ("book", "params", "tests"):
        shutil.copytree(REPO / folder, dest / folder, ignore=shutil.ignore_patterns("runs", "generated", "__pycache__"))
    (dest / "notebooks").mkdir()
    shutil.copy(REPO / "notebooks" / "paired-protocol.ipynb", dest / "notebooks")
    return dest


@pytest.fixture(scope="session")
def project(tmp_path_factory):
    return make_project(tmp_path_factory.mktemp("project"))


def agentpost(root: Path, *args: str, data: Path | None = DATA) -> subprocess.CompletedProcess:
    env = {**os.environ, "AGENTPOST_ROOT": str(root)}
    if data is not None:
        env["AGENTPOST_DATA"] = str(data)
    else:
        env.pop("AGENTPOST_DATA", None)
    return subprocess.run([sys.executable, "-m", "agentpost", *args], cwd=root, env=env, capture_output=True, text=True)
