"""Machine noise next to the detectable effect: a chapter's kernel-path spread, for its evidence page.

``benchmarks/kernel_path_spread.py`` re-runs a chapter's notebook under other CPU kernel paths (the scalar
``default`` path, AVX2, one thread) and writes ``book/spread/<chapter>.json``. For every comparison recorded with
``glue_paired`` this renders the estimate on each path, its range and the comparison's MDE, so a reader sees whether
the difference between machines is below the effect the protocol could detect.
"""

from __future__ import annotations

import json
from pathlib import Path

from agentpost.evidence.escape import code, escape_cell
from agentpost.evidence.recording import format_value

SPREAD_SUBDIR = Path("book") / "spread"


def load_spread(root: Path, chapter: str) -> dict | None:
    path = root / SPREAD_SUBDIR / f"{chapter}.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def spread_section(root: Path, chapter: str) -> list[str]:
    """Markdown lines for the evidence page (empty when the chapter has no measurement)."""
    spread = load_spread(root, chapter)
    if spread is None:
        return []
    paths = ["committed", *spread["paths"]]
    lines = ["", "## Machine-to-machine spread", "",
             f"The notebook at its smoke defaults (seed {spread['seed']}) re-run under other CPU kernel paths "
             f"({', '.join(code(p) for p in paths[1:])}) next to the committed run. A comparison whose estimate moves "
             "by more than its MDE between kernel paths has a verdict that depends on the machine.", ""]
    if not spread["paired"]:
        lines.append("No comparison recorded with `glue_paired` in this measurement.")
        return lines
    lines += ["| comparison | " + " | ".join(f"estimate ({p})" for p in paths) + " | spread | MDE | spread < MDE | verdicts |",
              "|---|" + "---|" * len(paths) + "---|---|---|---|"]
    for row in spread["paired"]:
        est = " | ".join(escape_cell(format_value(row["estimate"][p])) if p in row["estimate"] else " " for p in paths)
        verdicts = ", ".join(sorted(set(map(str, row["verdicts"].values()))))
        lines.append(f"| {code(row['comparison'])} | {est} | {escape_cell(format_value(row['estimate_spread']))} | "
                     f"{escape_cell(format_value(row['mde']))} | {'yes' if row['spread_below_mde'] else '**no**'} "
                     f"| {escape_cell(verdicts)} |")
    return lines
