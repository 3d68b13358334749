"""How the book shows a chapter's declared comparisons: one table and one forest plot per profile.

The table has four columns (comparison, estimate with its 95% CI, MDE against the margin, verdict) so that the
verdict stays inside the page's column; the arms, claim, seeds × items and why each margin follow as a list.
The forest plot draws every comparison on one axis in units of its own smallest effect of interest, oriented so
that "better" is to the right: the dot is the estimate, the bar its 95% CI, the grey band the region of practical
equivalence [-1, 1]; colour gives the verdict (better and worse opposite hues, a legend names each). A reader sees
at once which comparisons matter, which way, which are equivalent and which cannot tell.
"""

from __future__ import annotations

from pathlib import Path

from agentpost.evidence.comparisons import Computed
from agentpost.evidence.design_checks import design_section, summary as design_summary
from agentpost.evidence.escape import escape_cell

#: Colour of each verdict in the forest plot, by the verdict's label (:func:`agentpost.stats.paired` names them):
#: better and worse are opposite hues, their "may be negligible" forms paler, equivalence blue, the rest grey-brown
#: (a colour-blind-safe diverging palette, ColorBrewer PuOr/RdBu).
VERDICT_COLOURS = {
    "better": "#1b7837",
    "better, may be negligible": "#7fbf7b",
    "worse": "#b2182b",
    "worse, may be negligible": "#ef8a62",
    "equivalent": "#2166ac",
    "inconclusive": "#e08214",
    "no information": "#878787",
}
#: Colour of a verdict the palette does not name (a newer label): never one of the named colours.
OTHER_COLOUR = "#542788"


def verdict_kind(verdict: str) -> str:
    """The legend's name of a verdict label: the label itself, but "equivalent, detectably better/worse" is
    equivalent (inside the margin; the plot's axis label keeps its direction)."""
    return "equivalent" if verdict.startswith("equivalent") else verdict


def verdict_colour(verdict: str) -> str:
    """The forest plot's colour of a verdict label (``better``, ``worse, may be negligible``, ``equivalent``, ...)."""
    return VERDICT_COLOURS.get(verdict_kind(verdict), OTHER_COLOUR)


def _num(x, spec: str = "+.3g") -> str:
    """A number as the tables show it; None or NaN (nothing computed) as a dash, never ``nan``."""
    return "—" if x is None or x != x else format(x, spec)


def seed_list(seeds) -> str:
    """Seeds as a reader takes them in: runs of consecutive seeds as ranges (``42–125``, ``7, 9–11``)."""
    seeds = sorted(set(seeds))
    spans: list[list[int]] = []
    for s in seeds:
        if spans and s == spans[-1][1] + 1:
            spans[-1][1] = s
        else:
            spans.append([s, s])
    return ", ".join(str(a) if a == b else f"{a}, {b}" if b == a + 1 else f"{a}–{b}" for a, b in spans)


def comparison_table(computed: list[Computed]) -> list[str]:
    """The declared comparisons as a table narrow enough for the page's column: comparison, estimate with its 95%
    CI, MDE against the margin, verdict (the rest is in :func:`comparison_details`). Catalogue text and numbers; a
    problem's text, which may quote a run's item ids, is escaped."""
    lines = [
        "| comparison | estimate [95% CI] | MDE@80% (margin) | verdict |",
        "|---|---|---|---|",
    ]
    for c in computed:
        r = c.result or {}
        star = " ★" if c.comparison.headline else ""
        estimate = f"{_num(r.get('estimate'))} [{_num(r.get('ci_low'))}, {_num(r.get('ci_high'))}]" if r else "—"
        verdict = f"**{c.verdict}**" if r else f"not computed: {escape_cell(c.problem)}"
        lines.append(
            f"| `{c.comparison.id}`{star} | {estimate} | {_num(r.get('mde'), '.3g')} ({c.comparison.min_effect:.3g}) "
            f"| {verdict} |"
        )
    return lines


def comparison_details(computed: list[Computed]) -> list[str]:
    """One line per declared comparison with what its table row leaves out: the arms (b − a), the claim,
    seeds × items, the margin and why that margin."""
    details = ["Each comparison (b − a), its claim, seeds × items and why its margin:", ""]
    for c in computed:
        r = c.result or {}
        shape = f"{r['n_seeds']} seeds × {r['n_items']} {c.comparison.items} items" if r else f"{len(c.seeds)} seed(s)"
        details.append(
            f"- `{c.comparison.id}` ({c.comparison.claim}): {c.comparison.b} − {c.comparison.a}, {shape}; "
            f"margin {c.comparison.min_effect:.3g}: {c.comparison.why}"
        )
    return details


