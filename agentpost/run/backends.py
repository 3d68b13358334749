"""Execution backends: where the runs of a batch execute.

A backend maps :func:`agentpost.run.execute.execute` over run specs and yields results as they finish. Callers
(``agentpost run``, ``agentpost book``) only see :class:`Backend`; a Ray or Slurm backend implements ``submit``
and registers itself in :data:`BACKENDS` without touching them. ``progress`` is optional: a backend that can
report cells as they execute calls it with ``(spec, cells_done, cells_total)``; one that cannot ignores it.

On Ctrl-C (``KeyboardInterrupt`` in the caller) a backend stops scheduling at once, ends its running runs (and
their kernels) and re-raises; the caller removes the temporary folders and reports what finished.
"""

from __future__ import annotations

import multiprocessing
import queue
import signal
from typing import Callable, Iterator, Protocol

from agentpost.errors import UsageError
from agentpost.run.params import RunSpec

#: ``progress(spec, cells_done, cells_total)``: called as the cells of a running run execute.
Progress = Callable[[RunSpec, int, int], None]
#: Seconds a run may take to end its kernel after it was asked to stop, before its process is killed.
STOP_GRACE_S = 10.0


class Backend(Protocol):
    name: str

    def submit(self, specs: list[RunSpec], *, jobs: int, progress: Progress | None = None) -> Iterator:
        """Execute every spec, yielding each :class:`~agentpost.run.execute.RunResult` as soon as it is known
        (order not guaranteed)."""


def _interrupt(signum, frame):
    """The parent's stop: kill this run's kernel first (it is in its own session, so no terminal signal reaches
    it, and a polite shutdown mid-cell makes ipykernel print tracebacks), then unwind the run."""
    import psutil

    for descendant in psutil.Process().children(recursive=True):
        try:
            descendant.kill()
        except psutil.NoSuchProcess:
            pass
    raise KeyboardInterrupt


def _child(index: int, spec: RunSpec, messages) -> None:
    """One run in its own process; every outcome goes back through ``messages`` as ``(kind, index, payload)``.

    The terminal's Ctrl-C reaches the whole process group: the child ignores it and lets the parent decide; the
    parent's SIGTERM ends the run (papermill's kernel with it) and removes its temporary folder."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        from agentpost.project import skip_slow_optional_imports

        skip_slow_optional_imports()
        from agentpost.run.execute import execute

        result = execute(spec, progress=lambda done, total: messages.put(("cells", index, (done, total))))
        messages.put(("result", index, result))
    except KeyboardInterrupt:
        messages.put(("stopped", index, None))
    except Exception as err:  # noqa: BLE001 - reported as this run's failure, the batch goes on
        messages.put(("crashed", index, f"{type(err).__name__}: {err}"))


class LocalBackend:
    """Processes on this machine, at most ``jobs`` at a time; one fresh process per run so peak memory is
    measured per run."""

    name = "local"

    def submit(self, specs: list[RunSpec], *, jobs: int, progress: Progress | None = None) -> Iterator:
        from agentpost.run.execute import RunResult, clear_interrupted

        context = multiprocessing.get_context("spawn")
        messages = context.Queue()
        waiting = list(enumerate(specs))
        running: dict[int, multiprocessing.Process] = {}
        try:
            while waiting or running:
                while waiting and len(running) < jobs:
                    index, spec = waiting.pop(0)
                    running[index] = context.Process(target=_child, args=(index, spec, messages), daemon=False)
                    running[index].start()
                try:
                    kind, index, payload = messages.get(timeout=1.0)
                except queue.Empty:
                    for index, process in list(running.items()):  # a process that died without a word
                        if not process.is_alive() and messages.empty():
                            running.pop(index).join()
                            clear_interrupted([specs[index]])
                            yield RunResult(specs[index], "failed", "", 0.0,
                                            f"the run's process ended with exit code {process.exitcode}")
                    continue
                if kind == "cells":
                    if progress:
                        progress(specs[index], *payload)
                    continue
                running.pop(index).join()
                if kind == "result":
                    yield payload
                else:
                    yield RunResult(specs[index], "failed", "", 0.0, payload or "stopped")
        finally:
            self._stop(running)

    @staticmethod
    def _stop(running: dict) -> None:
        """End the runs still running (each ends its kernel and removes its temporary folder), then reap them."""
        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut the clean-up short
        try:
            for process in running.values():
                if process.is_alive():
                    process.terminate()
            for process in running.values():
                process.join(STOP_GRACE_S)
                if process.is_alive():
                    process.kill()
                    process.join()
        finally:
            signal.signal(signal.SIGINT, previous)


BACKENDS: dict[str, type] = {"local": LocalBackend}


def get_backend(name: str) -> Backend:
    if name not in BACKENDS:
        raise UsageError(f"unknown backend {name!r}; available: {', '.join(sorted(BACKENDS))}")
    return BACKENDS[name]()
