"""Evidence levels, derived from receipts and test outcomes (never typed; book/evidence-levels.md).

* **mechanism** — every test tied to the claim (``@pytest.mark.claim``) passed, and there is at least one;
* **diagnostic** — a run configuration of a non-synthetic chapter with >= ``min_seeds`` successful, valid
  seeds whose receipts all record the claim's metrics;
* **gpu-diagnostic** — the same from runs on an allowed CUDA device that pass :func:`gpu_evidence_problems`;
* **reproduction** — the same from a profile named ``reproduction`` (the paper's models, data and budgets).

Only profile runs count: ad-hoc runs (made with ``-p`` overrides) are listed apart and never become a profile's
evidence. The test outcomes come from the claims report that the test run writes
(:mod:`agentpost.evidence.claims_plugin`); this module only reads it.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from agentpost.catalogue import Chapter, Claim, chapters
from agentpost.errors import UsageError
from agentpost.errors import brief
from agentpost.evidence.paired_table import is_paired, paired_outcome
from agentpost.evidence import certificates
from agentpost.evidence import receipt as rc
from agentpost.record.recording import format_value
from agentpost.evidence.validate import Report, catalogue_profile, check_run, copied_seeds, gpu_evidence_problems
from agentpost.project import config, project_root

LEVELS = ("mechanism", "diagnostic", "gpu-diagnostic", "reproduction")
#: Where the claims plugin writes the outcomes of claim-marked tests by default (relative to the project root).
CLAIMS_REPORT = "_build/claims-report.json"


@dataclass
class Run:
    path: Path
    receipt: dict
    problems: list = field(default_factory=list)
    stale: list = field(default_factory=list)
    malformed: str | None = None  # why the receipt is no receipt of the catalogue (Report.malformed)
    #: The certificates that make this stale run current (agentpost.evidence.certificates.merge).
    certified_by: list = field(default_factory=list)

    @property
    def current_stale(self) -> list:
        """What makes the run old now: its stale inputs, unless a certificate re-certified its batch."""
        return [s for s in self.stale if s == "schema_version"] if self.certified_by else self.stale  # never certified

    @classmethod
    def from_report(cls, report: Report) -> "Run":
        return cls(report.path, report.receipt, report.problems, report.stale, report.malformed)

    @property
    def valid_ok(self) -> bool:
        return not self.problems and self.receipt.get("status") == "ok"

    @property
    def adhoc(self) -> bool:
        return self.receipt.get("kind") != "profile"


#: The key of runs whose receipt and folder name no (chapter, profile) of the catalogue.
UNKNOWN = ("?", "?")


def run_identity(report: Report) -> tuple[str, str]:
    """The (chapter, profile) a run is listed under. A valid run's receipt says it (validation checked both
    against the catalogue); an invalid run is believed no further than its folder, and only where the folder
    names a catalogue chapter and profile: a receipt's text never becomes a key, heading or file name."""
    if not report.problems:
        return report.receipt["chapter"], report.receipt["profile"]
    try:
        parts = report.path.resolve().relative_to(rc.runs_root().resolve()).parts
    except ValueError:
        parts = ()
    if len(parts) >= 2 and catalogue_profile(parts[0], parts[1]):
        return parts[0], parts[1]
    return UNKNOWN


def group_runs(reports: list[Report]) -> tuple[dict[tuple[str, str], list[Run]], dict[tuple[str, str], list[Run]]]:
    """(profile runs, ad-hoc runs), each keyed by :func:`run_identity`; a receipt claiming ad-hoc-ness or not is
    only believed when the run validates (an invalid run is listed with the profile runs, never counted)."""
    profile: dict[tuple[str, str], list[Run]] = defaultdict(list)
    adhoc: dict[tuple[str, str], list[Run]] = defaultdict(list)
    for report in reports:
        run = Run.from_report(report)
        (adhoc if run.adhoc and not run.problems else profile)[run_identity(report)].append(run)
    return dict(profile), dict(adhoc)


def collect_runs(chapter_id: str | None = None, *, adhoc: bool = False) -> dict[tuple[str, str], list[Run]]:
    """Every run under the runs root, each validated once, keyed by (chapter, profile): profile runs, or the
    ad-hoc runs with ``adhoc=True``."""
    root = rc.runs_root() / chapter_id if chapter_id else rc.runs_root()
    profile, ad = group_runs([check_run(d) for d in rc.run_dirs(root)])
    return ad if adhoc else profile


def malformed_message(runs: dict[tuple[str, str], list[Run]]) -> str | None:
    """One line naming the run folders whose receipt could not be read (at most five, then a count), or None."""
    bad = sorted((r for group in runs.values() for r in group if r.malformed), key=lambda r: r.path)
    if not bad:
        return None
    named = "; ".join(f"{r.path.as_posix()}/{rc.RECEIPT_NAME} ({r.malformed[:100]})" for r in bad[:5])  # type: ignore[index]  # bad holds malformed runs only
    more = f"; and {len(bad) - 5} more" if len(bad) > 5 else ""
    return f"{len(bad)} malformed receipt(s), listed as invalid and never counted: {named}{more}"


