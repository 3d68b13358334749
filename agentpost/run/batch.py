"""Run a batch of specs through a backend with a progress bar and a summary table.

The bar counts finished runs; its postfix shows the cells executed of each running run (where the backend
reports them). Ctrl-C, SIGTERM and SIGHUP stop the batch alike: the running runs are stopped, their folders
removed, and :class:`BatchInterrupted` carries the runs that finished and the signal (exit code 128 + signal).

One batch at a time per runs root (:func:`runs_lock`, an advisory lock on the folder that the system drops when the
process ends, however it ends): a second batch waits, then finds the first one's runs in the cache, so two identical
batches never compute a run twice and never remove each other's temporary folders.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import sys
from contextlib import closing

from tqdm.auto import tqdm

from agentpost.errors import UsageError
from agentpost.run.backends import Backend, get_backend
from agentpost.run.cache import cached_result
from agentpost.evidence import receipt as rc
from agentpost.run.execute import RunResult, check_scratch, clear_interrupted, reclaim_scratch
from agentpost.run.params import RunSpec


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP during a batch, handled like Ctrl-C (``signum`` says which)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


#: The signals that stop a batch like Ctrl-C.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


class BatchInterrupted(KeyboardInterrupt):
    """A stopped batch: the backend ended its running runs; ``finished`` are the results known by then and
    ``signum`` the signal (SIGINT for Ctrl-C)."""

    def __init__(self, finished: list[RunResult], total: int, signum: int = signal.SIGINT):
        super().__init__(
            f"interrupted: {len(finished)} of {total} run(s) finished; the others were stopped and "
            "their temporary folders removed"
        )
        self.finished, self.total, self.signum = finished, total, signum


@contextlib.contextmanager
def stop_signals_interrupt():
    """SIGTERM and SIGHUP raise :class:`Stopped` in the main thread while the block runs (then the old handlers)."""

    def stop(signum, frame):
        raise Stopped(signum)

    previous = {s: signal.signal(s, stop) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextlib.contextmanager
def runs_lock(stream=sys.stderr):
    """Hold the runs root's lock (waiting, with one line said, while another batch holds it)."""
    root = rc.runs_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as err:
        raise UsageError(f"cannot write runs to {err.filename or root}: {err.strerror or err}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(
                f"agentpost: another batch is running in {root}; waiting for it to finish (Ctrl-C stops waiting)",
                file=stream,
                flush=True,
            )
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def check_writable(specs: list[RunSpec]) -> None:
    """Every run folder's parent can be created and written, checked before any run starts."""
    import os
    import tempfile

    for spec in specs:
        for path in (spec.folder, spec.folder.with_name(f".tmp-{spec.folder.name}")):
            if (path.exists() or path.is_symlink()) and not path.is_dir():
                raise UsageError(f"{path}: a file where a run folder goes (remove it; a run folder is written there)")
    for parent in sorted({s.folder.parent for s in specs}):
        try:
            parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(prefix=".tmp-probe-", dir=parent):
                pass
        except OSError as err:
            raise UsageError(f"cannot write runs to {err.filename or parent}: {err.strerror or err}") from None
        if not os.access(parent, os.W_OK):
            raise UsageError(f"cannot write runs to {parent}: not writable")


def run_batch(
    specs: list[RunSpec], *, jobs: int = 1, backend: str | Backend = "local", force: bool = False, stream=sys.stderr
) -> list[RunResult]:
    """Execute ``specs`` through ``backend`` (a name, or one made by :func:`agentpost.run.backends.make_backend`);
    runs with the same key that succeeded and validate are reused without starting a process. Returns results in
    spec order."""
    if jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {jobs}")
    chosen = get_backend(backend)
    refuse_links(specs)
    if chosen.name in ("local", "submitit-local"):  # runs execute on this machine, in this $TMPDIR
        check_scratch()
    with stop_signals_interrupt():
        try:
            with runs_lock(stream):
                reclaim_scratch()
                clear_interrupted()  # every .tmp- folder is a stopped batch's: no other batch runs while we hold the lock
                return _run_locked(specs, jobs, chosen, force, stream)
        except Stopped as stop:  # while waiting for the lock, before any run started
            raise BatchInterrupted([], len(specs), stop.signum) from None


def refuse_links(specs: list[RunSpec]) -> None:
    """A run folder (or a folder above it, inside the runs root) that is a symbolic link is refused before any work:
    agentpost never reads evidence or writes a run through a link."""
    root = rc.runs_root()
    for spec in specs:
        path = spec.folder
        while path != root and root in path.parents:
            if path.is_symlink():
                raise UsageError(
                    f"{path.relative_to(root.parent.parent).as_posix()} is a symbolic link; runs are never "
                    "read or written through links (remove it)"
                )
            path = path.parent


def _run_locked(specs: list[RunSpec], jobs: int, chosen: Backend, force: bool, stream) -> list[RunResult]:
    results: dict[tuple, RunResult] = {}
    todo = []
    for spec in specs:
        hit = None if force else cached_result(spec)
        if hit:
            results[(spec.chapter, spec.profile, spec.seed)] = hit
        else:
            todo.append(spec)
    check_writable(todo)
    cells: dict[RunSpec, str] = {}
    with tqdm(total=len(specs), initial=len(specs) - len(todo), desc="runs", unit="run", file=stream) as bar:

        def progress(spec: RunSpec, done: int, total: int) -> None:
            cells[spec] = f"{spec.chapter}/{spec.seed}: cell {done}/{total}"
            bar.set_postfix_str(", ".join(cells.values()))

        try:
            submitted = chosen.submit(todo, jobs=min(jobs, max(len(todo), 1)), progress=progress)
            with closing(submitted) as finishing:
                for result in finishing:
                    results[(result.spec.chapter, result.spec.profile, result.spec.seed)] = result
                    cells.pop(result.spec, None)
                    bar.set_postfix_str(
                        ", ".join([*cells.values(), f"{result.spec.chapter}/{result.spec.seed}: {result.status}"])
                    )
                    bar.update(1)
        except KeyboardInterrupt as stop:
            clear_interrupted(todo)
            raise BatchInterrupted(
                [results[(s.chapter, s.profile, s.seed)] for s in specs if (s.chapter, s.profile, s.seed) in results],
                len(specs),
                getattr(stop, "signum", signal.SIGINT),
            ) from None
    return [results[(s.chapter, s.profile, s.seed)] for s in specs]


def summary_table(results: list[RunResult]) -> str:
    rows = [("chapter", "profile", "kind", "seed", "status", "wall s", "metrics", "run")]
    for r in results:
        rows.append(
            (
                r.spec.chapter,
                r.spec.profile,
                r.spec.kind,
                str(r.spec.seed),
                r.status,
                f"{r.wall_s:.1f}",
                str(r.metrics),
                r.run_dir or "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in results:
        if r.error:
            lines.append(f"FAILED {r.spec.chapter} seed {r.spec.seed}: {r.error}")
    return "\n".join(lines)
