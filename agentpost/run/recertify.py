"""``agentpost recertify CHAPTER --profile P``: re-execute a sample of a stale batch's seeds on the current code and,
where every value reproduces, certify the batch current (:mod:`agentpost.evidence.certificates` has the rule)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from agentpost.errors import UsageError
from agentpost.evidence import certificates, run_store
from agentpost.evidence import receipt as rc
from agentpost.evidence.levels import Run, collect_runs, configurations
from agentpost.evidence.validate import check_run
from agentpost.project import project_root
from agentpost.run.batch import run_batch
from agentpost.run.params import plan_runs


@dataclass
class Outcome:
    """What re-certification found: the certificate written (None when something differed or nothing was stale)."""

    certificate: Path | None
    differences: dict[int, list[str]] = field(default_factory=dict)
    message: str = ""


def run_notebook(run_dir: Path):
    """A run's executed notebook with its per-item outcomes read back (:func:`run_store.inflate`, from the stored
    receipt's references; a schema 4 notebook holds them inline)."""
    nb = nbformat.reads(run_store.read_notebook_text(run_store.notebook_path(run_dir)), as_version=4)
    stored = rc.load_raw(Path(run_dir) / rc.RECEIPT_NAME)["metrics"]
    return run_store.inflate(nb, stored, run_store.read_outcomes_file(run_dir))[0]


def _current_runs(chapter_id: str, profile: str, specs) -> dict[int, Path]:
    """``{seed: folder}`` of valid profile runs made with the current code and parameters at the planned seeds (an
    earlier re-certification's re-runs): compared as they are instead of run again."""
    wanted = {s.seed: s for s in specs}
    found = {}
    for run in collect_runs(chapter_id).get((chapter_id, profile), []):
        spec = wanted.get(run.receipt.get("seed"))
        if (
            spec is not None
            and run.valid_ok
            and not run.stale
            and not run.adhoc
            and run.receipt["hashes"]["parameters"] == spec.hashes["parameters"]
        ):
            found[spec.seed] = run.path
    return found


def _stale_batch(chapter_id: str, profile: str) -> list:
    groups = configurations(collect_runs(chapter_id).get((chapter_id, profile), []))
    if not groups:
        raise UsageError(f"{chapter_id}/{profile} has no valid run to re-certify (`agentpost list`)")
    return groups[0]


def recertify(
    chapter_id: str, profile: str, seeds: list[int] | None = None, *, jobs: int = 1, backend="local"
) -> Outcome:
    """Re-run ``seeds`` of the counted batch's stale runs and certify each configuration they come from where every
    re-run reproduces the old run at its seed; raises :class:`UsageError` before any work when the batch cannot be
    re-certified (nothing stale, seeds not in it, its data or parameters changed).

    A counted batch that an earlier certificate linked holds runs of several configurations (the old runs and the
    re-runs that certified them); each is certified on its own seeds. Without ``seeds``, each stale configuration
    re-runs its own first seeds (:func:`certificates.default_seeds`)."""
    batch = _stale_batch(chapter_id, profile)
    stale = {r.receipt["seed"]: r for r in batch if r.current_stale}
    if not stale:
        return Outcome(None, message=f"{chapter_id}/{profile}: the counted batch is current; nothing to re-certify")
    if missing := sorted(set(seeds or ()) - set(stale)):
        raise UsageError(
            f"seeds {missing} are not stale seeds of {chapter_id}/{profile}'s counted batch (stale: {sorted(stale)})"
        )
    groups: dict[str, dict[int, Run]] = {}
    for seed, run in sorted(stale.items()):
        groups.setdefault(rc.configuration_key(run.receipt), {})[seed] = run
    plans = []
    for runs in groups.values():
        chosen = (
            [s for s in seeds if s in runs] if seeds else certificates.default_seeds([r.receipt for r in runs.values()])
        )
        if chosen:
            plans.append({s: runs[s] for s in chosen})
    for old in plans:
        _check_certifiable(chapter_id, profile, old)
    outcomes = [_certify(chapter_id, profile, old, jobs=jobs, backend=backend) for old in plans]
    return Outcome(
        outcomes[-1].certificate if all(o.certificate for o in outcomes) else None,
        {seed: found for o in outcomes for seed, found in o.differences.items()},
        "\n".join(o.message for o in outcomes),
    )


def _check_certifiable(chapter_id: str, profile: str, old: dict) -> None:
    """Refuse, before any work, seeds whose data or parameters changed since they ran (re-certification covers
    code only)."""
    if data := sorted(s for s, r in old.items() if "hashes.data" in r.stale):
        raise UsageError(
            f"seeds {data}: the data changed since they ran; re-certification covers code only: re-run "
            f"the batch (`agentpost run {chapter_id} --profile {profile}`)"
        )
    specs = plan_runs([chapter_id], profile, seeds=",".join(map(str, old)))
    if moved := sorted(s.seed for s in specs if s.hashes["parameters"] != old[s.seed].receipt["hashes"]["parameters"]):
        raise UsageError(
            f"seeds {moved}: params/{chapter_id}/{profile}.yaml changed since they ran; re-certification "
            "covers code only: re-run the batch"
        )


def _certify(chapter_id: str, profile: str, old: dict, *, jobs: int, backend) -> Outcome:
    """Re-run the seeds of ``old`` (stale runs of one configuration) and certify that configuration if each
    reproduces."""
    chosen = sorted(old)
    specs = plan_runs([chapter_id], profile, seeds=",".join(map(str, chosen)))
    made = _current_runs(chapter_id, profile, specs)
    results = run_batch([s for s in specs if s.seed not in made], jobs=jobs, backend=backend)
    new_dirs = {**made, **{r.spec.seed: project_root() / r.run_dir if r.run_dir else None for r in results}}
    errors = {r.spec.seed: r.error for r in results}
    outcome, checks, new_receipt = Outcome(None), [], None
    for seed in chosen:
        new_dir = new_dirs[seed]
        report = check_run(new_dir) if new_dir else None
        if new_dir is None or report is None or report.problems or report.receipt.get("status") != "ok":
            outcome.differences[seed] = [f"the re-run did not succeed and validate ({errors.get(seed) or 'invalid'})"]
            continue
        old_run = old[seed]
        found, compared, facts = certificates.differences(chapter_id, run_notebook(old_run.path), run_notebook(new_dir))
        if found:
            outcome.differences[seed] = found
        checks.append(
            certificates.SeedCheck(
                seed=seed,
                old_run=old_run.path.name,
                new_run=new_dir.name,
                values_compared=compared,
                fingerprints_compared=facts,
            )
        )
        new_receipt = report.receipt
    if outcome.differences:
        outcome.message = (
            f"{chapter_id}/{profile}: NOT re-certified: {len(outcome.differences)} of {len(chosen)} "
            "re-run seed(s) differ; the batch stays stale (re-run it)"
        )
        return outcome
    first = old[chosen[0]].receipt
    assert new_receipt is not None  # chosen holds at least one seed, and each one reproduced
    outcome.certificate = certificates.write(chapter_id, profile, first, new_receipt, checks)
    outcome.message = (
        f"{chapter_id}/{profile}: re-certified: seeds {chosen} reproduce "
        f"({sum(c.values_compared for c in checks)} values compared); "
        f"{outcome.certificate.relative_to(project_root()).as_posix()}"
    )
    return outcome
