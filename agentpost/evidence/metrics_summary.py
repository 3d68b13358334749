"""A profile's recorded metrics across its seed runs, summarised for the page's column.

One row per numeric metric (mean, sample standard deviation, min, max, seeds that recorded it), the text metrics
as their distinct values with counts, and a strip plot of each numeric metric that differs between seeds (small
multiples two to a row, at most :data:`MAX_PANELS`, 7.5 in = 750 px wide: the page's column) showing every seed's
value and the mean. Never one column per seed: a profile may have dozens of seeds. Metric names and values come
from runs and are escaped.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from pathlib import Path

from agentpost.evidence.escape import code, escape_cell
from agentpost.record.recording import format_value

#: Width of the strip-plot figure in inches (at 100 dpi: the page's 784 px column, less its margin).
FIGURE_WIDTH_IN = 7.5
PANELS_PER_ROW = 2
#: Most panels in the figure (the table above lists every metric; the figure says when it shows only some).
MAX_PANELS = 24


def _is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def scalar_metrics(receipts: list[dict]) -> list[str]:
    """Names of the metrics that some run recorded as a number or a string, sorted."""
    names = set()
    for rec in receipts:
        names |= {k for k, v in rec["metrics"].items() if _is_number(v) or isinstance(v, str)}
    return sorted(names)


def summary(values: list[float]) -> dict:
    """``mean``, ``sd`` (sample standard deviation, NaN for one value), ``min``, ``max``, ``n`` of finite values."""
    finite = [float(v) for v in values if math.isfinite(v)]
    if not finite:
        return {"mean": math.nan, "sd": math.nan, "min": math.nan, "max": math.nan, "n": 0}
    sd = statistics.stdev(finite) if len(finite) > 1 else math.nan
    return {"mean": statistics.fmean(finite), "sd": sd, "min": min(finite), "max": max(finite), "n": len(finite)}


def _g(x: float) -> str:
    return "—" if x != x else format(x, ".4g")


def metrics_table(receipts: list[dict]) -> tuple[list[str], list[str]]:
    """(Markdown lines of the numeric summary table and the text-value list, names of the numeric metrics whose
    value differs between seeds)."""
    numeric, lines, texts = [], [], []
    for name in scalar_metrics(receipts):
        values = [rec["metrics"][name] for rec in receipts if name in rec["metrics"]]
        if all(_is_number(v) for v in values):
            s = summary(values)
            if s["min"] < s["max"]:
                numeric.append(name)
            lines.append(
                f"| {code(name)} | {_g(s['mean'])} | {_g(s['sd'])} | {_g(s['min'])} | {_g(s['max'])} | {s['n']} |"
            )
        else:
            counts = Counter(format_value(v) for v in values)
            shown = ", ".join(f"{escape_cell(v)} (×{n})" for v, n in counts.most_common())
            texts.append(f"- {code(name)}: {shown}")
    if lines:
        lines = ["| metric | mean | sd | min | max | seeds |", "|---|---|---|---|---|---|"] + lines
    if texts:
        lines += ["", "Text values (each distinct value, ×seeds that recorded it):", ""] + texts
    return lines, numeric


def strip_plot(receipts: list[dict], names: list[str], path: Path, title: str) -> bool:
    """Small multiples of ``names``: each seed's value as a dot (jittered up and down), the mean as a line;
    False when there is nothing to draw."""
    if not names:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = -(-len(names) // PANELS_PER_ROW)
    fig, axes = plt.subplots(rows, PANELS_PER_ROW, figsize=(FIGURE_WIDTH_IN, 0.85 * rows + 0.5), squeeze=False)
    jitter = np.random.default_rng(0)
    for ax, name in zip(axes.flat, names):
        values = np.array([rec["metrics"][name] for rec in receipts if name in rec["metrics"]], dtype=float)
        ax.scatter(values, jitter.uniform(-0.3, 0.3, size=len(values)), s=9, color="tab:blue", alpha=0.6, lw=0)
        finite = values[np.isfinite(values)]
        if finite.size:
            ax.axvline(finite.mean(), color="0.3", lw=1)
        ax.set_ylim(-0.6, 0.6)
        ax.set_yticks([])
        ax.set_title(name, fontsize=7, loc="left", parse_math=False)  # a metric's name is text, never mathtext
        ax.tick_params(axis="x", labelsize=7)
        ax.xaxis.get_offset_text().set_fontsize(7)
    for ax in axes.flat[len(names) :]:
        ax.axis("off")
    fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def metrics_section(chapter_id: str, profile: str, receipts: list[dict], out_dir: Path) -> list[str]:
    """The "Recorded metrics across seeds" section of an evidence page (empty when no run recorded a scalar)."""
    table, numeric = metrics_table(receipts)
    if not table:
        return []
    lines = ["", "### Recorded metrics across seeds", "", f"Over the {len(receipts)} counted seed run(s):", ""]
    lines += table
    name = f"{chapter_id}-{profile}-metrics.png"
    shown = numeric[:MAX_PANELS]
    some = f" (the first {len(shown)} of {len(numeric)})" if len(shown) < len(numeric) else ""
    title = f"{chapter_id} · {profile}: the metrics that differ between seeds{some}, each seed a dot, the mean a line"
    if strip_plot(receipts, shown, out_dir / name, title):
        lines += ["", f"![the recorded metrics that differ between seeds, one dot per seed{some}]({name})"]
    return lines
