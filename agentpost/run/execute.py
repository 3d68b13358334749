"""Execute one run: papermill into a scratch folder, desensitize, receipt (:func:`produce`); then write both files
into a temporary folder under the runs root and rename it into place (:func:`commit`).

The spec arrives with its input hashes and run key (computed once by :func:`agentpost.run.params.plan_runs`);
the worker only adds what the execution produces: the output notebook, its hash, the environment and the metrics.
Producing and committing are apart so that a backend whose workers do not share the runs root (Ray, Slurm) ships
the produced run back and the driver commits it: the same bytes, through the same rename, whatever the backend
(the local backend produces and commits in each run's own process).

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
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import nbformat
import papermill
from papermill.clientwrap import PapermillNotebookClient
from papermill.engines import NBClientEngine, papermill_engines
from papermill.log import logger
from papermill.exceptions import PapermillExecutionError
from traitlets.config import Config

from agentpost.catalogue import chapter as get_chapter
from agentpost.errors import UsageError
from agentpost.evidence import receipt as rc
from agentpost.evidence.desensitize import desensitize_text
from agentpost.record.environment import device_info, package_versions
from agentpost.evidence import run_store
from agentpost.record.hashing import notebook_code_hash, sha256_bytes
from agentpost.record.recording import read_scraps
from agentpost.project import project_root
from agentpost.run.params import RunSpec


@dataclass
class RunResult:
    spec: RunSpec
    status: str  # "ok" | "failed" | "cached"
    run_dir: str  # repository-relative; "" when the run produced no folder
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


#: Scratch folders in $TMPDIR: ``<prefix><pid of the process that made it>-<random>`` (see :func:`reclaim_scratch`).
SCRATCH_PREFIXES = ("agentpost-run-", "agentpost-k")  # short: a kernel socket path has at most 107 bytes


#: The longest path a Unix socket may have (``sun_path`` holds 108 bytes with the terminating NUL).
SOCKET_PATH_MAX = 107


def _socket_suffix() -> int:
    """What :func:`kernel_config` adds to $TMPDIR at most: ``/<prefix><pid>-<8 random>/kernel-<port>``, a pid of at
    most the system's pid_max digits and a port of one digit (a fresh folder's five sockets are numbered 1..5)."""
    try:
        pid_digits = len(str(int(Path("/proc/sys/kernel/pid_max").read_text()) - 1))
    except (OSError, ValueError):
        pid_digits = 7  # Linux's largest pid_max, 4194304
    return len(f"/{SCRATCH_PREFIXES[1]}") + pid_digits + len("-xxxxxxxx/kernel-1")


def check_scratch() -> None:
    """$TMPDIR can hold a run's scratch and its kernel's sockets, checked before any run starts: a path too long
    for a Unix socket would fail in the kernel's start-up (ZMQError: File name too long)."""
    tmp = tempfile.gettempdir()
    suffix = _socket_suffix()
    longest = len(os.fsencode(tmp)) + suffix
    if longest > SOCKET_PATH_MAX:
        raise UsageError(
            f"TMPDIR={tmp} is too long for a kernel's sockets ({longest} bytes of a socket path, at most "
            f"{SOCKET_PATH_MAX}): set TMPDIR to a folder with a path of at most {SOCKET_PATH_MAX - suffix} bytes"
        )
    if not os.access(tmp, os.W_OK | os.X_OK):
        raise UsageError(f"TMPDIR={tmp} is not a writable folder")


def kernel_config(sockets: str) -> Config:
    """The kernel's transport: its sockets and its connection file inside ``sockets``, this run's scratch folder,
    so nothing of a kernel stays in $TMPDIR once the folder is removed (by :func:`reclaim_scratch` after a kill
    -9). The kernel is ended at once when the run ends or is stopped: a graceful shutdown request sent while a
    cell still runs (a stopped batch) made the kernel print a ZMQError traceback as its sockets closed."""
    return Config(
        {
            "KernelManager": {
                "transport": "ipc",
                "ip": os.path.join(sockets, "kernel"),
                "connection_file": os.path.join(sockets, "kernel.json"),
            },
            "NotebookClient": {"shutdown_kernel": "immediate"},
        }
    )


