"""The benchmarks' shared long-format table (liger-kernel's benchmark form): one row per (benchmark, case) with
median, p20, p80, unit, device and versions.

A benchmark keeps printing its own tables and also calls :func:`record` for every timed case; where the
environment variable ``AGENTPOST_BENCH_ROWS`` names a file (``make bench`` sets it, see ``benchmarks/run_all.py``),
each row is appended to it as one JSON line, and ``run_all`` prints all rows as one table at the end.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
from collections.abc import Sequence

ROWS_ENV = "AGENTPOST_BENCH_ROWS"
COLUMNS = ("benchmark", "case", "median", "p20", "p80", "unit", "device", "versions")


def quantiles(samples: Sequence[float]) -> tuple[float, float, float]:
    """(median, p20, p80) of ``samples`` (``statistics.quantiles``, inclusive method: linear interpolation between
    order statistics, always within the samples' range; one sample gives it thrice)."""
    xs = [float(x) for x in samples]
    if not xs:
        raise ValueError("quantiles need at least one sample")
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=5, method="inclusive")
    return statistics.median(xs), q[0], q[3]


def versions() -> str:
    """Python, torch and triton versions, as one short string."""
    import torch

    try:
        import triton

        tri = triton.__version__
    except ImportError:
        tri = "none"
    return f"py {platform.python_version()} torch {torch.__version__} triton {tri}"


def record(benchmark: str, case: str, samples: Sequence[float], unit: str, device: str = "cpu") -> dict:
    """One long-format row from the raw ``samples`` of a timed case (see :func:`emit`)."""
    return emit(benchmark, case, *quantiles(samples), unit, device)


def emit(benchmark: str, case: str, median: float, p20: float, p80: float, unit: str, device: str = "cpu") -> dict:
    """One long-format row from summary figures (NaN where a library keeps the median only); appended to
    ``$AGENTPOST_BENCH_ROWS`` when set, and returned."""
    row = dict(zip(COLUMNS, (benchmark, case, float(median), float(p20), float(p80), unit, device, versions())))
    path = os.environ.get(ROWS_ENV)
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(row) + "\n")
    return row


def format_table(rows: Sequence[dict]) -> str:
    """The rows as a fixed-width text table, in the order given."""
    cells = [[str(r[c]) if c not in ("median", "p20", "p80") else f"{r[c]:.4g}" for c in COLUMNS] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) if cells else len(c) for i, c in enumerate(COLUMNS)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)) for row in cells]
    return "\n".join(lines)
