"""nbval plugin: every glued value a notebook records is compared with the committed one, within a measured spread.

nbval (``--nbval-lax``) compares the text of cells marked ``# NBVAL_CHECK_OUTPUT``; those cells show only values that
are the same on every CPU. Results of training and sampling are not: between torch kernel paths (AVX-512, AVX2,
the scalar ``default`` path) and thread counts the low bits differ, and training amplifies them. This plugin
checks those values too, in every executed cell, against the committed notebook's glued data:

* numbers: ``|executed - committed| <= max(SPREAD_FACTOR * spread, RTOL * |committed|, ATOL)``, where ``spread`` is
  the value's range over the kernel paths measured by ``benchmarks/kernel_path_spread.py`` (``book/spread/<chapter>.json``:
  the committed notebook and three runs of it with ``ATEN_CPU_CAPABILITY=default``, ``=avx2`` and
  ``OMP_NUM_THREADS=1``). Four runs underestimate the full range over machines, hence the factor. A value
  without a measurement must match to ``RTOL`` relative or ``ATOL`` absolute.
* strings (verdicts, selected arms): equal to the committed one, or to one of the values seen across kernel paths.
* values matching ``NOT_REPRODUCIBLE`` are not compared: wall-clock measurements and the facts of the machine
  itself (``show_device``'s ``run_environment``), which no other machine reproduces.

Enable with ``-p tests.notebooks.glue_regression`` (the Makefile's nbval step does).
"""

from __future__ import annotations

import fnmatch
import json
import math
from functools import lru_cache
from pathlib import Path

import pytest

from agentpost.evidence.recording import SCRAP_MIME

ROOT = Path(__file__).resolve().parents[2]
SPREAD_DIR = ROOT / "book" / "spread"
SPREAD_FACTOR = 3.0
RTOL = 1e-6
ATOL = 1e-6  # below any effect a chapter reports; above the low-bit noise of deterministic float code
#: Glued names (fnmatch patterns over flattened names) that no other machine reproduces, per chapter ("*": all):
#: wall-clock measurements and the run's own device and package facts.
NOT_REPRODUCIBLE: dict[str, tuple[str, ...]] = {
    "*": ("run_environment*", "*_ms*", "*_s", "*wall*", "*seconds*", "*time_ratio*", "*gflops*", "*latency*",
          "*throughput*", "*overhead_frac*", "*decode_ratio*", "*ms_per_token*"),
}


def flatten(value, prefix: str = "") -> dict[str, object]:
    """``{dotted.name: leaf}`` for nested dicts/lists (the same naming as the spread benchmark)."""
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(value, list):
        out = {}
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}[{i}]"))
        return out
    return {prefix: value}


def glued(outputs) -> dict[str, object]:
    """Flattened glued data of one cell's outputs (committed or executed)."""
    found: dict[str, object] = {}
    for out in outputs or []:
        scrap = (out.get("data") or {}).get(SCRAP_MIME)
        if scrap is None:
            continue
        if isinstance(scrap, str):
            scrap = json.loads(scrap)
        found.update(flatten(scrap["data"], scrap["name"]))
    return found


@lru_cache(maxsize=None)
def measured_spread(chapter: str) -> dict[str, dict]:
    path = SPREAD_DIR / f"{chapter}.json"
    return json.loads(path.read_text())["values"] if path.is_file() else {}


def not_reproducible(chapter: str, name: str) -> bool:
    patterns = NOT_REPRODUCIBLE.get("*", ()) + NOT_REPRODUCIBLE.get(chapter, ())
    return any(fnmatch.fnmatch(name, p) for p in patterns)


def _number(x) -> float | None:
    if isinstance(x, bool) or x is None:
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str) and x in ("nan", "inf", "-inf"):
        return float(x)
    return None


def check_value(chapter: str, name: str, committed, executed) -> str | None:
    """The reason ``executed`` is not an acceptable reproduction of ``committed``, or None."""
    if not_reproducible(chapter, name):
        return None
    measured = measured_spread(chapter).get(name, {})
    c, e = _number(committed), _number(executed)
    if c is not None and e is not None:
        if math.isnan(c) and math.isnan(e):
            return None
        spread = measured.get("spread") or 0.0
        tol = max(SPREAD_FACTOR * spread, RTOL * abs(c), ATOL)
        if abs(e - c) <= tol or (math.isinf(c) and c == e):
            return None
        basis = f"{SPREAD_FACTOR:g} x kernel-path spread {spread:.3g}" if spread else "no measured spread"
        return f"{name}: {e!r} vs committed {c!r} (|diff| {abs(e - c):.3g} > tolerance {tol:.3g}; {basis})"
    if executed == committed:
        return None
    seen = [v for v in (measured.get("values") or {}).values()]
    if executed in seen:
        return None
    return f"{name}: {executed!r} vs committed {committed!r}" + (f" (kernel paths gave {sorted(map(str, set(map(str, seen))))})" if seen else "")


class GlueRegression(AssertionError):
    """A glued value moved further than its measured kernel-path spread allows."""


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    result = yield
    if type(item).__name__ == "NbCellItem" and getattr(item, "test_outputs", None) is not None:
        chapter = Path(str(item.fspath)).stem
        committed, executed = glued(item.cell.get("outputs")), glued(item.test_outputs)
        problems = [f"{name}: recorded in the committed notebook, not by this run"
                    for name in committed if name not in executed and not not_reproducible(chapter, name)]
        problems += [p for name in committed if name in executed
                     for p in [check_value(chapter, name, committed[name], executed[name])] if p]
        if problems:
            raise GlueRegression(f"{chapter} cell {item.cell_num}: glued values differ from the committed notebook:\n  "
                                 + "\n  ".join(problems))
    return result
