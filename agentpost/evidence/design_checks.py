"""Design checks: is each declared comparison able to answer its question? Computed from the runs.

A verdict can be decisive and still answer the wrong question: trained arms that end below their own starting
point, a model that cannot do the task, a budget where no arm can move, a baseline tuned at a grid edge or on a
handful of successes, two "arms" that are the same run. Every comparison gets five kinds of check:

* **no harm** — each trained arm against its declared starting point (:class:`agentpost.catalogue.design.Reference`),
  paired like the comparison itself; fails when the arm is detectably worse (95% CI wholly on the worse side);
* **competence** — the reference at full resources clears a declared floor on the task;
* **headroom** — the spread between the extreme arms recorded for the metric exceeds the margin, and the baseline
  arm's mean lies farther than the margin from a declared bound (off the floor, below the ceiling);
* **tuning** — no selected knob sits at a grid edge at more than the declared share of seeds, a pick rests on at
  least the declared number of successes, and the two arms chose among equally many candidates;
* **identity** — the two arms' per-item outcomes are not equal item for item at half the seeds or more.

A check that cannot be computed (the runs do not record what it reads) is *missing*, which fails like a failed
check: a design that is not shown to be sound is not read as one. A headline whose checks fail cannot lift its
claim above ``mechanism`` in the ledger (:func:`agentpost.evidence.levels.claim_status`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agentpost.catalogue.design import Competence, Design, Reference, Tuning, design
from agentpost.record.outcomes import PREFIX, is_outcomes

KINDS = ("no harm", "competence", "headroom", "tuning", "identity")


@dataclass(frozen=True)
class Check:
    kind: str  # one of KINDS
    status: str  # "pass" | "fail" | "missing"
    text: str

    @property
    def ok(self) -> bool:
        return self.status == "pass"

    def line(self) -> str:
        return f"{self.kind}: {self.status.upper() if not self.ok else 'ok'}: {self.text}"


def _fmt(x: float) -> str:
    return format(x, ".3g")


def _outcomes(run, metric: str) -> dict | None:
    data = run.receipt["metrics"].get(PREFIX + metric)
    return data if is_outcomes(data) else None


def _arm_seed_means(group, metric: str) -> dict[str, dict[int, float]]:
    """``{arm: {seed: mean over items}}`` of an outcomes metric (NaN items left out)."""
    out: dict[str, dict[int, float]] = {}
    for run in group:
        data = _outcomes(run, metric)
        if data is None:
            continue
        for arm, values in data["arms"].items():
            finite = [float(v) for v in values if v is not None and math.isfinite(float(v))]
            if finite:
                out.setdefault(arm, {})[int(run.receipt["seed"])] = sum(finite) / len(finite)
    return out


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values)


def _scalar(group, name: str) -> dict[int, float]:
    """``{seed: value}`` of a per-seed number the runs record (seeds that do not record it are left out)."""
    out = {}
    for run in group:
        v = run.receipt["metrics"].get(name)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v):
            out[int(run.receipt["seed"])] = float(v)
    return out


# ------------------------------------------------------------------ the five kinds


def headroom(comparison, group) -> list[Check]:
    means = {arm: _mean(s.values()) for arm, s in _arm_seed_means(group, comparison.metric).items()}
    if comparison.a not in means:
        return [Check("headroom", "missing", f"no run records outcomes_{comparison.metric} for {comparison.a}")]
    checks = []
    low, high = min(means, key=lambda arm: means[arm]), max(means, key=lambda arm: means[arm])
    spread = means[high] - means[low]
    status = "pass" if spread > comparison.min_effect else "fail"
    checks.append(
        Check(
            "headroom",
            status,
            f"spread between the extreme arms of {comparison.metric} ({low} {_fmt(means[low])}, {high} "
            f"{_fmt(means[high])}) is {_fmt(spread)} {'>' if status == 'pass' else '<='} the margin "
            f"{_fmt(comparison.min_effect)}" + ("" if status == "pass" else ": no arm can differ by more"),
        )
    )
    if comparison.bounds is not None:
        base = means[comparison.a]
        near = [b for b in comparison.bounds if abs(base - b) <= comparison.min_effect]
        checks.append(
            Check(
                "headroom",
                "fail" if near else "pass",
                f"baseline {comparison.a} at {_fmt(base)}, "
                + (
                    f"within the margin of the bound {_fmt(near[0])}: it cannot be beaten (or lost to) by the margin"
                    if near
                    else f"more than the margin from the bounds {list(comparison.bounds)}"
                ),
            )
        )
    return checks


def identity(comparison, group, share: float) -> list[Check]:
    equal = total = 0
    for run in group:
        data = _outcomes(run, comparison.metric)
        if data is None or comparison.a not in data["arms"] or comparison.b not in data["arms"]:
            continue
        total += 1
        equal += data["arms"][comparison.a] == data["arms"][comparison.b]
    if not total:
        return [Check("identity", "missing", f"no run records both arms in outcomes_{comparison.metric}")]
    failed = equal >= share * total
    return [
        Check(
            "identity",
            "fail" if failed else "pass",
            f"{comparison.b} equals {comparison.a} item for item at {equal}/{total} seeds"
            + (": the comparison tests two copies of one run, not two methods" if failed else ""),
        )
    ]


def no_harm(comparison, group, reference: Reference, declared_on: dict | None = None, memo=None) -> list[Check]:
    """Each trained arm of the comparison against the starting point, read on the metric the reference names for
    it (its direction, margin and bounds those of a comparison declared on that metric: ``declared_on``). ``memo``:
    a dict that keeps each (arm, metric) check for the other comparisons of the same runs."""
    from agentpost.stats.paired import ArmMeta, ProtocolError, compare

    checks = []
    metric = reference.metric_for(comparison.metric)
    arms = dict.fromkeys((comparison.a, comparison.b))
    if metric != comparison.metric:  # read with the direction, margin and bounds declared for that metric
        if not declared_on or metric not in declared_on:
            return [Check("no harm", "missing", f"no comparison is declared on {metric}, which the check reads")]
        comparison = declared_on[metric]
    memo = {} if memo is None else memo
    for arm in arms:
        if arm not in reference.trained:
            continue
        if (arm, metric) in memo:
            checks.append(memo[(arm, metric)])
            continue
        if reference.arm is not None:
            ref_name = reference.arm
            pairs = {}
            for run in group:
                data = _outcomes(run, metric)
                if data and ref_name in data["arms"] and arm in data["arms"]:
                    seed = int(run.receipt["seed"])
                    pairs[seed] = (
                        dict(zip(data["items"], data["arms"][ref_name])),
                        dict(zip(data["items"], data["arms"][arm])),
                    )
            shared = comparison.shared_items
        else:
            ref_name = str(reference.scalar).format(metric=metric)
            ref, mine = _scalar(group, ref_name), _arm_seed_means(group, metric).get(arm, {})
            pairs = {s: ({"mean": ref[s]}, {"mean": mine[s]}) for s in sorted(set(ref) & set(mine))}
            shared = False  # one number per seed: the test is the paired t over seeds
        if len(pairs) < 3:
            checks.append(Check("no harm", "missing", f"{ref_name} is not recorded beside {arm} at 3 or more seeds"))
            memo[(arm, metric)] = checks[-1]
            continue
        meta = ArmMeta("starting point", "same data", 0)
        kwargs = {"bounds": comparison.bounds} if comparison.bounds is not None and shared else {}
        try:
            result = compare(
                {s: p[0] for s, p in pairs.items()},
                {s: p[1] for s, p in pairs.items()},
                meta_a=meta,
                meta_b=meta,
                higher_is_better=comparison.higher_is_better,
                min_effect=comparison.min_effect,
                shared_items=shared,
                name_a=ref_name,
                name_b=arm,
                **kwargs,
            )
        except ProtocolError as err:
            checks.append(Check("no harm", "missing", f"{arm} against {ref_name}: {err}"))
            memo[(arm, metric)] = checks[-1]
            continue
        worse = result.direction == "worse"
        checks.append(
            Check(
                "no harm",
                "fail" if worse else "pass",
                f"{metric}: {arm} − {ref_name} {result.estimate:+.3g} [{result.ci_low:+.3g}, {result.ci_high:+.3g}] over "
                f"{result.n_seeds} seeds: {result.verdict}"
                + (f"; training left {arm} below its starting point" if worse else ""),
            )
        )
        memo[(arm, metric)] = checks[-1]
    return checks


def competence(check: Competence, group) -> Check:
    if check.floor is not None:
        floor, floor_text = check.floor, _fmt(check.floor)
    else:
        recorded = _scalar(group, str(check.floor_metric))
        if not recorded:
            return Check("competence", "missing", f"{check.id}: no run records {check.floor_metric}")
        floor = _mean(recorded.values())
        floor_text = f"{check.floor_metric} {_fmt(floor)}"
    if check.metric is not None:
        recorded = _scalar(group, check.metric)
        values = {check.metric: _mean(recorded.values())} if recorded else {}
    else:
        per_arm = _arm_seed_means(group, str(check.outcomes))
        values = {f"{arm} {check.outcomes}": _mean(per_arm[arm].values()) for arm in check.arms if arm in per_arm}
        if len(values) < len(check.arms):
            values = {}
    if not values:
        return Check("competence", "missing", f"{check.id}: the runs do not record {check.metric or check.outcomes}")
    clears = {k: (v > floor if check.higher_is_better else v < floor) for k, v in values.items()}
    word = "above" if check.higher_is_better else "below"
    shown = ", ".join(f"{k} {_fmt(v)}" for k, v in values.items())
    if all(clears.values()):
        return Check("competence", "pass", f"{check.id}: {shown} {word} the floor {floor_text}")
    return Check("competence", "fail", f"{check.id}: {shown}, not all {word} the floor {floor_text} ({check.why})")


def _product(parameters: dict, names: tuple[str, ...]) -> int | None:
    total = 1
    for name in names:
        value = parameters.get(name)
        if isinstance(value, list):
            total *= len(value)
        elif isinstance(value, int) and not isinstance(value, bool):
            total *= value
        else:
            return None
    return total


def _rows(run, knob: Tuning) -> list[dict]:
    rows = run.receipt["metrics"].get(knob.table) or []
    params = run.receipt["parameters"]
    where = {k: v.format(**params) if isinstance(v, str) else v for k, v in knob.where.items()}
    return [r for r in rows if isinstance(r, dict) and all(r.get(k) == v for k, v in where.items())]


def _picks(run, knob: Tuning, arms: tuple[str, ...]) -> dict[str, float]:
    """``{arm: picked value}`` of one run."""
    metrics = run.receipt["metrics"]
    if knob.picks is None:
        return {r["arm"]: r[knob.grid_key] for r in _rows(run, knob) if r.get("selected") and r.get("arm") in arms}
    if "{arm}" in knob.picks:
        return {arm: metrics[knob.picks.format(arm=arm)] for arm in arms if knob.picks.format(arm=arm) in metrics}
    value = metrics.get(knob.picks)
    if isinstance(value, dict):
        return {arm: value[arm] for arm in arms if arm in value}
    return {arm: value for arm in arms} if isinstance(value, (int, float)) else {}


def _grid(run, knob: Tuning, arm: str) -> list:
    if knob.grid is not None:
        grid = run.receipt["parameters"].get(knob.grid)
        return list(grid) if isinstance(grid, list) else []
    return sorted({r[knob.grid_key] for r in _rows(run, knob) if r.get("arm") == arm and knob.grid_key in r})


def _knob_arms(knob: Tuning, group) -> tuple[str, ...]:
    if knob.arms:
        return tuple(knob.arms)
    for run in group:
        value = run.receipt["metrics"].get(knob.picks or "")
        if isinstance(value, dict):
            return tuple(value)
    return ()


def tuning_budget(comparison, group, knob: Tuning) -> list[Check]:
    """Did both arms choose among equally many candidates? (``knob.candidates``)."""
    mapped = {arm: knob.arms[arm] for arm in (comparison.a, comparison.b) if arm in knob.arms}
    if not mapped:
        return []
    counts: dict[str, set[int]] = {arm: set() for arm in (comparison.a, comparison.b)}
    for run in group:
        rows = run.receipt["metrics"].get(knob.candidates) or []
        for arm in counts:
            counts[arm].add(sum(1 for r in rows if isinstance(r, dict) and r.get("arm") == mapped.get(arm)) or 1)
    if not all(counts.values()):
        return [Check("tuning", "missing", f"no run records {knob.candidates}")]
    shown = ", ".join(f"{arm} among {'/'.join(map(str, sorted(n)))}" for arm, n in counts.items())
    equal = counts[comparison.a] == counts[comparison.b]
    return [
        Check(
            "tuning",
            "pass" if equal else "fail",
            f"{knob.knob} chosen on validation: {shown} candidate(s)"
            + ("" if equal else ": unequal tuning budgets (a best-of-k pick against fewer tries)"),
        )
    ]


def tuning(comparison, group, knob: Tuning, share: float) -> list[Check]:
    if not comparison.metric.startswith(knob.metric_prefix):
        return []
    if knob.candidates is not None:
        return tuning_budget(comparison, group, knob)
    arms = [a for a in _knob_arms(knob, group) if a in (comparison.a, comparison.b)]
    checks = []
    for arm in dict.fromkeys(arms):
        edge = seen = 0
        grid_seen: list = []
        few: list[float] = []
        for run in group:
            pick = _picks(run, knob, (arm,)).get(arm)
            grid = _grid(run, knob, arm)
            if pick is None or len(grid) < 1:
                continue
            seen += 1
            grid_seen = grid
            edge += pick in (min(grid), max(grid))
            if knob.min_successes is not None:
                trials = _product(run.receipt["parameters"], knob.trials)
                chosen = [r for r in _rows(run, knob) if r.get("arm") == arm and r.get("selected")]
                if trials and chosen and isinstance(chosen[0].get(knob.score), (int, float)):
                    few.append(chosen[0][knob.score] * trials)
        if not seen:
            checks.append(Check("tuning", "missing", f"{knob.knob} of {arm}: no run records its pick and grid"))
            continue
        at_edge = edge > share * seen
        checks.append(
            Check(
                "tuning",
                "fail" if at_edge else "pass",
                f"{knob.knob} of {arm} at a grid edge at {edge}/{seen} seeds (grid {grid_seen})"
                + (": the best value may lie outside the grid" if at_edge else ""),
            )
        )
        if knob.min_successes is not None:
            if not few:
                checks.append(Check("tuning", "missing", f"{knob.knob} of {arm}: no selection rows in {knob.table}"))
                continue
            short = sum(1 for n in few if n < knob.min_successes)
            failed = short > share * len(few)
            checks.append(
                Check(
                    "tuning",
                    "fail" if failed else "pass",
                    f"{knob.knob} of {arm} picked on {_fmt(min(few))}-{_fmt(max(few))} validation successes "
                    f"(fewer than {knob.min_successes} at {short}/{len(few)} seeds)"
                    + (": a pick resting on so few successes is close to noise" if failed else ""),
                )
            )
    return checks


def checks_for(comparison, group, declared: Design, declared_on: dict | None = None, memo=None) -> list[Check]:
    """Every design check of one comparison over the runs of its counted configuration (``declared_on``: the
    chapter's comparisons by metric, for a no-harm check read on another metric)."""
    if not group:
        return []
    out = []
    if declared.reference is not None:
        out += no_harm(comparison, group, declared.reference, declared_on, memo)
    out += [competence(c, group) for c in declared.competence]
    out += headroom(comparison, group)
    for knob in declared.tuning:
        out += tuning(comparison, group, knob, declared.edge_share)
    out += identity(comparison, group, declared.identity_share)
    return out


def attach(chapter_id: str, computed: list, group) -> None:
    """Fill ``checks`` of each :class:`~agentpost.evidence.comparisons.Computed` (in place)."""
    declared = design(chapter_id)
    by_metric: dict = {}
    for c in computed:
        by_metric.setdefault(c.comparison.metric, c.comparison)
    memo: dict = {}
    for c in computed:
        c.checks = checks_for(c.comparison, group, declared, by_metric, memo)


def failed(checks: list[Check]) -> list[Check]:
    return [c for c in checks if not c.ok]


def summary(checks: list[Check]) -> str:
    """One short phrase: "design ok" or the kinds that failed."""
    bad = failed(checks)
    if not checks:
        return "design not checked"
    if not bad:
        return "design ok"
    kinds = list(dict.fromkeys(f"{c.kind}{' (missing)' if c.status == 'missing' else ''}" for c in bad))
    return "design check failed: " + ", ".join(kinds)


def design_section(computed: list) -> list[str]:
    """The page section listing each comparison's design checks (a failed one says why, in the run's terms)."""
    from agentpost.evidence.escape import escape_cell

    rows = [c for c in computed if c.checks]
    if not rows:
        return []
    lines = [
        "",
        "#### Design checks",
        "",
        "Can each comparison answer its question? No harm (each trained arm against its starting point), "
        "competence (the model can do the task), headroom (the arms can differ by more than the margin; the "
        "baseline is off the floor and below the ceiling), tuning (no pick at a grid edge at more than the "
        "declared share of seeds, a third unless the chapter says otherwise; picks resting on enough successes; "
        "equal budgets) and identity (the two arms are not one run). A headline whose checks fail keeps its claim "
        "at *mechanism* in the ledger.",
        "",
    ]
    for c in rows:
        lines.append(f"- `{c.comparison.id}`: **{summary(c.checks)}**")
        lines += [f"  - {escape_cell(check.line())}" for check in c.checks if not check.ok]
    return lines