def reclaim_scratch() -> int:
    """Remove the scratch folders in $TMPDIR of this user whose process is gone (a kill -9, a lost terminal);
    returns how many."""
    removed = 0
    for prefix in SCRATCH_PREFIXES:
        for path in Path(tempfile.gettempdir()).glob(f"{prefix}*-*"):
            pid = path.name[len(prefix) :].split("-")[0]
            try:
                if not pid.isdigit() or path.is_symlink() or path.stat().st_uid != os.getuid():
                    continue
                os.kill(int(pid), 0)
            except ProcessLookupError:  # its process is gone
                shutil.rmtree(path, ignore_errors=True)
                removed += 1
            except OSError:  # alive under another user, or unreadable: not ours to judge
                continue
    return removed


#: ``on_cell(cells_done, cells_total)``, called after each cell papermill executes.
CellCallback = Callable[[int, int], None]


#: Notebook metadata key under which the engine leaves the probe's answer (removed again by execute_papermill).
IMPORTED_CODE_KEY = "agentpost_imported_code"

#: Run in the kernel after the last cell, never shown: the files of the agentpost package (its kernels included)
#: that the run imported, by their code hash (agentpost.record.hashing.code_hash) of the text the kernel found,
#: and the code root it found them under. The list is taken before the probe imports the hashing module.
IMPORTED_CODE_PROBE = """\
import json as _j, pathlib as _p, sys as _s
import agentpost as _a
_root = _p.Path(_a.__file__).resolve().parent.parent
_paths = {}
for _m in list(_s.modules.values()):
    _f = getattr(_m, "__file__", None)
    _r = _p.Path(_f).resolve() if isinstance(_f, str) else None
    if _r is not None and _r.suffix == ".py" and _r.is_relative_to(_root) and _r.relative_to(_root).parts[0] in ("agentpost", "kernels"):
        _paths[_r.relative_to(_root).as_posix()] = _r
from agentpost.record.hashing import code_hash as _code_hash
print(_j.dumps({"root": str(_root), "files": {_k: _code_hash(_v.read_text(encoding="utf-8")) for _k, _v in _paths.items()}}))
"""


class ProbingClient(PapermillNotebookClient):
    """papermill's client, asking the kernel after the last cell which project files it imported."""

    def papermill_execute_cells(self):
        super().papermill_execute_cells()
        probe = nbformat.v4.new_code_cell(IMPORTED_CODE_PROBE)
        self.nb.cells.append(probe)  # nbclient stores the executed cell at its index; removed right after
        try:
            self.execute_cell(probe, len(self.nb.cells) - 1, store_history=False)
            text = "".join(o.get("text", "") for o in probe.outputs if o.get("name") == "stdout")
            self.nb.metadata[IMPORTED_CODE_KEY] = json.loads(text)
        except Exception as err:  # noqa: BLE001 - a dead kernel or an unreadable answer: the receipt says unknown
            self.log.warning("agentpost: the imported-code probe failed: %s", err)
        finally:
            self.nb.cells.pop()


class CellReportingEngine(NBClientEngine):
    """papermill's nbclient engine, calling ``on_cell`` after each cell (papermill's ``cell_complete`` hook) and
    probing the imported code after the last (:class:`ProbingClient`)."""

    @classmethod
    def execute_managed_notebook(
        cls,
        nb_man,
        kernel_name,
        log_output=False,
        stdout_file=None,
        stderr_file=None,
        start_timeout=60,
        execution_timeout=None,
        on_cell: CellCallback | None = None,
        **kwargs,
    ):
        if on_cell is not None:
            complete = nb_man.cell_complete

            def cell_complete(cell, cell_index=None, **kw):
                complete(cell, cell_index=cell_index, **kw)
                on_cell(cell_index + 1, len(nb_man.nb.cells))

            nb_man.cell_complete = cell_complete
        # papermill's own NBClientEngine.execute_managed_notebook does the same with its PapermillNotebookClient
        timeout = execution_timeout or kwargs.get("timeout")
        kwargs = {k: v for k, v in kwargs.items() if k not in ("input_path", "timeout", "startup_timeout")}
        return ProbingClient(
            nb_man,
            timeout=timeout,
            startup_timeout=start_timeout,
            kernel_name=kernel_name,
            log=logger,
            log_output=log_output,
            stdout_file=stdout_file,
            stderr_file=stderr_file,
            **kwargs,
        ).execute()


