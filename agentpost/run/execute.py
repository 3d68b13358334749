"""Execute one run: papermill into a temporary folder, desensitize, receipt, then rename into place."""

from __future__ import annotations

import json
import resource
import shutil
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import nbformat
import papermill
from papermill.exceptions import PapermillExecutionError

from agentpost.catalogue import chapter as get_chapter
from agentpost.evidence import receipt as rc
from agentpost.evidence.desensitize import desensitize_text
from agentpost.evidence.environment import device_info, package_versions
from agentpost.evidence.recording import read_scraps
from agentpost.evidence.hashing import sha256_bytes
from agentpost.project import project_root
from agentpost.run.cache import input_hashes, run_key
from agentpost.run.params import RunSpec

RUNS_DIR = "book/runs"


@dataclass
class RunResult:
    spec: RunSpec
    status: str  # "ok" | "failed" | "cached"
    run_dir: str  # repository-relative
    wall_s: float
    error: str | None = None
    metrics: int = 0


def runs_root() -> Path:
    return project_root() / RUNS_DIR


def run_dir_for(spec: RunSpec, key: str) -> Path:
    return runs_root() / spec.chapter / spec.profile / f"seed-{spec.seed}-{key}"


def sanitize_notebook(nb: dict) -> dict:
    """Desensitize an executed notebook: papermill's path metadata and any machine path in outputs."""
    pm = nb.get("metadata", {}).get("papermill", {})
    for k in ("input_path", "output_path"):
        if pm.get(k):
            pm[k] = Path(pm[k]).name
    return json.loads(desensitize_text(json.dumps(nb)))


def cached_result(spec: RunSpec, key: str | None = None) -> RunResult | None:
    """The successful run with the same key (computed from the inputs when not given), if any."""
    path = run_dir_for(spec, key or run_key(spec))
    receipt_path = path / rc.RECEIPT_NAME
    if receipt_path.is_file():
        receipt = rc.load(receipt_path)
        if receipt.get("status") == "ok":
            return RunResult(spec, "cached", path.relative_to(project_root()).as_posix(), 0.0,
                             metrics=len(receipt.get("metrics", {})))
    return None


def execute(spec: RunSpec, *, force: bool = False) -> RunResult:
    """Run ``spec`` unless a successful run with the same key exists (``force`` re-runs)."""
    hashes = input_hashes(spec)
    key = run_key(spec, hashes)
    final = run_dir_for(spec, key)
    if not force and (hit := cached_result(spec, key)) is not None:
        return hit
    chapter = get_chapter(spec.chapter)
    tmp = final.with_name(f".tmp-{final.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    out_nb = tmp / rc.NOTEBOOK_NAME
    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    error = None
    try:
        papermill.execute_notebook(
            str(chapter.notebook), str(out_nb), parameters=spec.notebook_parameters(), kernel_name="python3",
            cwd=str(chapter.notebook.parent), progress_bar=False, request_save_on_cell_execute=False,
            execution_timeout=spec.timeout_s,
        )
    except PapermillExecutionError as err:
        error = {"cell_index": err.cell_index, "ename": err.ename, "evalue": desensitize_text(str(err.evalue))[:2000]}
    wall = time.perf_counter() - t0
    nb = sanitize_notebook(nbformat.read(out_nb, as_version=4))
    nb_text = nbformat.writes(nbformat.from_dict(nb)) + "\n"
    rc.write_atomic(out_nb, nb_text)
    receipt = rc.seal({
        "schema_version": rc.SCHEMA_VERSION,
        "chapter": spec.chapter,
        "profile": spec.profile,
        "seed": spec.seed,
        "status": "failed" if error else "ok",
        "run_key": key,
        "error": error,
        "parameters": spec.notebook_parameters(),
        "hashes": {**hashes, "output_notebook": sha256_bytes(nb_text.encode())},
        "packages": package_versions(),
        "device": device_info(),
        "timing": {"start": started.isoformat(timespec="seconds"),
                   "end": datetime.now(timezone.utc).isoformat(timespec="seconds"), "wall_s": round(wall, 2)},
        "peak_memory": {"host_rss_bytes": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024},
        "metrics": read_scraps(nb),
    })
    rc.write_atomic(tmp / rc.RECEIPT_NAME, rc.dump(receipt))
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    rel = final.relative_to(project_root()).as_posix()
    message = f"cell {error['cell_index']}: {error['ename']}: {error['evalue'][:200]}" if error else None
    return RunResult(spec, receipt["status"], rel, wall, message, len(receipt["metrics"]))


def clear_interrupted() -> int:
    """Remove temporary run folders an interrupted batch left behind; returns how many."""
    leftovers = list(runs_root().glob("*/*/.tmp-*")) if runs_root().exists() else []
    for path in leftovers:
        shutil.rmtree(path, ignore_errors=True)
    return len(leftovers)
