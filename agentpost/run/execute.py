"""Execute one run: papermill into a temporary folder, desensitize, receipt, then rename into place.

The spec arrives with its input hashes and run key (computed once by :func:`agentpost.run.params.plan_runs`);
the worker only adds what the execution produces: the output notebook, its hash, the environment and the metrics.
"""

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
from agentpost.evidence.hashing import sha256_bytes
from agentpost.evidence.recording import read_scraps
from agentpost.project import project_root
from agentpost.run.params import RunSpec


@dataclass
class RunResult:
    spec: RunSpec
    status: str  # "ok" | "failed" | "cached"
    run_dir: str  # repository-relative
    wall_s: float
    error: str | None = None
    metrics: int = 0


def sanitize_notebook(nb: dict) -> dict:
    """Desensitize an executed notebook: papermill's path metadata and any machine path in outputs."""
    pm = nb.get("metadata", {}).get("papermill", {})
    for k in ("input_path", "output_path"):
        if pm.get(k):
            pm[k] = Path(pm[k]).name
    return json.loads(desensitize_text(json.dumps(nb)))


def execute(spec: RunSpec) -> RunResult:
    """Run ``spec`` (the caller decides about the cache) and write its folder with notebook and receipt."""
    if not spec.run_key:
        raise ValueError("execute: the spec has no run key; plan it with agentpost.run.params.plan_runs")
    chapter = get_chapter(spec.chapter)
    final = spec.folder
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
    ended = datetime.now(timezone.utc)
    nb = sanitize_notebook(nbformat.read(out_nb, as_version=4))
    nb_text = nbformat.writes(nbformat.from_dict(nb)) + "\n"
    rc.write_atomic(out_nb, nb_text)
    receipt = rc.build(
        chapter=spec.chapter, profile=spec.profile, kind=spec.kind, seed=spec.seed,
        status="failed" if error else "ok", run_key=spec.run_key, error=error, overrides=spec.overrides,
        parameters=spec.notebook_parameters(),
        hashes={**spec.hashes, "output_notebook": sha256_bytes(nb_text.encode())},
        packages=package_versions(), device=device_info(),
        timing={"start": started.isoformat(timespec="seconds"),
                "end": ended.isoformat(timespec="seconds"), "wall_s": round(wall, 2)},
        peak_memory={"host_rss_bytes": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024},
        metrics=read_scraps(nb),
    )
    rc.write_atomic(tmp / rc.RECEIPT_NAME, rc.dump(receipt))
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    rel = final.relative_to(project_root()).as_posix()
    message = f"cell {error['cell_index']}: {error['ename']}: {error['evalue'][:200]}" if error else None
    return RunResult(spec, receipt.status, rel, wall, message, len(receipt.metrics))


def clear_interrupted() -> int:
    """Remove temporary run folders an interrupted batch left behind; returns how many."""
    root = rc.runs_root()
    leftovers = [p for p in root.rglob(".tmp-*") if p.is_dir()] if root.exists() else []
    for path in leftovers:
        shutil.rmtree(path, ignore_errors=True)
    return len(leftovers)