def configurations(runs: list[Run]) -> list[list[Run]]:
    """The valid runs grouped by configuration (all but the seed equal), the counted one first.

    Configurations that re-certification linked are one (:func:`agentpost.evidence.certificates.merge`: one run per
    seed, the re-run where a seed was re-run). The counted configuration is the one with the most valid seeds, the
    most recently finished among equals: a stray run with other code or parameters starts a configuration of its
    own and cannot hide a larger committed one (the ledger lists the others it does not count)."""
    groups: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        if not run.problems:
            groups[rc.configuration_key(run.receipt)].append(run)
    return sorted(
        certificates.merge(groups),
        reverse=True,
        key=lambda g: (len({r.receipt["seed"] for r in g}), max(r.receipt["timing"]["end"] for r in g)),
    )


def counted_configuration(runs: list[Run]) -> list[Run]:
    """The valid runs of the configuration a profile's evidence is read from (:func:`configurations`)."""
    groups = configurations(runs)
    return groups[0] if groups else []


def read_claims_report(path: Path | None = None) -> dict:
    """Outcomes of claim-marked tests, as the test run wrote them; a missing or unreadable report is a usage error."""
    path = Path(path) if path is not None else project_root() / CLAIMS_REPORT
    if not path.is_file():
        raise UsageError(
            f"no claims report at {path}: run the tests first (`make test`, or `pytest -m claim "
            f"tests/unit tests/kernels --claims-report {CLAIMS_REPORT}`), or pass --claims-report FILE"
        )
    try:
        report = json.loads(path.read_text())
    except ValueError as err:
        raise UsageError(f"claims report {path} is not JSON: {err}") from None
    counts = ("passed", "failed")
    for key, outcome in report.items() if isinstance(report, dict) else [(None, None)]:
        if not (
            isinstance(outcome, dict)
            and all(type(outcome.get(c)) is int and outcome[c] >= 0 for c in counts)  # a bool is no count
        ):
            raise UsageError(
                f"claims report {path} must map '<chapter>/<claim>' to {{'passed': n, 'failed': n, ...}} "
                f"(n a count); {'it is not a mapping' if key is None else f'entry {brief(key)} is {brief(outcome)}'}"
            )
    return report


@dataclass
class ClaimStatus:
    chapter: Chapter
    claim: Claim
    levels: dict[str, bool]
    notes: dict[str, str]

    @property
    def reached(self) -> str:
        reached = [lvl for lvl in LEVELS if self.levels[lvl]]
        return reached[-1] if reached else "none"


def _has_metrics(group: list[Run], metrics: tuple[str, ...]) -> bool:
    return bool(metrics) and all(all(m in r.receipt["metrics"] for m in metrics) for r in group)


def _outcome(group: list[Run], metrics: tuple[str, ...]) -> str:
    """What the claim's metrics say across the seeds' runs: verdict-like values as recorded, numbers as their mean.

    A level says evidence exists; the outcome says whether it supports the claim, contradicts it or is null.
    """
    parts = []
    for m in metrics:
        values = [r.receipt["metrics"][m] for r in sorted(group, key=lambda r: r.receipt["seed"])]
        if all(is_paired(v) for v in values):
            parts.append(f"{m} = " + " / ".join(paired_outcome(v) for v in values))
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            parts.append(f"{m} = {format_value(sum(values) / len(values))} (mean of {len(values)} seeds)")
        elif all(
            isinstance(v, (str, bool)) or (isinstance(v, dict) and all(isinstance(x, str) for x in v.values()))
            for v in values
        ):
            shown = {json.dumps(v, sort_keys=True) for v in values}
            text = " / ".join(format_value(v) for v in values) if len(shown) > 1 else format_value(values[0])
            parts.append(f"{m} = {text}")
    return "; ".join(parts)


def _declared_outcome(computed: list) -> str:
    """The claim's declared comparisons as the ledger's outcome note: verdict class, estimate, CI and margin."""
    parts = []
    for c in computed:
        if c.result is None:
            parts.append(f"{c.comparison.id}: not computed ({c.problem})")
            continue
        r = c.result
        parts.append(
            f"{c.comparison.id}: {c.verdict} ({c.comparison.b} − {c.comparison.a} {r['estimate']:+.3g}, "
            f"95% CI [{r['ci_low']:+.3g}, {r['ci_high']:+.3g}], margin {c.comparison.min_effect:.3g}, "
            f"{len(c.seeds)} seeds; {'conclusive' if c.conclusive else 'inconclusive'})"
        )
    return "; ".join(parts)