def forest_plot(computed: list[Computed], path: Path, title: str) -> bool:
    """Draw the computed comparisons into ``path`` (PNG, 7.5 in = 750 px wide: the page's column); False when none
    was computed. Colour gives the verdict (:data:`VERDICT_COLOURS`); the legend names each one drawn."""
    rows = [c for c in computed if c.result]
    if not rows:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    legend_rows = -(-(len({c.verdict for c in rows}) + 1) // 3)  # three entries a row, the band included
    height = 0.45 * len(rows) + 1.2 + 0.22 * legend_rows
    fig, ax = plt.subplots(figsize=(7.5, height))
    ax.axvspan(-1, 1, color="0.9", zorder=0)
    ax.axvline(0, color="0.5", lw=0.8)
    drawn: dict[str, str] = {}
    for y, c in enumerate(reversed(rows)):
        r, sign = c.result or {}, 1.0 if c.comparison.higher_is_better else -1.0
        scale = sign / c.comparison.min_effect
        lo, hi = sorted((r["ci_low"] * scale, r["ci_high"] * scale))
        colour = drawn.setdefault(verdict_kind(c.verdict), verdict_colour(c.verdict))
        ax.plot([lo, hi], [y, y], color=colour, lw=2)
        ax.plot(r["estimate"] * scale, y, "o", color=colour)
    ax.set_yticks(range(len(rows)), [f"{c.comparison.id} ({c.verdict})" for c in reversed(rows)], fontsize=8)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlabel("estimate / margin (right: better for b)", fontsize=8)
    ax.set_title(title, fontsize=9)
    ax.tick_params(axis="x", labelsize=8)
    order = [v for v in VERDICT_COLOURS if v in drawn] + [v for v in drawn if v not in VERDICT_COLOURS]
    handles: list = [Line2D([], [], color=drawn[v], marker="o", lw=2, label=v) for v in order]
    handles.append(Patch(color="0.9", label="practical equivalence (± margin)"))
    fig.legend(handles=handles, fontsize=7, loc="lower center", ncol=min(len(handles), 3), frameon=False)
    fig.tight_layout(rect=(0, (0.22 * legend_rows + 0.05) / height, 1, 1))
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
        result = c.result or {}
        said = []
        for o in options:
            if o.seeds is None:
                said.append(f"no seed count up to {SETTLE_SEEDS[-1]} at {o.items} items per seed")
                continue
            time = ""
            if o.hours_jobs2 is not None:
                low, high = o.hours_jobs2
                time = f" (about {_hours(low)} at `--jobs 2`" + (
                    f", up to {_hours(high)} if evaluation dominates)" if high > low * 1.05 else ")"
                )
            said.append(f"{o.seeds} seeds at {o.items} items per seed{time}")
        goal = (
            "MDE down to the margin"
            if result["mde"] > c.comparison.min_effect
            else "a 95% CI that excludes the margin, if the estimate holds"
        )
        lines.append(
            f"- `{c.comparison.id}` (MDE {result['mde']:.3g}, margin {c.comparison.min_effect:.3g}; "
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
        f"({seed_list(seeds)}); ★ marks a headline comparison. The margin is the smallest effect of interest: a difference "
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
    lines += [""] + comparison_details(computed)
    lines += settling_lines(computed, wall_s)
    return lines


def headline_section(computed_all: dict[tuple[str, str], list[Computed]]) -> str:
    """The ledger's table of every chapter's headline comparisons, per profile, with whether each is conclusive and
    its design checks; five columns, so the verdict stays inside the page's column."""
    rows = [(key, c) for key, cs in sorted(computed_all.items()) for c in cs if c.comparison.headline]
    if not rows:
        return ""
    lines = [
        "## Headline comparisons",
        "",
        "Each chapter's headline comparisons, computed across its seed runs (details and forest plots on the "
        "evidence pages). *Conclusive* means a difference that matters or practical equivalence.",
        "",
        "| chapter · profile | comparison (claim) | verdict | conclusive | design |",
        "|---|---|---|---|---|",
    ]
    for (chapter_id, profile), c in rows:
        verdict = c.verdict if c.result else f"not computed: {escape_cell(c.problem)}"
        lines.append(
            f"| {chapter_id} · {profile}, {len(c.seeds)} seeds | `{c.comparison.id}` ({c.comparison.claim}) "
            f"| {verdict} | {'yes' if c.conclusive else 'no'} | {design_summary(c.checks)} |"
        )
    return "\n".join(lines) + "\n"
