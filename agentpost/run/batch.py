"""Run a batch of specs through a backend with a progress bar and a summary table.

The bar counts finished runs; its postfix shows the cells executed of each running run (where the backend
reports them). Ctrl-C stops the batch: :class:`BatchInterrupted` carries the runs that finished.
"""

from __future__ import annotations

import inspect
import sys
from contextlib import closing

from tqdm.auto import tqdm

from agentpost.errors import UsageError
from agentpost.run.backends import get_backend
from agentpost.run.cache import cached_result
from agentpost.run.execute import RunResult, clear_interrupted
from agentpost.run.params import RunSpec


class BatchInterrupted(KeyboardInterrupt):
    """Ctrl-C during a batch: the backend ended its running runs; ``finished`` are the results known by then."""

    def __init__(self, finished: list[RunResult], total: int):
        super().__init__(f"interrupted: {len(finished)} of {total} run(s) finished; the others were stopped and "
                         "their temporary folders removed")
        self.finished, self.total = finished, total


def check_writable(specs: list[RunSpec]) -> None:
    """Every run folder's parent can be created and written, checked before any run starts."""
    import os
    import tempfile

    for parent in sorted({s.folder.parent for s in specs}):
        try:
            parent.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(prefix=".tmp-probe-", dir=parent):
                pass
        except OSError as err:
            raise UsageError(f"cannot write runs to {err.filename or parent}: {err.strerror or err}") from None
        if not os.access(parent, os.W_OK):
            raise UsageError(f"cannot write runs to {parent}: not writable")


def run_batch(specs: list[RunSpec], *, jobs: int = 1, backend: str = "local", force: bool = False,
              stream=sys.stderr) -> list[RunResult]:
    """Execute ``specs`` (runs with the same key that succeeded and validate are reused without starting a
    process); returns results in spec order."""
    if jobs < 1:
        raise UsageError(f"--jobs must be >= 1, got {jobs}")
    chosen = get_backend(backend)
    clear_interrupted()
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
            optional = {"progress": progress} if "progress" in inspect.signature(chosen.submit).parameters else {}
            submitted = chosen.submit(todo, jobs=min(jobs, max(len(todo), 1)), **optional)
            with closing(submitted) as finishing:
                for result in finishing:
                    results[(result.spec.chapter, result.spec.profile, result.spec.seed)] = result
                    cells.pop(result.spec, None)
                    bar.set_postfix_str(", ".join([*cells.values(), f"{result.spec.chapter}/{result.spec.seed}: {result.status}"]))
                    bar.update(1)
        except KeyboardInterrupt:
            clear_interrupted(todo)
            raise BatchInterrupted([results[(s.chapter, s.profile, s.seed)] for s in specs
                                    if (s.chapter, s.profile, s.seed) in results], len(specs)) from None
    return [results[(s.chapter, s.profile, s.seed)] for s in specs]


def summary_table(results: list[RunResult]) -> str:
    rows = [("chapter", "profile", "kind", "seed", "status", "wall s", "metrics", "run")]
    for r in results:
        rows.append((r.spec.chapter, r.spec.profile, r.spec.kind, str(r.spec.seed), r.status, f"{r.wall_s:.1f}", str(r.metrics), r.run_dir))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    for r in results:
        if r.error:
            lines.append(f"FAILED {r.spec.chapter} seed {r.spec.seed}: {r.error}")
    return "\n".join(lines)
