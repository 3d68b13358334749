"""Execute one run: papermill into a temporary folder, desensitize, receipt, then rename into place.

The spec arrives with its input hashes and run key (computed once by :func:`agentpost.run.params.plan_runs`);
the worker only adds what the execution produces: the output notebook, its hash, the environment and the metrics.

:func:`execute_papermill` is the one call into papermill (runs and ``agentpost refresh``): its kernel talks over
IPC sockets rather than unencrypted local TCP (ipykernel warns about the latter on every start), and it reports
each executed cell to an optional callback.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from typing import Callable

import nbformat
import papermill
from papermill.engines import NBClientEngine, papermill_engines
from papermill.exceptions import PapermillExecutionError
from traitlets.config import Config

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


#: ``on_cell(cells_done, cells_total)``, called after each cell papermill executes.
CellCallback = Callable[[int, int], None]


class CellReportingEngine(NBClientEngine):
    """papermill's nbclient engine, calling ``on_cell`` after each cell (papermill's ``cell_complete`` hook)."""

    @classmethod
    def execute_managed_notebook(cls, nb_man, kernel_name, on_cell: CellCallback | None = None, **kwargs):
        if on_cell is not None:
            complete = nb_man.cell_complete

            def cell_complete(cell, cell_index=None, **kw):
                complete(cell, cell_index=cell_index, **kw)
                on_cell(cell_index + 1, len(nb_man.nb.cells))

            nb_man.cell_complete = cell_complete
        return super().execute_managed_notebook(nb_man, kernel_name, **kwargs)


papermill_engines.register("agentpost", CellReportingEngine)


def execute_papermill(source: Path, output: Path, *, parameters: dict | None = None, timeout_s: int | None = None,
                      progress_bar: bool = False, on_cell: CellCallback | None = None) -> None:
    """Execute ``source`` into ``output`` with papermill in the notebook's folder; raises papermill's errors.

    The kernel's sockets are files in a private temporary folder (one per execution, so concurrent runs never
    share a socket path; removed afterwards even when the kernel was killed)."""
    with tempfile.TemporaryDirectory(prefix="agentpost-kernel-") as sockets:
        transport = Config({"KernelManager": {"transport": "ipc", "ip": os.path.join(sockets, "kernel")}})
        papermill.execute_notebook(
            str(source), str(output), parameters=parameters, kernel_name="python3", cwd=str(source.parent),
            progress_bar=progress_bar, request_save_on_cell_execute=False, execution_timeout=timeout_s,
            engine_name="agentpost", on_cell=on_cell, config=transport,
        )


def execute(spec: RunSpec, progress: CellCallback | None = None) -> RunResult:
    """Run ``spec`` (the caller decides about the cache) and write its folder with notebook and receipt.

    On ``KeyboardInterrupt`` (the backend's stop) the temporary folder is removed before re-raising."""
    if not spec.run_key:
        raise ValueError("execute: the spec has no run key; plan it with agentpost.run.params.plan_runs")
    chapter = get_chapter(spec.chapter)
    final = spec.folder
    tmp = final.with_name(f".tmp-{final.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        return _execute_into(spec, chapter, tmp, final, progress)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _execute_into(spec: RunSpec, chapter, tmp: Path, final: Path, progress: CellCallback | None) -> RunResult:
    out_nb = tmp / rc.NOTEBOOK_NAME
    started = datetime.now(timezone.utc)
    t0 = time.perf_counter()
    error = None
    try:
        execute_papermill(chapter.notebook, out_nb, parameters=spec.notebook_parameters(), timeout_s=spec.timeout_s,
                          on_cell=progress)
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


def clear_interrupted(specs: list[RunSpec] | None = None) -> int:
    """Remove temporary run folders an interrupted batch left behind (only those of ``specs`` when given);
    returns how many."""
    root = rc.runs_root()
    if specs is not None:
        leftovers = [s.folder.with_name(f".tmp-{s.folder.name}") for s in specs]
    else:
        leftovers = [p for p in root.rglob(".tmp-*")] if root.exists() else []
    leftovers = [p for p in leftovers if p.is_dir()]
    for path in leftovers:
        shutil.rmtree(path, ignore_errors=True)
    return len(leftovers)