papermill_engines.register("agentpost", CellReportingEngine)


class ForeignCode(RuntimeError):
    """The run's kernel imported agentpost from another folder than the code this process hashes."""


def execute_papermill(
    source: Path,
    output: Path,
    *,
    parameters: dict | None = None,
    timeout_s: int | None = None,
    progress_bar: bool = False,
    on_cell: CellCallback | None = None,
) -> dict[str, str]:
    """Execute ``source`` into ``output`` with papermill in the notebook's folder; raises papermill's errors.

    Returns ``{path relative to the code root: code hash}`` of the project files the kernel imported (empty when the
    probe could not tell, e.g. the kernel died); raises :class:`ForeignCode` when the kernel's agentpost is not the
    one under :func:`agentpost.evidence.receipt.code_root` (the code hash would describe other code).

    The kernel's sockets are files in a private temporary folder (one per execution, so concurrent runs never
    share a socket path; removed afterwards even when the kernel was killed). The widgets' state (the "Turn it by
    hand" controls of :mod:`agentpost.book.walkthrough`) is not stored: it serves a live front end only, and each
    such cell's output already carries its static view."""
    with tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIXES[1]}{os.getpid()}-") as sockets:
        transport = kernel_config(sockets)
        try:
            papermill.execute_notebook(
                str(source),
                str(output),
                parameters=parameters,
                kernel_name="python3",
                cwd=str(source.parent),
                progress_bar=progress_bar,
                request_save_on_cell_execute=False,
                execution_timeout=timeout_s,
                engine_name="agentpost",
                on_cell=on_cell,
                config=transport,
                store_widget_state=False,
            )
        finally:
            probe = _pop_imported_code(output)
    if probe and Path(probe.get("root", "")) != rc.code_root():
        raise ForeignCode(
            f"the run's kernel imported agentpost from {probe.get('root')!r}, not from "
            f"{str(rc.code_root())!r} whose code this run records; run with one environment"
        )
    return dict(probe.get("files", {})) if probe else {}


def _pop_imported_code(output: Path) -> dict | None:
    """The probe's answer, removed from the executed notebook's metadata (it is the receipt's, not the page's)."""
    if not output.is_file():
        return None
    nb = nbformat.read(output, as_version=4)
    probe = nb.metadata.pop(IMPORTED_CODE_KEY, None)
    if probe is not None:
        nbformat.write(nb, output)
    return probe if isinstance(probe, dict) else None


@dataclass
class RunOutput:
    """What executing a run produces, before anything is written under the runs root: the executed notebook's
    text and the sealed receipt's. Small and picklable, so a Ray task or a Slurm job returns it to the driver."""

    spec: RunSpec
    notebook_text: str  # the executed notebook in stored form (agentpost.evidence.run_store.compact)
    receipt_text: str
    wall_s: float
    error: str | None = None
    outcomes: bytes | None = None  # outcomes.parquet (None: no per-item outcomes recorded)


class InputsDiffer(RuntimeError):
    """A remote worker's checkout is not the one the run was planned in (its receipt would name the wrong inputs)."""


