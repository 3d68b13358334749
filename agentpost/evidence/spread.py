"""Machine noise next to the detectable effect: a chapter's kernel-path spread, and the one rule that says whether a
re-executed value reproduces a recorded one.

``benchmarks/kernel_path_spread.py`` re-runs a chapter's notebook under other CPU kernel paths (the scalar
``default`` path, AVX2, one thread) and writes ``book/spread/<chapter>.json``: per glued name pattern (list indices
as ``[*]``) the largest range of its numbers and the strings seen. :func:`check_value` is the reproduction rule that
nbval's glue regression (``tests/notebooks/glue_regression.py``) and ``agentpost recertify``
(:mod:`agentpost.evidence.certificates`) both apply: a number within ``SPREAD_FACTOR`` times its measured spread (or
``RTOL`` relative / ``ATOL`` absolute), a string equal or seen on a kernel path; ``timing`` and ``machine`` values
(:data:`agentpost.record.recording.KINDS`) are not compared. For every comparison recorded with ``glue_paired``,
:func:`spread_section` renders the estimate on each path, its range and the comparison's MDE, so a reader sees
whether the difference between machines is below the effect the protocol could detect.
"""

from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from pathlib import Path

from agentpost.evidence.escape import code, escape_cell
from agentpost.record.recording import SCRAP_MIME, format_value, glue_kind
from agentpost.project import project_root

SPREAD_SUBDIR = Path("book") / "spread"
#: Four measured paths underestimate the full range over machines, hence the factor.
SPREAD_FACTOR = 3.0
RTOL = 1e-6
ATOL = 1e-6  # below any effect a chapter reports; above the low-bit noise of deterministic float code
#: Kinds that no other machine reproduces: never compared.
NOT_COMPARED = ("timing", "machine")


def load_spread(root: Path, chapter: str) -> dict | None:
    path = root / SPREAD_SUBDIR / f"{chapter}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def spread_section(root: Path, chapter: str) -> list[str]:
    """Markdown lines for the evidence page (empty when the chapter has no measurement)."""
    spread = load_spread(root, chapter)
    if spread is None:
        return []
    paths = ["committed", *spread["paths"]]
    lines = [
        "",
        "## Machine-to-machine spread",
        "",
        f"The notebook at its smoke defaults (seed {spread['seed']}) re-run under other CPU kernel paths "
        f"({', '.join(code(p) for p in paths[1:])}) next to the committed run. A comparison whose estimate moves "
        "by more than its MDE between kernel paths has a verdict that depends on the machine.",
        "",
    ]
    if not spread["paired"]:
        lines.append("No comparison recorded with `glue_paired` in this measurement.")
        return lines
    lines += [
        "| comparison | "
        + " | ".join(f"estimate ({p})" for p in paths)
        + " | spread | MDE | spread < MDE | verdicts |",
        "|---|" + "---|" * len(paths) + "---|---|---|---|",
    ]
    for row in spread["paired"]:
        est = " | ".join(escape_cell(format_value(row["estimate"][p])) if p in row["estimate"] else " " for p in paths)
        verdicts = ", ".join(sorted(set(map(str, row["verdicts"].values()))))
        lines.append(
            f"| {code(row['comparison'])} | {est} | {escape_cell(format_value(row['estimate_spread']))} | "
            f"{escape_cell(format_value(row['mde']))} | {'yes' if row['spread_below_mde'] else '**no**'} "
            f"| {escape_cell(verdicts)} |"
        )
    return lines


def flatten(value, prefix: str = "") -> dict[str, object]:
    """``{dotted.name: leaf}`` for nested dicts/lists (the naming of the spread files)."""
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


def glued_with_kind(outputs) -> dict[str, tuple[object, str]]:
    """``{flattened name: (value, kind)}`` of one cell's outputs (committed or executed); every leaf carries its
    scrap's declared kind."""
    found: dict[str, tuple[object, str]] = {}
    for out in outputs or []:
        scrap = (out.get("data") or {}).get(SCRAP_MIME)
        if scrap is None:
            continue
        if isinstance(scrap, str):
            scrap = json.loads(scrap)
        kind = glue_kind(out)
        found.update({name: (value, kind) for name, value in flatten(scrap["data"], scrap["name"]).items()})
    return found


@lru_cache(maxsize=None)
def measured_spread(chapter: str) -> dict[str, dict]:
    """``{name pattern: {"spread": largest range of its numbers, "values": strings seen}}`` of the chapter's spread
    file (empty when it has none)."""
    spread = load_spread(project_root(), chapter)
    return spread["values"] if spread else {}


def pattern(name: str) -> str:
    """The spread file's key of a flattened name: its list indices as ``[*]``."""
    return re.sub(r"\[\d+\]", "[*]", name)


def _number(x) -> float | None:
    if isinstance(x, bool) or x is None:
        return None
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str) and x in ("nan", "inf", "-inf"):
        return float(x)
    return None


def check_value(chapter: str, name: str, committed, executed, kind: str = "result") -> str | None:
    """The reason ``executed`` (glued as ``kind``) is not an acceptable reproduction of ``committed``, or None."""
    if kind in NOT_COMPARED:
        return None
    measured = measured_spread(chapter).get(pattern(name), {}) if kind != "deterministic" else {}
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
    seen = measured.get("values") or []
    if str(executed) in seen:
        return None
    return f"{name}: {executed!r} vs committed {committed!r}" + (f" (kernel paths gave {seen})" if seen else "")
