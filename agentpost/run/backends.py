"""Execution backends: where the runs of a batch execute.

A backend maps :func:`agentpost.run.execute.execute` over run specs and yields results as they finish. Callers
(``agentpost run``, ``agentpost book``) only see :class:`Backend`; a Ray or Slurm backend implements ``submit``
and registers itself in :data:`BACKENDS` without touching them.
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor, as_completed
from typing import Iterator, Protocol

from agentpost.errors import UsageError
from agentpost.run.execute import RunResult, execute
from agentpost.run.params import RunSpec


class Backend(Protocol):
    name: str

    def submit(self, specs: list[RunSpec], *, jobs: int) -> Iterator[RunResult]:
        """Execute every spec, yielding each result as soon as it is known (order not guaranteed)."""


class LocalBackend:
    """A process pool on this machine; one fresh process per run so peak memory is measured per run."""

    name = "local"

    def submit(self, specs: list[RunSpec], *, jobs: int) -> Iterator[RunResult]:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context, max_tasks_per_child=1) as pool:
            futures = {pool.submit(execute, spec): spec for spec in specs}
            for future in as_completed(futures):
                yield future.result()


BACKENDS: dict[str, type] = {"local": LocalBackend}


def get_backend(name: str) -> Backend:
    if name not in BACKENDS:
        raise UsageError(f"unknown backend {name!r}; available: {', '.join(sorted(BACKENDS))}")
    return BACKENDS[name]()
