"""The chapter's declared comparisons, computed across the seed runs of a profile configuration.

Each papermill run is one seed and records every arm's per-item outcomes once
(:func:`agentpost.record.outcomes.record_outcomes`). A comparison is declared once in the chapter's catalogue
entry (:class:`agentpost.catalogue.Comparison`); this module reads the valid runs of the counted configuration
(all but the seed equal; the one with most seeds, :func:`agentpost.evidence.levels.configurations`), pairs the two arms item by item *by item id* within each seed, checks that both arms
started from the same facts (checkpoint, data, updates, token cap: :class:`agentpost.stats.ArmMeta`, except the
facts the declaration allows to differ), drops seeds that are copies of another seed (every recorded
outcome identical: a copy is not a replication), and calls :func:`agentpost.stats.compare`. Adding seeds to
the same configuration (``agentpost run CHAPTER --seeds 45,46``) extends every comparison.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

from agentpost.catalogue import Chapter, Comparison, chapter as chapter_of
from agentpost.record.hashing import sha256_json
from agentpost.record.outcomes import PREFIX, REQUIRED_FACTS, is_outcomes

#: Verdict classes that settle a question (a difference that matters, or practical equivalence).
CONCLUSIVE_CLASSES = ("matters", "equivalent")


@dataclass
class Computed:
    """One declared comparison computed over a configuration's seed runs (``result`` is ``PairedResult.as_dict()``
    or None with ``problem`` saying why it could not be computed)."""

    chapter: str
    profile: str
    comparison: Comparison
    seeds: list[int] = field(default_factory=list)  # distinct replications used
    copies: dict[int, int] = field(default_factory=dict)  # seed -> the earlier seed it copies
    result: dict | None = None
    problem: str | None = None
    facts: dict = field(default_factory=dict)  # arm -> facts of the first seed (what the arms did)
    checks: list = field(default_factory=list)  # design checks (agentpost.evidence.design_checks.Check)

    @property
    def verdict(self) -> str:
        return self.result["verdict"] if self.result else "not computed"

    @property
    def verdict_class(self) -> str | None:
        return (self.result or {}).get("verdict_class")

    @property
    def conclusive(self) -> bool:
        return self.verdict_class in CONCLUSIVE_CLASSES

    @property
    def design_failures(self) -> list:
        """The design checks that failed or could not be computed (an empty list: the design is sound)."""
        return [c for c in self.checks if not c.ok]


def _seed_outcomes(runs, metric: str) -> dict[int, tuple[dict, str]]:
    """``{seed: (outcomes data of metric, digest of every outcome the run recorded)}`` from the runs' receipts
    (runs without ``metric`` are left out). Two seeds are copies only when *all* their recorded outcomes agree:
    independent runs that converge to the same policy may coincide on one metric, and dropping them would bias.
    Seeds whose outcomes are all near-identical (:func:`agentpost.evidence.validate.copied_seeds`) share a key too."""
    from agentpost.evidence.validate import copied_seeds

    first_of = {seed: group[0] for group in copied_seeds([run.receipt for run in runs]) for seed in group}
    found = {}
    for run in runs:
        metrics = run.receipt.get("metrics", {})
        data = metrics.get(PREFIX + metric)
        seed = int(run.receipt["seed"])
        if is_outcomes(data):
            found[seed] = (data, f"copy of {first_of[seed]}" if seed in first_of else _outcomes_digest(metrics))
    return dict(sorted(found.items()))


_DIGESTS: dict[int, tuple[dict, str]] = {}


def _outcomes_digest(metrics: dict) -> str:
    """Canonical-JSON sha256 of every outcome a run recorded (once per receipt: each comparison asks again)."""
    key = id(metrics)
    if key not in _DIGESTS or _DIGESTS[key][0] is not metrics:
        every = {name: value for name, value in metrics.items() if name.startswith(PREFIX) and is_outcomes(value)}
        _DIGESTS[key] = (metrics, sha256_json(every))
    return _DIGESTS[key][1]


def _arm_meta(facts: dict, like: dict | None, may_differ: tuple[str, ...]):
    from agentpost.stats.paired import ArmMeta

    values: dict[str, Any] = {k: facts.get(k) for k in REQUIRED_FACTS}
    if like is not None:
        values.update({k: like.get(k) for k in may_differ if k in REQUIRED_FACTS})
    return ArmMeta(**values)


def compute_one(chapter_id: str, profile: str, comparison: Comparison, runs) -> Computed:
    """``comparison`` over ``runs`` (the valid runs of one configuration)."""
    from agentpost.stats.paired import ProtocolError, check_meta, compare

    out = Computed(chapter_id, profile, comparison)
    by_seed = _seed_outcomes(runs, comparison.metric)
    if not by_seed:
        out.problem = f"no run records outcomes_{comparison.metric}"
        return out
    a_vals: dict[int, dict] = {}
    b_vals: dict[int, dict] = {}
    seen: dict[str, int] = {}
    for seed, (data, key) in by_seed.items():
        arms = data["arms"]
        missing = [arm for arm in (comparison.a, comparison.b) if arm not in arms]
        if missing:
            out.problem = f"seed {seed}: outcomes_{comparison.metric} has no arm {', '.join(missing)}"
            return out
        if key in seen:
            out.copies[seed] = seen[key]
            continue
        seen[key] = seed
        items = data["items"]
        a_vals[seed] = dict(zip(items, arms[comparison.a]))
        b_vals[seed] = dict(zip(items, arms[comparison.b]))
        if not out.facts:
            out.facts = {arm: data["facts"][arm] for arm in (comparison.a, comparison.b)}
    out.seeds = sorted(a_vals)
    first = by_seed[out.seeds[0]][0]
    meta_a = _arm_meta(first["facts"][comparison.a], None, ())
    meta_b = _arm_meta(first["facts"][comparison.b], first["facts"][comparison.a], comparison.may_differ)
    try:
        for seed in out.seeds[1:]:  # every seed's arms must match too, not only the first
            facts = by_seed[seed][0]["facts"]
            check_meta(
                _arm_meta(facts[comparison.a], None, ()),
                _arm_meta(facts[comparison.b], facts[comparison.a], comparison.may_differ),
            )
        kwargs: dict[str, Any] = {"bounds": comparison.bounds} if comparison.bounds is not None else {}
        result = compare(
            a_vals,  # type: ignore[arg-type]  # Mapping keys are invariant: stats.compare should take Mapping[Any, ...]
            b_vals,  # type: ignore[arg-type]
            meta_a=meta_a,
            meta_b=meta_b,
            higher_is_better=comparison.higher_is_better,
            min_effect=comparison.min_effect,
            shared_items=comparison.shared_items,
            name_a=comparison.a,
            name_b=comparison.b,
            **kwargs,
        )
    except ProtocolError as err:
        hint = (
            " (declare items: nested, or score the same items)"
            if comparison.shared_items and "item" in str(err)
            else ""
        )
        out.problem = f"{err}{hint}"
        return out
    out.result = result.as_dict()
    return out


def configuration_runs(chapter_id: str, profile: str, runs: dict | None = None) -> list:
    """The valid, non-ad-hoc runs of the counted configuration of (chapter, profile)."""
    from agentpost.evidence.levels import collect_runs, counted_configuration

    runs = collect_runs(chapter_id) if runs is None else runs
    return [r for r in counted_configuration(runs.get((chapter_id, profile), [])) if r.valid_ok and not r.adhoc]


def compute(chapter_id: str, profile: str, runs: dict | None = None) -> list[Computed]:
    """Every declared comparison of ``chapter_id`` over the counted configuration of ``profile``, with its design
    checks (:mod:`agentpost.evidence.design_checks`)."""
    from agentpost.evidence.design_checks import attach

    chapter: Chapter = chapter_of(chapter_id)
    group = configuration_runs(chapter_id, profile, runs)
    computed = [compute_one(chapter_id, profile, c, group) for c in chapter.comparisons]
    attach(chapter_id, computed, group)
    return computed


def compute_all(runs: dict) -> dict[tuple[str, str], list[Computed]]:
    """Declared comparisons of every (chapter, profile) in ``runs`` (as :func:`~agentpost.evidence.levels.collect_runs`
    returns them) whose chapter declares any."""
    out = {}
    for chapter_id, profile in sorted(runs, key=str):
        try:
            chapter = chapter_of(chapter_id)
        except (KeyError, TypeError):
            continue
        if chapter.comparisons:
            out[(chapter_id, profile)] = compute(chapter_id, profile, runs)
    return out


def table(computed: Iterable[Computed]) -> list[dict]:
    """Rows for printing and pages: one per comparison, in declaration order."""
    rows = []
    for c in computed:
        r = c.result or {}
        rows.append(
            {
                "comparison": c.comparison.id,
                "claim": c.comparison.claim,
                "b - a": f"{c.comparison.b} - {c.comparison.a}",
                "estimate": r.get("estimate"),
                "ci_low": r.get("ci_low"),
                "ci_high": r.get("ci_high"),
                "mde": r.get("mde"),
                "min_effect": c.comparison.min_effect,
                "verdict": c.verdict,
                "class": c.verdict_class,
                "seeds": len(c.seeds),
                "items": r.get("n_items"),
                "headline": c.comparison.headline,
                "problem": c.problem,
            }
        )
    return rows
