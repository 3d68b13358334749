"""``agentpost plan``: the seeds x items each declared comparison needs, from a pilot's runs.

The pilot is the counted configuration (most seeds) of a profile (usually ``smoke``). For each declared comparison computed over
it (:mod:`agentpost.evidence.comparisons`), :func:`agentpost.stats.plan` predicts from the pilot's variance
components (the seed variance at its upper confidence bound, never a zero point estimate) the fewest items per seed
that bring the MDE (80% power) down to the target, for each seed count, capped at the items that exist
(:func:`available_items`). The target is the margin, or, where the pilot's MDE is already below it, the MDE whose
interval would exclude the margin if the estimate held (:func:`settling_target`). The predicted wall time uses the pilot receipts' median wall time per run ``w`` at ``n0`` items per
seed: a run's time lies between ``w`` (training dominates: items cost nothing) and ``w * n / n0`` (evaluation
dominates); ``S`` runs take ``S`` times that at ``--jobs 1`` (Colas, Sigaud & Oudeyer 2018; Card et al. 2020).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agentpost.evidence.comparisons import Computed, _seed_outcomes, compute, configuration_runs

if TYPE_CHECKING:
    from agentpost.stats.planner import Plan


@dataclass
class PlanRow:
    computed: Computed
    plan: Plan | None  # None when the comparison could not be computed
    wall_s: float | None  # median wall time of one pilot run


def _pilot_items(result: dict) -> int:
    """Items per seed of the pilot (``n_items`` is per seed when crossed, summed over seeds when nested)."""
    n = int(result["n_items"])
    return n if result["design"] == "crossed" else max(1, round(n / max(1, int(result["n_seeds"]))))


def available_items(runs, metric: str) -> int | None:
    """Items per seed that exist for ``metric``: ``items_available`` where a run's arm facts record it (the split's
    size), else the distinct item ids the runs scored (every item known to exist); None without outcomes."""
    ids: set[str] = set()
    recorded: list = []
    for data, _ in _seed_outcomes(runs, metric).values():
        ids.update(map(str, data["items"]))
        recorded += [f["items_available"] for f in data["facts"].values() if "items_available" in f]
    return int(max(recorded)) if recorded else (len(ids) or None)


def _bounded(result: dict, runs, comparison) -> dict | None:
    """``plan``'s ``bounded`` for a bounded comparison: width, observed difference and the baseline arm's distance
    from its nearer bound (from the runs' outcomes of arm ``a``)."""
    if not result.get("bounds"):
        return None
    lo, hi = result["bounds"]
    values = [v for data, _ in _seed_outcomes(runs, comparison.metric).values() for v in data["arms"][comparison.a]]
    mean_a = sum(values) / len(values)
    toward_middle = 1.0 if mean_a - lo <= hi - mean_a else -1.0  # Bounded's sign: away from the nearer bound
    return {"width": hi - lo, "observed": toward_middle * result["estimate"], "base": min(mean_a - lo, hi - mean_a)}


def plan_chapter(
    chapter_id: str, profile: str, *, max_seeds: int = 20, items: list[int] | None = None, power: float = 0.8
) -> list[PlanRow]:
    from agentpost.stats import plan
    from agentpost.stats.planner import DEFAULT_ITEMS

    group = configuration_runs(chapter_id, profile)
    walls = [float(r.receipt["timing"]["wall_s"]) for r in group]
    wall = statistics.median(walls) if walls else None
    rows = []
    for c in compute(chapter_id, profile):
        if c.result is None:
            rows.append(PlanRow(c, None, wall))
            continue
        n0 = _pilot_items(c.result)
        target = settling_target(c, power)
        p = plan(
            c.result["variance_components"],
            design=c.result["design"],
            min_effect=target if target > 0 else c.comparison.min_effect,  # 0: the estimate sits on the margin
            power=power,
            seeds=range(3, max_seeds + 1),
            items=sorted(set(items or DEFAULT_ITEMS) | {n0}),
            pilot=(int(c.result["n_seeds"]), n0),
            max_items=available_items(group, c.comparison.metric),
            bounded=_bounded(c.result, group, c.comparison),
        )
        rows.append(PlanRow(c, p, wall))
    return rows


def minutes(wall_s: float | None, seeds: int, items: int, pilot_items: int) -> tuple[float, float] | None:
    """(low, high) predicted minutes for ``seeds`` runs at ``items`` per seed, from the pilot's wall time."""
    if wall_s is None:
        return None
    return seeds * wall_s / 60, seeds * wall_s * max(1.0, items / pilot_items) / 60


def _why(p) -> str:
    """Why no design reaches the target: the shared items' variance when even 10^6 seeds at the most items fall short,
    else the seeds."""
    from agentpost.stats.planner import predict

    if p.max_items and p.design == "crossed":
        limit = predict(p.assumed, 10**6, p.max_items, design=p.design, alpha=p.alpha, power=p.power)["mde"]
        if limit > p.min_effect:
            return (
                f"the shared items' variance alone keeps the MDE at {limit:.3g} with all {p.max_items} items, however "
                "many seeds (more items would be needed)"
            )
    return "raise --max-seeds, or, where the seed variance dominates, reduce it (e.g. train longer)"


def render(rows: list[PlanRow], chapter_id: str, profile: str, *, show: int = 4) -> str:
    """Plain-text report: per comparison, the pilot's MDE and the smallest designs that reach the target."""
    out = [
        f"{chapter_id}: plan from the pilot runs of profile {profile!r} (80% power, alpha 0.05; seed variance at "
        "its upper confidence bound; predicted wall time at --jobs 1: low = items cost nothing, high = run time "
        "grows with items)"
    ]
    for row in rows:
        c = row.computed
        head = (
            f"- {c.comparison.id} ({c.comparison.claim}{', headline' if c.comparison.headline else ''}; margin "
            f"{c.comparison.min_effect:.3g})"
        )
        if row.plan is None or c.result is None:  # plan_chapter plans exactly the computed comparisons
            out.append(f"{head}: no pilot: {c.problem}")
            continue
        if c.verdict_class == "no_information":
            out.append(
                f"{head}: identical arms in the pilot (every difference 0, verdict {c.verdict}): its variances are all "
                "0 and predict nothing; no design planned"
            )
            continue
        n0 = _pilot_items(c.result)
        pilot = row.plan.pilot
        assert pilot is not None  # plan_chapter always passes the pilot's design
        vc, used = row.plan.components, row.plan.assumed
        target = row.plan.min_effect
        aim = (
            f"target MDE {target:.3g}"
            + (" (the margin)" if target == c.comparison.min_effect else " (so the CI would exclude the margin)")
            + (f"; at most {row.plan.max_items} items per seed exist" if row.plan.max_items else "")
        )
        out.append(
            f"{head}: pilot {pilot['seeds']} seeds x {n0} items -> MDE {pilot['mde']:.3g} at the assumed variance "
            f"(observed {c.result['mde']:.3g}; verdict {c.verdict}); variance seed {vc['seed'] or 0:.3g} "
            f"(upper bound used: {used['seed']:.3g}), item {vc['item'] or 0:.3g}, residual "
            + ("-" if vc["residual"] is None else f"{vc['residual']:.3g}")
            + f"; {aim}"
        )
        if not row.plan.designs:
            out.append(
                f"    no design up to --max-seeds seeds x the items that exist reaches the target: {_why(row.plan)}"
            )
            continue
        for d in row.plan.designs[:show]:
            span = minutes(row.wall_s, d["seeds"], d["items"], n0)
            time = f"; about {span[0]:.0f}-{span[1]:.0f} min" if span else ""
            out.append(f"    {d['seeds']:>3} seeds x {d['items']:>6} items per seed -> MDE {d['mde']:.3g}{time}")
    return "\n".join(out)


#: Seed counts the evidence pages consider when they say what would settle a comparison (a geometric grid).
SETTLE_SEEDS = (*range(3, 11), 12, 16, 20, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)
#: Item multiples of the recorded items per seed the evidence pages consider.
SETTLE_ITEM_FACTORS = (1, 4)


@dataclass
class Settling:
    """The fewest seeds (on :data:`SETTLE_SEEDS`) at ``items`` per seed whose predicted MDE reaches ``target``
    (``seeds`` None: none up to the grid's end), with the predicted hours at ``--jobs 2`` (None: no run time)."""

    items: int
    target: float
    seeds: int | None
    mde: float | None
    hours_jobs2: tuple[float, float] | None


def settling_target(computed: Computed, power: float = 0.8, alpha: float = 0.05) -> float:
    """The MDE an inconclusive comparison needs. Above its margin: the margin (an effect of that size becomes
    detectable). At or below it (a detectable difference whose CI straddles the margin): the MDE whose 95% CI
    half-width, about ``MDE * z_{1-a/2} / (z_{1-a/2} + z_power)``, is ``| |estimate| - margin |``, so the CI
    would exclude the margin if the estimate held."""
    from statistics import NormalDist

    margin, result = computed.comparison.min_effect, computed.result
    if result is None:
        raise ValueError(f"comparison {computed.comparison.id!r} was not computed: {computed.problem}")
    if result["mde"] > margin:
        return margin
    z_a, z_b = NormalDist().inv_cdf(1 - alpha / 2), NormalDist().inv_cdf(power)
    return abs(abs(result["estimate"]) - margin) * (z_a + z_b) / z_a


def what_would_settle(computed: Computed, wall_s: float | None, power: float = 0.8) -> list[Settling]:
    """For an inconclusive comparison, the designs that would settle it (:func:`settling_target`), from the variance
    components of the very runs it was computed on (:func:`agentpost.stats.plan`); empty for a conclusive one or one
    that could not be computed."""
    from agentpost.stats import plan

    if computed.result is None or computed.conclusive:
        return []
    n0, target = _pilot_items(computed.result), settling_target(computed, power)
    if not target > 0:
        return []
    out = []
    for factor in SETTLE_ITEM_FACTORS:
        p = plan(
            computed.result["variance_components"],
            design=computed.result["design"],
            min_effect=target,
            power=power,
            seeds=SETTLE_SEEDS,
            items=[n0 * factor],
            pilot=(int(computed.result["n_seeds"]), n0),
        )
        first = p.designs[0] if p.designs else None
        span = minutes(wall_s, first["seeds"], n0 * factor, n0) if first else None
        out.append(
            Settling(
                n0 * factor,
                target,
                first["seeds"] if first else None,
                first["mde"] if first else None,
                span and (span[0] / 120, span[1] / 120),
            )
        )
    return out
