"""A throwaway copy of the project (notebooks, params, book pages, config) for end-to-end runs.

``AGENTPOST_ROOT`` points the library (and the spawned run processes) at the copy, so runs, receipts, the
ledger and the built book land there and never in the checkout.
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from agentpost.evidence import run_store
from agentpost.evidence.receipt import seal
from agentpost.project import project_root

REPO = project_root()
DATA = REPO.parent / "shared" / "data"
TINY = ["-p", "train_fraction=0.05", "-p", "n_boot=200", "-p", "lambda_step=0.25", "-p", "bigram_k_grid=[0.01]"]
#: The same tiny size as a profile of the throwaway project, so its runs are profile runs (not ad-hoc).
TINY_PROFILE = {
    "description": "e2e tests: the protocol chapter at a tiny size",
    "seeds": [42, 43, 44],
    "parameters": {"train_fraction": 0.05, "n_boot": 200, "lambda_step": 0.25, "bigram_k_grid": [0.01]},
}


def make_project(dest: Path) -> Path:
    for name in ("pyproject.toml", "_config.yml"):
        shutil.copy(REPO / name, dest / name)
    for folder in ("book", "params", "tests"):
        shutil.copytree(REPO / folder, dest / folder, ignore=shutil.ignore_patterns("runs", "generated", "__pycache__"))
    (dest / "notebooks").mkdir()
    shutil.copy(REPO / "notebooks" / "paired-protocol.ipynb", dest / "notebooks")
    (dest / "params" / "paired-protocol" / "tiny.yaml").write_text(yaml.safe_dump(TINY_PROFILE))
    return dest


@pytest.fixture(scope="session")
def project(tmp_path_factory):
    return make_project(tmp_path_factory.mktemp("project"))


@pytest.fixture(scope="session")
def tiny_runs(project):
    """Seeds 42, 43, 44 of the tiny profile, run once per session (two at a time); returns (project, result).

    A leftover of an interrupted batch is planted first: the batch must clear it."""
    (project / "book" / "runs" / "paired-protocol" / "tiny" / ".tmp-seed-1-interrupted").mkdir(parents=True)
    return project, agentpost(project, "run", "paired-protocol", "--profile", "tiny", "--jobs", "2")


def run_folders(root: Path) -> list[Path]:
    """Every finished run folder of a project (or under a folder of its runs), profile and ad-hoc runs alike."""
    runs = root / "book" / "runs" if (root / "book").is_dir() else root
    return sorted(p.parent for p in runs.rglob("receipt.json")) if runs.exists() else []


def agentpost(root: Path, *args: str, data: Path | None = DATA) -> subprocess.CompletedProcess:
    env = {**os.environ, "AGENTPOST_ROOT": str(root)}
    if data is not None:
        env["AGENTPOST_DATA"] = str(data)
    else:
        env.pop("AGENTPOST_DATA", None)
    return subprocess.run([sys.executable, "-m", "agentpost", *args], cwd=root, env=env, capture_output=True, text=True)


def load_run(run: Path) -> tuple[dict, dict]:
    """A run's receipt and its notebook as stored (schema 5: gzipped; outcomes as references to outcomes.parquet)."""
    text = run_store.read_notebook_text(run_store.notebook_path(run))
    return json.loads((run / "receipt.json").read_text()), json.loads(text)


def reseal_run(run: Path, receipt: dict, nb: dict | None = None) -> None:
    """Write an edited run back as a forger would: notebook as nbformat writes it (in the form the run stores it),
    its hash, then the seal."""
    if nb is not None:
        text = json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
        path = run_store.notebook_path(run)
        path.write_bytes(run_store.stored_notebook_bytes(text) if path.name.endswith(".gz") else text.encode())
        receipt["hashes"]["output_notebook"] = hashlib.sha256(text.encode()).hexdigest()
    (run / "receipt.json").write_text(json.dumps(seal(receipt), indent=2, sort_keys=True))
