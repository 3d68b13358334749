"""How the book shows a chapter's declared comparisons: one table and one forest plot per profile.

The forest plot draws every comparison on one axis in units of its own smallest effect of interest, oriented so
that "better" is to the right: the dot is the estimate, the bar its 95% CI, the grey band the region of practical
equivalence [-1, 1]; colour gives the verdict class. A reader sees at once which comparisons matter, which are
equivalent and which cannot tell.
"""

from __future__ import annotations

from pathlib import Path

from agentpost.evidence.comparisons import Computed
from agentpost.evidence.design_checks import design_section, summary as design_summary
from agentpost.evidence.escape import escape_cell

#: Colour of each verdict class in the forest plot (None: not computed).
CLASS_COLOURS = {
    "matters": "tab:green",
    "detectable": "tab:olive",
    "equivalent": "tab:blue",
    "inconclusive": "tab:orange",
    "no_information": "tab:gray",
    None: "tab:red",
}


def _num(x, spec: str = "+.3g") -> str:
    return "—" if x is None else format(x, spec)


def comparison_table(computed: list[Computed]) -> list[str]:
    """Markdown table of the declared comparisons (catalogue text and numbers; a problem's text, which may quote a
    run's item ids, is escaped)."""
    lines = [
        "| comparison | claim | b − a | estimate | 95% CI | MDE@80% | margin | seeds × items | verdict |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for c in computed:
        r = c.result or {}
        ci = f"[{_num(r.get('ci_low'))}, {_num(r.get('ci_high'))}]" if r else "—"
        shape = f"{r['n_seeds']} × {r['n_items']} {c.comparison.items}" if r else f"{len(c.seeds)} seeds"
        star = " ★" if c.comparison.headline else ""
        verdict = f"**{c.verdict}**" if r else f"not computed: {escape_cell(c.problem)}"
        lines.append(
            f"| `{c.comparison.id}`{star} | {c.comparison.claim} | {c.comparison.b} − {c.comparison.a} "
            f"| {_num(r.get('estimate'))} | {ci} | {_num(r.get('mde'), '.3g')} "
            f"| {c.comparison.min_effect:.3g} | {shape} | {verdict} |"
        )
    return lines


def forest_plot(computed: list[Computed], path: Path, title: str) -> bool:
    """Draw the computed comparisons into ``path`` (PNG); False when none was computed."""
    rows = [c for c in computed if c.result]
    if not rows:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(rows) + 1.2))
    ax.axvspan(-1, 1, color="0.9", zorder=0, label="practical equivalence (± margin)")
    ax.axvline(0, color="0.5", lw=0.8)
    for y, c in enumerate(reversed(rows)):
        r, sign = c.result, 1.0 if c.comparison.higher_is_better else -1.0
        scale = sign / c.comparison.min_effect
        lo, hi = sorted((r["ci_low"] * scale, r["ci_high"] * scale))
        colour = CLASS_COLOURS.get(r.get("verdict_class"), "tab:purple")
        ax.plot([lo, hi], [y, y], color=colour, lw=2)
        ax.plot(r["estimate"] * scale, y, "o", color=colour)
    ax.set_yticks(range(len(rows)), [f"{c.comparison.id} ({c.verdict})" for c in reversed(rows)], fontsize=8)
    ax.set_xlabel("estimate / margin (oriented: right is better for the method arm b)", fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def _hours(h: float) -> str:
    return f"{h * 60:.0f} min" if h < 1 else f"{h:.2g} h"


def settling_lines(computed: list[Computed], wall_s: float | None) -> list[str]:
    """What would settle each inconclusive comparison: the planner's fewest seeds at the recorded items per seed
    and at four times as many, from the variance components of these runs
    (:func:`agentpost.evidence.planning.what_would_settle`)."""
    from agentpost.evidence.planning import SETTLE_SEEDS, what_would_settle

    lines = []
    for c in computed:
        options = what_would_settle(c, wall_s)
        if not options:
            continue
        said = []
        for o in options:
            if o.seeds is None:
                said.append(f"no seed count up to {SETTLE_SEEDS[-1]} at {o.items} items per seed")
                continue
            low, high = o.hours_jobs2 or (None, None)
            time = (
                ""
                if low is None
                else f" (about {_hours(low)} at `--jobs 2`"
                + (f", up to {_hours(high)} if evaluation dominates)" if high > low * 1.05 else ")")
            )
            said.append(f"{o.seeds} seeds at {o.items} items per seed{time}")
        goal = (
            "MDE down to the margin"
            if c.result["mde"] > c.comparison.min_effect
            else "a 95% CI that excludes the margin, if the estimate holds"
        )
        lines.append(
            f"- `{c.comparison.id}` (MDE {c.result['mde']:.3g}, margin {c.comparison.min_effect:.3g}; "
            f"needs MDE {options[0].target:.2g}: {goal}): " + "; ".join(said) + "."
        )
    if not lines:
        return []
    return [
        "",
        "What would settle the inconclusive comparisons: `agentpost plan`'s arithmetic on these runs' own "
        "variance components (80% power), with this profile's median run time. A prediction: the components are "
        "estimates from the seeds above.",
        "",
    ] + lines


def comparisons_section(
    chapter_id: str, profile: str, computed: list[Computed], out_dir: Path, wall_s: float | None = None
) -> list[str]:
    """The page section for one profile's declared comparisons (table, copies and problems, forest plot, and
    what would settle the inconclusive ones; ``wall_s``: the median wall time of one of its runs)."""
    if not computed:
        return []
    seeds = sorted({s for c in computed for s in c.seeds})
    lines = [
        "",
        "### Declared comparisons across seed runs",
        "",
        f"Computed by `agentpost compare {chapter_id} --profile {profile}` over {len(seeds)} distinct seed run(s) "
        f"{seeds}; ★ marks a headline comparison. The margin is the smallest effect of interest: a difference "
        "beyond it *matters*, a 90% CI inside it is *equivalent*.",
        "",
    ]
    lines += comparison_table(computed)
    lines += design_section(computed)
    copies = {s: o for c in computed for s, o in c.copies.items()}
    if copies:
        lines += [
            "",
            "Seeds "
            + ", ".join(f"{s} (= seed {o})" for s, o in sorted(copies.items()))
            + " recorded the same outcomes as an earlier seed: a copy is not a replication and is left out.",
        ]
    name = f"{chapter_id}-{profile}-forest.png"
    if forest_plot(computed, out_dir / name, f"{chapter_id} · {profile}: declared comparisons"):
        lines += ["", f"![forest plot of the declared comparisons]({name})"]
    lines += settling_lines(computed, wall_s)
    lines += ["", "Why each margin:", ""] + [f"- `{c.comparison.id}`: {c.comparison.why}" for c in computed]
    return lines


def headline_section(computed_all: dict[tuple[str, str], list[Computed]]) -> str:
    """The ledger's table of every chapter's headline comparisons, per profile, with whether each is conclusive."""
    rows = [(key, c) for key, cs in sorted(computed_all.items()) for c in cs if c.comparison.headline]
    if not rows:
        return ""
    lines = [
        "## Headline comparisons",
        "",
        "Each chapter's headline comparisons, computed across its seed runs (details and forest plots on the "
        "evidence pages). *Conclusive* means a difference that matters or practical equivalence.",
        "",
        "| chapter | profile | comparison | claim | verdict | conclusive | seeds | design |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (chapter_id, profile), c in rows:
        verdict = c.verdict if c.result else f"not computed: {escape_cell(c.problem)}"
        lines.append(
            f"| {chapter_id} | {profile} | `{c.comparison.id}` | {c.comparison.claim} | {verdict} "
            f"| {'yes' if c.conclusive else 'no'} | {len(c.seeds)} | {design_summary(c.checks)} |"
        )
    return "\n".join(lines) + "\n"