@dataclass
class _Reading:
    """What one profile's counted configuration says about a claim (one candidate for the ledger's row)."""

    profile: str
    reached: set
    seeds: list
    current: bool
    note: str
    outcome: str
    blocked: str = ""  # why design checks keep the claim at mechanism ("" when they pass)

    @property
    def strength(self) -> tuple:
        """Orders readings: the higher level, current over stale, more replications. Design checks do not order
        them: a weaker profile whose checks pass never stands in for a stronger one whose checks fail."""
        top = max((LEVELS.index(lvl) for lvl in self.reached), default=0)
        return (top, self.current, len(self.seeds), self.profile)

    def short(self) -> str:
        level = "blocked" if self.blocked else max(self.reached, key=LEVELS.index)
        return f"{self.profile}: {level}, {len(self.seeds)} seeds" + (f" ({self.outcome})" if self.outcome else "")


def _blocked(chapter: Chapter, mine: list) -> str:
    """Why the claim's headline comparisons cannot lift it above mechanism (design checks that failed), or ""."""
    from agentpost.evidence.design_checks import summary

    bad = [c for c in mine if c.comparison.headline and c.design_failures]
    return "; ".join(f"{c.comparison.id}: {summary(c.checks)}" for c in bad)


def _reading(chapter, claim, profile, chapter_runs, mine, min_seeds) -> _Reading | str | None:
    """One profile's reading of the claim; a string when its runs cannot count (why), None when it has none."""
    group = [r for r in counted_configuration(chapter_runs) if r.valid_ok and not r.adhoc]
    seeds = {r.receipt["seed"] for r in group}
    if mine:  # declared comparisons count distinct replications only (copies are left out)
        seeds = set().union(*(c.seeds for c in mine))
    if len(seeds) < min_seeds or not _has_metrics(group, claim.metrics):
        return None
    receipts = [r.receipt for r in group]
    if copies := copied_seeds(receipts):
        return f"profile {profile}: seeds {copies} recorded identical metrics (copies); never counted"
    if chapter.synthetic or claim.synthetic:
        return "synthetic data: never counts as a diagnostic"
    on_gpu = not gpu_evidence_problems(receipts)
    level = "reproduction" if profile == "reproduction" and on_gpu else "gpu-diagnostic" if on_gpu else "diagnostic"
    # A GPU (or reproduction) configuration is also the diagnostic run at a larger scale.
    reached = (
        {"diagnostic"} | ({"gpu-diagnostic"} if on_gpu else set()) | ({level} if level == "reproduction" else set())
    )
    stale = sorted({s.split(".")[-1] for r in group for s in r.current_stale})
    certified = sorted({c for r in group for c in r.certified_by})
    note = f"profile {profile}, seeds {sorted(seeds)}" + (
        f", STALE: made with older {', '.join(stale)}"
        if stale
        else f", re-certified on the current code ({', '.join(certified)})"
        if certified
        else ""
    )
    outcome = _declared_outcome(mine) or _outcome(group, claim.metrics)
    return _Reading(profile, reached, sorted(seeds), not stale, note, outcome, _blocked(chapter, mine))


def claim_status(
    chapter: Chapter, claim: Claim, tests: dict, runs: dict[tuple[str, str], list[Run]], computed: dict | None = None
) -> ClaimStatus:
    """The levels a claim reached, read from its strongest profile (GPU over CPU, current over stale, more
    replications over fewer; when its headline design checks fail the claim stays at mechanism), with every other
    profile's reading listed beside it. Independent of the order of ``runs``."""
    levels = dict.fromkeys(LEVELS, False)
    notes = {}
    t = tests.get(f"{chapter.id}/{claim.id}")
    if t:
        levels["mechanism"] = t["passed"] > 0 and t["failed"] == 0
        notes["mechanism"] = f"{t['passed']} passed, {t['failed']} failed"
    else:
        notes["mechanism"] = "no test tied to this claim"
    min_seeds = config()["min_seeds"]
    readings, refusals = [], []
    for (cid, profile), chapter_runs in sorted(runs.items()):
        if cid != chapter.id:
            continue
        mine = [c for c in (computed or {}).get((cid, profile), []) if c.comparison.claim == claim.id]
        found = _reading(chapter, claim, profile, chapter_runs, mine, min_seeds)
        if isinstance(found, str):
            refusals.append(found)
        elif found is not None:
            readings.append(found)
    if refusals:
        notes["diagnostic"] = "; ".join(refusals)
    if readings:
        best, *others = sorted(readings, key=lambda r: r.strength, reverse=True)
        if best.blocked:
            notes["diagnostic"] = (
                f"{best.note}: NOT COUNTED, the headline's design checks fail ({best.blocked}); the claim stays at "
                "mechanism until the experiment can answer it"
            )
        else:
            for lvl in best.reached:
                levels[lvl] = True
                notes[lvl] = best.note
        if best.outcome:
            notes["outcome"] = best.outcome
        if others:
            notes["other profiles"] = "; ".join(r.short() for r in others)
    if not claim.metrics:
        notes.setdefault("diagnostic", "no metric is tied to this claim")
    return ClaimStatus(chapter, claim, levels, notes)


def ledger_rows(tests: dict, runs, computed: dict | None = None) -> list[ClaimStatus]:
    return [claim_status(ch, cl, tests, runs, computed) for ch in chapters() for cl in ch.claims]