def produce(
    spec: RunSpec, backend: str = "local", *, check_inputs: bool = False, on_cell: CellCallback | None = None
) -> RunOutput:
    """Execute ``spec`` by :func:`execute_papermill` in a scratch folder of this machine and return the notebook
    and receipt; ``on_cell`` is told each cell executed.

    ``backend`` is recorded in the receipt. With ``check_inputs`` (a worker on another machine), the worker first
    hashes its own notebook, code and data and refuses to run when they differ from the planned run's. The scratch
    folder goes whatever happens (a stopped run leaves nothing behind)."""
    if not spec.run_key:
        raise ValueError("execute: the spec has no run key; plan it with agentpost.run.params.plan_runs")
    chapter = get_chapter(spec.chapter)
    if check_inputs:
        here = rc.input_hashes(rc.source_notebook(spec.chapter), spec.parameters, chapter.datasets)
        differ = sorted(k for k in here if here[k] != spec.hashes.get(k))
        if differ:
            raise InputsDiffer(
                f"{spec.chapter} seed {spec.seed}: this worker's {', '.join(differ)} differ from the "
                "planned run's; run the same checkout and data on every node"
            )
    with tempfile.TemporaryDirectory(prefix=f"{SCRATCH_PREFIXES[0]}{os.getpid()}-") as scratch:
        out_nb = Path(scratch) / rc.NOTEBOOK_NAME
        started = datetime.now(timezone.utc)
        error, imported_code = None, {}
        try:
            imported_code = execute_papermill(
                chapter.notebook,
                out_nb,
                parameters=spec.notebook_parameters(),
                timeout_s=spec.timeout_s,
                on_cell=on_cell,
            )
        except PapermillExecutionError as err:
            error = {
                "cell_index": err.cell_index,
                "ename": err.ename,
                "evalue": desensitize_text(str(err.evalue))[:2000],
            }
        ended = datetime.now(timezone.utc)
        wall = (ended - started).total_seconds()  # one clock for start, end and wall time, even if it is stepped
        nb = sanitize_notebook(nbformat.read(out_nb, as_version=4))
    stored_nb, metrics, outcomes = run_store.compact(nb, read_scraps(nb))
    nb_text = nbformat.writes(nbformat.from_dict(stored_nb)) + "\n"
    receipt = rc.build(
        chapter=spec.chapter,
        profile=spec.profile,
        kind=spec.kind,
        seed=spec.seed,
        status="failed" if error else "ok",
        run_key=spec.run_key,
        error=error,
        overrides=spec.overrides,
        parameters=spec.notebook_parameters(),
        hashes={**spec.hashes, "output_notebook": sha256_bytes(nb_text.encode())},
        packages=package_versions(),
        device=device_info(),
        timing={
            "start": started.isoformat(timespec="seconds"),
            "end": ended.isoformat(timespec="seconds"),
            "wall_s": round(wall, 2),
        },
        peak_memory={"host_rss_bytes": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024},
        metrics=metrics,
        backend=backend,
        imported_code=imported_code,
        notebook_code=notebook_code_hash(nb),
        outcomes_sha256=None if outcomes is None else sha256_bytes(outcomes),
    )
    message = f"cell {error['cell_index']}: {error['ename']}: {error['evalue'][:200]}" if error else None
    return RunOutput(spec, nb_text, rc.dump(receipt), wall, message, outcomes)


def commit(output: RunOutput) -> RunResult:
    """Write a produced run into its folder: its files into ``.tmp-<name>``, then one rename into place (so a
    reader never sees half a run). Every backend commits through here, on the machine that holds the runs root."""
    files = {
        rc.STORED_NOTEBOOK_NAME: run_store.stored_notebook_bytes(output.notebook_text),
        rc.RECEIPT_NAME: output.receipt_text.encode(),
    }
    if output.outcomes is not None:
        files[run_store.OUTCOMES_NAME] = output.outcomes
    run_store.replace_run_folder(output.spec.folder, files)
    receipt = json.loads(output.receipt_text)
    rel = output.spec.folder.relative_to(project_root()).as_posix()
    return RunResult(output.spec, receipt["status"], rel, output.wall_s, output.error, len(receipt["metrics"]))


def execute(spec: RunSpec, progress: CellCallback | None = None) -> RunResult:
    """Run ``spec`` on this machine (the caller decides about the cache) and write its folder."""
    return commit(produce(spec, "local", on_cell=progress))


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
