"""``agentpost validate``: recompute every derivable field of a run and apply the GPU-evidence rules.

What is recomputed (book/receipts.md has the reader's version):

* the seal, the schema, and the output notebook's hash;
* the parameter hash from the parameters, and the run key from the recorded input hashes;
* the folder: ``<chapter>/<profile>[/ad-hoc]/seed-<seed>-<run_key>`` under the runs root;
* the parameters: the named profile's file plus the recorded overrides (and ``kind`` from the overrides);
* the output notebook: its injected parameters (cell and papermill metadata) equal the receipt's, its cells
  hash to ``hashes.source_notebook``, the metrics equal its scraps, the status matches its error outputs, and it
  passes :func:`notebook_problems` (the checks of the notebook alone, which the nbval plugin also applies: every
  glued value's text renders its scrap data, every glue call a cell makes unconditionally has its output, the
  device is recorded);
* the environment: the device and packages equal what the notebook itself recorded
  (:func:`agentpost.record.environment.show_device`), and the timing agrees with papermill's;
* staleness: whether the code, the notebook and the data are still the repository's (not an error; shown);
* the chapter: papermill executed ``<chapter>.ipynb``, and the notebook's cells are not another chapter's notebook
  (a run copied from another chapter never counts);
* per-cell timing: every executed cell's papermill start and end lie inside the run's execution, in order, each
  duration is its end minus its start, and together they fit in the run's duration.

Across the seeds of one configuration, :func:`copied_seeds` flags seeds whose recorded metrics are identical (a
seed cloned as another); such a group never counts as evidence (:mod:`agentpost.evidence.levels`).

GPU evidence (:func:`gpu_evidence_problems`) also needs facts a CPU run cannot produce: a CUDA torch build in the
packages and a CUDA event timing recorded by the notebook.
"""

from __future__ import annotations

import ast
import functools
import json
import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import nbformat
from pydantic import ValidationError

from agentpost.catalogue.params import profiles
from agentpost.evidence import receipt as rc
from agentpost.evidence import run_store
from agentpost.record.environment import GLUE_NAME
from agentpost.errors import brief
from agentpost.record.hashing import (
    PAPERMILL_TAGS,
    notebook_code_hash,
    notebook_source_hash,
    sha256_bytes,
    sha256_file,
    sha256_json,
)
from agentpost.record.recording import SCRAP_MIME, read_scraps, rendering_problem
from agentpost.project import config

GLUE_FUNCTIONS = {"glue", "glue_table", "glue_figure", "glue_paired"}
#: Seconds by which the receipt's timing may exceed papermill's (kernel start-up, writing the notebook).
TIMING_SLACK_S = 120.0


@dataclass(frozen=True)
class Problem:
    run: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.run}: {self.field}: {self.message}"


@dataclass
class Report:
    """The outcome of checking one run folder: problems (it is invalid) and staleness notes (it is old)."""

    path: Path
    receipt: dict = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    #: Why the receipt could not be read as a receipt of a catalogue chapter and profile (None when it could).
    malformed: str | None = None
    #: Every check ran (the receipt and its files were readable); staleness is then judged.
    complete: bool = False

    @property
    def valid(self) -> bool:
        return not self.problems


def catalogue_profile(chapter_id, profile) -> bool:
    """Whether ``profile`` is one of chapter ``chapter_id``'s profiles (both as the catalogue spells them)."""
    from agentpost.catalogue import chapters

    ids = {c.id: c for c in chapters()}
    return (
        isinstance(chapter_id, str)
        and chapter_id in ids
        and isinstance(profile, str)
        and profile in profiles(ids[chapter_id])
    )


#: The modules whose rules :func:`check_run` applies: their code is part of every cached result's key.
_RULES = (
    "agentpost.evidence.validate",
    "agentpost.evidence.run_store",
    "agentpost.evidence.receipt",
    "agentpost.evidence.escape",
    "agentpost.record.recording",
    "agentpost.record.outcomes",
    "agentpost.record.environment",
    "agentpost.record.hashing",
    "agentpost.catalogue.params",
    "agentpost.errors",
    "agentpost.catalogue",
    "agentpost.project",
)


@functools.lru_cache(maxsize=None)
def _rules_hash() -> str:
    import importlib

    return sha256_json({m: rc.code_file_hash(Path(importlib.import_module(m).__file__)) for m in _RULES})  # type: ignore[arg-type]  # a module has a file


def _file_digest(path: Path) -> str | None:
    return sha256_file(path) if path.is_file() and not path.is_symlink() else None


def _read_receipt(run_dir: Path) -> dict | None:
    """The receipt as JSON, or None where it cannot be read as an object (``_check_run`` then names why)."""
    try:
        raw = rc.load_raw(run_dir / rc.RECEIPT_NAME)
    except (OSError, ValueError, RecursionError):
        return None
    return raw if isinstance(raw, dict) else None


def _cache_key(run_dir: Path, receipt: dict | None) -> str | None:
    """What every check of :func:`check_run` but staleness depends on: the run's files, where it lies, the chapter's
    catalogue entry, profile and notebook, and the rules' code (None: the folder cannot be keyed)."""
    if receipt is None:
        return None
    chapter, profile = receipt.get("chapter"), receipt.get("profile")
    inputs = None
    if catalogue_profile(chapter, profile):
        from agentpost.catalogue import CATALOGUE_DIR
        from agentpost.catalogue import chapter as get_chapter

        ch = get_chapter(chapter)  # type: ignore[arg-type]  # catalogue_profile checked both
        catalogue = CATALOGUE_DIR / f"{chapter}.yaml"
        inputs = [_file_digest(p) for p in (ch.notebook, ch.profile_path(profile), catalogue)]  # type: ignore[arg-type]  # catalogue_profile checked both
    files = [rc.RECEIPT_NAME, rc.NOTEBOOK_NAME, rc.STORED_NOTEBOOK_NAME, run_store.OUTCOMES_NAME]
    return sha256_json(
        {
            "rules": _rules_hash(),
            "folder": run_dir.as_posix(),
            "inputs": inputs,
            "where": str(rc.runs_root().resolve()),
            "files": {f: _file_digest(run_dir / f) for f in files},
        }
    )


def check_run(run_dir: Path, outcomes: bool = True) -> Report:
    """Check one run folder: every derivable field recomputed (see the module docstring). ``outcomes=False`` leaves
    the per-item outcomes in the receipt's metrics as references (a reader that needs none of them).

    The problems found are kept in the project's cache under a key of everything they depend on (:func:`_cache_key`:
    the run's files, the chapter's notebook, profile and catalogue entry, the rules' code), so reading unchanged runs
    again does not re-parse their notebooks; staleness is judged anew on every call."""
    run_dir = Path(run_dir)
    raw = _read_receipt(run_dir)
    key = _cache_key(run_dir, raw)
    cached = _cached(key)
    if cached is None:
        report = _check_run(run_dir)
        _store(key, report)
        if not outcomes and report.complete:
            report.receipt = {**report.receipt, "metrics": raw["metrics"]}  # type: ignore[index]  # a complete report has a receipt
        return report
    report = Report(
        run_dir,
        problems=[Problem(**p) for p in cached["problems"]],
        malformed=cached["malformed"],
        complete=cached["complete"],
    )
    if report.complete:
        metrics = (
            run_store.inflate(None, raw["metrics"], run_store.read_outcomes_file(run_dir))[1]  # type: ignore[index]  # a complete report has a receipt
            if outcomes
            else raw["metrics"]  # type: ignore[index]  # a complete report has a receipt
        )
        report.receipt = {**raw, "metrics": metrics}  # type: ignore[dict-item]  # a complete report has a receipt
        report.stale = stale_inputs(report.receipt)
    else:
        report.receipt = raw or {}
    return report


def _cache_path(key: str) -> Path:
    from agentpost.project import cache_root

    return cache_root() / "validated" / f"{key}.json"


def _cached(key: str | None) -> dict | None:
    if key is None:
        return None
    try:
        return json.loads(_cache_path(key).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _store(key: str | None, report: Report) -> None:
    if key is None:
        return
    path = _cache_path(key)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        rc.write_atomic(
            path,
            json.dumps(
                {
                    "problems": [vars(p) for p in report.problems],
                    "malformed": report.malformed,
                    "complete": report.complete,
                }
            ),
        )
    except OSError:  # a read-only cache only costs time
        pass


def _check_run(run_dir: Path) -> Report:
    report = Report(run_dir)
    name = run_dir.as_posix()

    def bad(field_name: str, message: str) -> None:
        report.problems.append(Problem(name, field_name[:80], message))

    def malformed(field_name: str, message: str) -> Report:
        bad(field_name, message)
        report.malformed = f"{field_name}: {message}"
        return report

    def stray() -> Report:  # a receipt under the runs root where no run is written: named, never a run
        return malformed(
            "folder", "stray receipt, not in a <chapter>/<profile>/seed-<seed>-<key> folder; never a run (remove it)"
        )

    receipt_path, nb_path = run_dir / rc.RECEIPT_NAME, run_store.notebook_path(run_dir)
    if not receipt_path.is_file() or not nb_path.is_file():
        if rc.misplaced(run_dir):
            return stray()
        bad("files", f"needs {rc.RECEIPT_NAME} and {rc.STORED_NOTEBOOK_NAME} (or, before schema 5, {rc.NOTEBOOK_NAME})")
        return report
    outcomes_path = run_dir / run_store.OUTCOMES_NAME
    if receipt_path.is_symlink() or nb_path.is_symlink() or run_dir.is_symlink() or outcomes_path.is_symlink():
        return malformed("files", "a run folder and its files are never symbolic links")
    try:
        raw = rc.load_raw(receipt_path)
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError is a ValueError
        return malformed(rc.RECEIPT_NAME, f"not JSON (or not UTF-8): {str(err)[:120]}")
    except OSError as err:
        return malformed(rc.RECEIPT_NAME, f"unreadable: {err.strerror or type(err).__name__}")
    report.receipt = raw if isinstance(raw, dict) else {}
    if not isinstance(raw, dict):
        return malformed(rc.RECEIPT_NAME, "not a JSON object")
    if rc.misplaced(run_dir):
        return stray()
    version = raw.get("schema_version")
    model = rc.MODELS.get(version) if isinstance(version, int) and not isinstance(version, bool) else None
    if model is None:
        return malformed(
            "schema_version", f"{brief(version)} is not one of {sorted(rc.MODELS)}; re-run to get a current receipt"
        )
    try:
        model.model_validate(raw)
    except ValidationError as err:
        errors = err.errors()
        for e in errors[:10]:
            bad(".".join(map(str, e["loc"])) or "receipt", e["msg"])
        report.malformed = (
            f"{len(errors)} schema error(s), first: {report.problems[0].field}: {report.problems[0].message}"
        )
        return report
    if not catalogue_profile(raw["chapter"], raw["profile"]):
        return malformed(
            "chapter/profile",
            f"{brief(raw['chapter'])}/{brief(raw['profile'])} is not a chapter and profile of the catalogue",
        )
    if rc.seal(raw)["receipt_sha256"] != raw["receipt_sha256"]:
        bad("receipt_sha256", "the receipt was edited after sealing")
    if version >= 5 and nb_path.name != rc.STORED_NOTEBOOK_NAME:  # type: ignore[operator]  # a model was found for it: an int
        bad("files", f"a schema {version} run stores its notebook as {rc.STORED_NOTEBOOK_NAME}")
    try:
        nb_text = run_store.read_notebook_text(nb_path)
        if sha256_bytes(nb_text.encode()) != raw["hashes"]["output_notebook"]:
            bad("hashes.output_notebook", "the output notebook was changed after the run")
        nb = nbformat.reads(nb_text, as_version=4)
    except Exception as err:  # noqa: BLE001 - any unreadable notebook is a problem to name, not a crash
        bad("notebook", f"unreadable: {str(err)[:200]}")
        return report
    outcomes = run_store.read_outcomes_file(run_dir)
    expected = raw.get("outcomes_sha256")
    if (outcomes is None) != (expected is None) or (outcomes is not None and sha256_bytes(outcomes) != expected):
        bad(
            run_store.OUTCOMES_NAME,
            "missing"
            if outcomes is None
            else "present but the receipt seals none"
            if expected is None
            else "changed after the run",
        )
        return report
    try:
        nb, metrics = run_store.inflate(nb, raw["metrics"], outcomes)
    except Exception as err:  # noqa: BLE001 - an unreadable or incomplete outcomes file is a problem to name
        bad(run_store.OUTCOMES_NAME, f"unreadable: {str(err)[:200]}")
        return report
    raw = {**raw, "metrics": metrics}  # every check and every reader below sees the recorded outcomes
    report.receipt = raw
    _check_keys(raw, run_dir, bad)
    _check_chapter(raw, nb, bad)
    _check_parameters(raw, nb, bad)
    _check_notebook(raw, nb, bad)
    _check_environment(raw, nb, bad)
    for field_name, message in derivation_problems(raw):
        bad(field_name, message)
    report.stale = stale_inputs(raw)
    report.complete = True
    return report


def _check_keys(r: dict, run_dir: Path, bad) -> None:
    if rc.parameter_hash(r["parameters"]) != r["hashes"]["parameters"]:
        bad("hashes.parameters", "parameters do not match their hash")
    if r["parameters"].get("seed") != r["seed"]:
        bad("seed", f"the injected seed {r['parameters'].get('seed')!r} differs from the receipt's seed {r['seed']}")
    if rc.run_key_of(r) != r["run_key"]:
        bad("run_key", "is not the key of the recorded chapter, profile, kind, seed and input hashes")
    expected = rc.run_folder(r["chapter"], r["profile"], r["kind"], r["seed"], r["run_key"])
    actual = Path(*run_dir.resolve().parts[-len(expected.parts) :])
    if actual != expected:
        bad("folder", f"the run is in {actual.as_posix()} but its receipt belongs in {expected.as_posix()}")
    if (r["kind"] == "ad-hoc") != bool(r["overrides"]):
        bad("kind", f"{r['kind']!r} but the run has {len(r['overrides'])} override(s); a run with overrides is ad-hoc")


def _check_chapter(r: dict, nb, bad) -> None:
    from agentpost.catalogue import chapters

    executed = str(nb.metadata.get("papermill", {}).get("input_path") or "")
    if executed != f"{r['chapter']}.ipynb":
        bad("chapter", f"papermill executed {brief(executed)}, not {r['chapter']}.ipynb")
    for other in chapters():
        if other.id != r["chapter"] and other.started:
            try:
                theirs = notebook_source_hash(rc.source_notebook(other.id))
            except (OSError, ValueError):
                continue
            if theirs == r["hashes"]["source_notebook"]:
                bad("chapter", f"the notebook's cells are chapter {other.id}'s notebook, not {r['chapter']}'s")


@functools.lru_cache(maxsize=None)
def _profile_parameters(chapter_id: str, profile: str, overrides: str) -> str:
    """The parameters a run of ``profile`` with ``overrides`` (JSON) gets, as JSON: read once per process."""
    from agentpost.catalogue import chapter as get_chapter
    from agentpost.catalogue.params import notebook_defaults, profile_parameters

    ch = get_chapter(chapter_id)
    return json.dumps(
        profile_parameters(ch, profile, json.loads(overrides), notebook_defaults(rc.source_notebook(chapter_id)))
    )


def _check_parameters(r: dict, nb, bad) -> None:
    from agentpost.errors import UsageError

    try:
        expected = json.loads(
            _profile_parameters(r["chapter"], r["profile"], json.dumps(r["overrides"], sort_keys=True))
        )
    except (KeyError, UsageError, OSError) as err:
        bad("parameters", f"cannot be derived from profile {r['profile']!r}: {err.args[0] if err.args else err}")
        return
    expected = {**expected, "seed": r["seed"]}
    if expected != r["parameters"]:
        diff = sorted(
            k
            for k in set(expected) | set(r["parameters"])
            if expected.get(k, object()) != r["parameters"].get(k, object())
        )
        bad(
            "parameters", f"differ from params/{r['chapter']}/{r['profile']}.yaml plus the recorded overrides in {diff}"
        )


def _injected(nb) -> dict | None:
    """The parameters in papermill's injected cell (None when there is not exactly one readable such cell)."""
    from agentpost.errors import UsageError
    from agentpost.catalogue.params import literal_assignments

    cells = [c for c in nb.cells if "injected-parameters" in c.get("metadata", {}).get("tags", [])]
    try:
        return literal_assignments(cells[0].source, "injected parameters") if len(cells) == 1 else None
    except (UsageError, SyntaxError, ValueError):
        return None


def _glued_unconditionally(cell) -> set[str]:
    """Names a code cell glues with a literal name in a top-level statement (so the output must exist)."""
    try:
        body = ast.parse(cell.source).body
    except SyntaxError:
        return set()
    names = set()
    for node in body:
        call = node.value if isinstance(node, (ast.Expr, ast.Assign)) else None
        if (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Name)
            and call.func.id in GLUE_FUNCTIONS
            and call.args
            and isinstance(call.args[0], ast.Constant)
            and isinstance(call.args[0].value, str)
        ):
            names.add(call.args[0].value)
    return names


def error_cells(nb) -> list[int]:
    """Indices of the cells with an error output (one per error)."""
    return [i for i, c in enumerate(nb.cells) for o in c.get("outputs", []) if o.get("output_type") == "error"]


def notebook_problems(nb, run: str = "") -> list[Problem]:
    """The checks an executed notebook must pass by itself, without a receipt (``run`` names it in the problems).

    Shared by :func:`check_run` and by the nbval plugin (tests/notebooks/glue_regression.py), so a chapter whose
    fresh run would not validate fails the tests: one cell tagged ``parameters`` (where papermill injects), every
    glued value's text renders its data, every glue a cell makes unconditionally (before the first error) has its
    output, and the device recorded by :func:`~agentpost.record.environment.show_device`.
    """
    problems: list[Problem] = []
    tagged = [i for i, c in enumerate(nb.cells) if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(tagged) != 1:
        problems.append(
            Problem(
                run,
                "notebook.parameters",
                f"needs exactly one cell tagged 'parameters' (where "
                f"papermill injects the run's parameters), found {len(tagged)}",
            )
        )
    errors = error_cells(nb)
    last_run = errors[0] if errors else len(nb.cells)
    shown: set[str] = set()
    expected_glues: set[str] = set()
    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            meta = out.get("metadata", {}).get("scrapbook", {})
            if meta.get("name"):
                shown.add(meta["name"])
            if SCRAP_MIME in (out.get("data") or {}) and (why := rendering_problem(out["data"], out.get("metadata"))):
                problems.append(Problem(run, f"metrics.{meta.get('name', '?')}", f"glued text: {why}"))
        if cell.cell_type == "code" and i < last_run:
            expected_glues |= _glued_unconditionally(cell)
    problems += [
        Problem(run, f"metrics.{missing}", "its cell glues it, but the notebook has no output for it (deleted?)")
        for missing in sorted(expected_glues - shown)
    ]
    if not isinstance(read_scraps(nb).get(GLUE_NAME), dict):
        problems.append(
            Problem(
                run,
                "device",
                "the notebook did not record its device (its set-up cell must call "
                f"show_device(), glued as {GLUE_NAME})",
            )
        )
    return problems


def _check_notebook(r: dict, nb, bad) -> None:
    injected = _injected(nb)
    if injected != r["parameters"]:
        bad(
            "notebook.injected_parameters",
            "the parameters papermill injected into the notebook differ from the receipt's",
        )
    pm = nb.metadata.get("papermill", {})
    if pm.get("parameters") != r["parameters"]:
        bad("notebook.metadata.papermill.parameters", "papermill's record of the parameters differs from the receipt's")
    source_cells = [c for c in nb.cells if not PAPERMILL_TAGS & set(c.get("metadata", {}).get("tags", []))]
    if notebook_source_hash({"cells": source_cells}) != r["hashes"]["source_notebook"]:
        bad("hashes.source_notebook", "the output notebook's cells are not the source notebook the receipt names")
    if r["schema_version"] >= 5 and notebook_code_hash(nb) != r["notebook_code"]:
        bad("notebook_code", "differs from the hash of the output notebook's code cells")
    errors = error_cells(nb)
    if (r["status"] == "ok") == bool(errors) or (r["status"] == "ok") != (r["error"] is None):
        bad("status", f"{r['status']!r} but the notebook has {len(errors)} error output(s) and error is {r['error']!r}")
    for problem in notebook_problems(nb):
        bad(problem.field, problem.message)
    scraps = read_scraps(nb)
    for key in sorted(set(scraps) | set(r["metrics"])):
        if key not in r["metrics"]:
            bad(f"metrics.{key}", "recorded in the notebook but missing from the receipt")
        elif key not in scraps:
            bad(f"metrics.{key}", "in the receipt but not recorded in the notebook")
        elif sha256_json(scraps[key]) != sha256_json(r["metrics"][key]):
            bad(f"metrics.{key}", "differs between receipt and output notebook")
    _check_timing(r, pm, bad)
    _check_cell_timing(nb, pm, bad)


def _check_cell_timing(nb, pm: dict, bad) -> None:
    """Each executed cell's papermill times lie inside the run's, in order, and add up (to a second)."""
    try:
        pm_start, pm_end = datetime.fromisoformat(pm["start_time"]), datetime.fromisoformat(pm["end_time"])
    except (KeyError, TypeError, ValueError):
        return  # _check_timing names it
    previous_end, total = pm_start, 0.0
    for i, cell in enumerate(nb.cells):
        meta = cell.get("metadata", {}).get("papermill", {})
        if not meta.get("start_time") or not meta.get("end_time"):
            continue
        try:
            start, end = datetime.fromisoformat(meta["start_time"]), datetime.fromisoformat(meta["end_time"])
            duration = float(meta.get("duration") or 0.0)
        except (TypeError, ValueError):
            bad(f"notebook.cells[{i}].timing", "unreadable papermill start_time/end_time/duration")
            return
        if (start - previous_end).total_seconds() < -1.0 or (end - pm_end).total_seconds() > 1.0 or end < start:
            bad(
                f"notebook.cells[{i}].timing", "the cell's papermill times are not inside the run's execution, in order"
            )
            return
        if abs((end - start).total_seconds() - duration) > 1.0:
            bad(
                f"notebook.cells[{i}].timing",
                f"duration {brief(duration)} s but start and end are {(end - start).total_seconds():.0f} s apart",
            )
            return
        previous_end, total = end, total + duration
    if total - float(pm.get("duration") or 0.0) > 1.0 + 0.01 * total:
        bad("timing", f"the cells' durations add up to {total:.0f} s, more than the run's {pm.get('duration')} s")


def _check_timing(r: dict, pm: dict, bad) -> None:
    t = r["timing"]
    try:
        start, end = datetime.fromisoformat(t["start"]), datetime.fromisoformat(t["end"])
        pm_start, pm_end = datetime.fromisoformat(pm["start_time"]), datetime.fromisoformat(pm["end_time"])
    except (KeyError, TypeError, ValueError) as err:
        bad("timing", f"start/end or papermill's start_time/end_time unreadable: {err}")
        return
    span = (end - start).total_seconds()
    if abs(span - t["wall_s"]) > 2.0:
        bad("timing.wall_s", f"{t['wall_s']} s but start and end are {span:.0f} s apart")
    if (pm_start - start).total_seconds() < -1.0 or (end - pm_end).total_seconds() < -1.0:
        bad("timing", "the run's start/end do not enclose papermill's execution times recorded in the notebook")
    elif span - float(pm.get("duration") or 0.0) > TIMING_SLACK_S:
        bad("timing", f"{span:.0f} s from start to end, but papermill executed for {pm.get('duration'):.0f} s")


def _check_environment(r: dict, nb, bad) -> None:
    facts = read_scraps(nb).get(GLUE_NAME)
    if not isinstance(facts, dict):
        return  # a problem of the notebook itself (notebook_problems)
    if facts.get("device") != r["device"]:
        diff = sorted(
            k
            for k in set(r["device"]) | set(facts.get("device") or {})
            if r["device"].get(k) != (facts.get("device") or {}).get(k)
        )
        bad("device", f"differs from the device the notebook recorded in {diff}")
    if facts.get("packages") != r["packages"]:
        bad("packages", "differ from the package versions the notebook recorded")


def stale_inputs(r: dict) -> list[str]:
    """Which recorded inputs are no longer the repository's (old evidence: shown, not an error)."""
    from agentpost.catalogue import chapter as get_chapter
    from agentpost.data.registry import DataChecksumError, DataMissingError

    stale = []
    if r.get("schema_version", 0) < rc.SCHEMA_VERSION:  # an older schema checks less (schema 3: no imported code)
        stale.append("schema_version")
    try:
        ch = get_chapter(r["chapter"])
        if notebook_source_hash(rc.source_notebook(ch.id)) != r["hashes"]["source_notebook"]:
            stale.append("hashes.source_notebook")
    except (KeyError, OSError):
        stale.append("hashes.source_notebook")
        ch = None
    if r.get("schema_version", 0) >= 5:  # judged by code: the notebook's code cells, the imported files' code
        if (
            ch is not None
            and "hashes.source_notebook" in stale
            and rc.current_notebook_code(ch.id) == r["notebook_code"]
        ):
            stale.remove("hashes.source_notebook")  # only its prose changed
        if rc.changed_code(r["imported_code"]):
            stale.append("imported_code")
    elif r.get("imported_code"):  # judged by the files the run imported (schema 4); older receipts by the whole tree
        if rc.changed_code(r["imported_code"], by_code=False):
            stale.append("imported_code")
    elif rc.code_tree_hash() != r["hashes"]["code_tree"]:
        stale.append("hashes.code_tree")
    try:
        current = rc.data_hashes(ch.datasets) if ch else {}
    except (DataMissingError, DataChecksumError):
        current = {}
    if current != r["hashes"]["data"]:
        stale.append("hashes.data")
    return stale


#: Relative tolerance of a summary re-derived from the per-item outcomes (a mean summed in another order differs in
#: its last bits).
DERIVED_RTOL = 1e-9


def outcome_statistics(metrics: dict) -> dict[tuple[str, str], list[float]]:
    """The summaries a notebook may derive from one run's per-item outcomes, by (outcomes scrap, kind): ``"mean"``,
    each arm's mean; ``"difference"``, each ordered pair of arms' mean difference. Only arms with continuous outcomes
    count (more than half of the items' values distinct): the mean of 0/1 successes is a fraction that other numbers
    equal by coincidence."""
    import numpy as np

    from agentpost.record.outcomes import is_outcomes

    stats: dict[tuple[str, str], list[float]] = {}
    for name, data in sorted(metrics.items()):
        if not is_outcomes(data):
            continue
        arms = [
            x
            for _, values in sorted(data["arms"].items())
            if len(np.unique(x := np.asarray(values, dtype=np.float64))) * 2 > len(x)
        ]
        stats[(name, "mean")] = [float(x.mean()) for x in arms]
        stats[(name, "difference")] = [float((y - x).mean()) for x in arms for y in arms if x is not y]
    return stats


def _summaries(metrics: dict) -> dict[str, list[float | int]]:
    """Every number a run glued besides its outcomes and environment, by its dotted name, the rows of a table under
    one name (``table[*].column``: a row's position differs between profiles)."""
    from agentpost.evidence.spread import flatten
    from agentpost.record.outcomes import is_outcomes

    found: dict[str, list[float | int]] = {}
    for key, data in metrics.items():
        if key != GLUE_NAME and not is_outcomes(data):
            for name, value in flatten(data, key).items():
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    found.setdefault(re.sub(r"\[[0-9]+\]", "[*]", name), []).append(value)
    return found


def _matches(values: list[float], derived: list[float]) -> bool:
    """Whether one of ``values`` is one of ``derived`` (to :data:`DERIVED_RTOL`)."""
    return any(math.isclose(v, d, rel_tol=DERIVED_RTOL, abs_tol=1e-12) for v in values for d in derived)


def derived_summaries(chapter_id: str) -> dict[str, tuple[tuple[str, str], ...]]:
    """``{glued name: the (outcomes scrap, kind) it summarises}`` for every number the chapter's notebook records
    that is an arm's mean or two arms' mean difference of its per-item outcomes (:func:`outcome_statistics`; which
    arm may depend on the run: "the best baseline"), learnt from the chapter's committed notebook (the repository's,
    reviewed; a forger of runs cannot change it). Only a float that matches to :data:`DERIVED_RTOL` and is no round
    number (a rounded summary, an accuracy of 1.0) makes a link, so a coincidence does not."""
    from agentpost.project import project_root

    return _derived_summaries(chapter_id, str(project_root()))


@functools.lru_cache(maxsize=None)
def _derived_summaries(chapter_id: str, root: str) -> dict[str, tuple[tuple[str, str], ...]]:
    scraps = read_scraps(rc.source_notebook(chapter_id))
    stats = outcome_statistics(scraps)
    links = {}
    for name, values in _summaries(scraps).items():
        telling = [v for v in values if isinstance(v, float) and round(v, 6) != v]
        if how := tuple(key for key, derived in stats.items() if _matches(telling, derived)):
            links[name] = how
    return links


def derivation_problems(r: dict) -> list[tuple[str, str]]:
    """``(field, message)`` for every summary value the run recorded that its own per-item outcomes contradict (an
    edit of ``outcomes.parquet``, or of the summary, resealed): the links are :func:`derived_summaries`."""
    links = derived_summaries(r["chapter"]) if r["status"] == "ok" else {}
    if not links:
        return []
    stats, recorded = outcome_statistics(r["metrics"]), _summaries(r["metrics"])
    found = []
    for name, how in sorted(links.items()):
        known = [key for key in how if stats.get(key)]
        if name in recorded and known and not any(_matches(recorded[name], stats[key]) for key in known):
            scrap, kind = known[0]
            what = "an arm's mean" if kind == "mean" else "a mean difference of two arms"
            values = recorded[name]
            said = f"{brief(values[0])}, which is not" if len(values) == 1 else f"{brief(values)}, none of which is"
            found.append(
                (
                    f"metrics.{name}",
                    f"recorded {said} {what} of the run's per-item {scrap} (as it is in the chapter's notebook): "
                    "outcomes or summary edited",
                )
            )
    return found


#: Seeds whose per-item outcomes differ by at most this fraction of the items' spread, on every arm, are one run
#: copied (:func:`near_copies`). Measured on the committed cpu runs (book/receipts.md): of 3,979 pairs of distinct
#: seeds that scored the same items, the closest differ by 0.15 of the spread (kite, seeds 84 and 85).
NEAR_COPY_RATIO = 0.02
#: Two values of one item closer than this (relative, at least absolute) count as equal: last-bit noise or a nudge.
NEAR_COPY_RTOL = 1e-6


def near_copies(receipts: list[dict]) -> list[tuple[int, int]]:
    """Pairs of seeds whose recorded per-item outcomes are near-identical: the same outcomes scraps, items and arms,
    and on every arm a mean absolute difference at most :data:`NEAR_COPY_RATIO` of the items' spread (mean
    absolute deviation; an arm that is constant in both is equal). Seeds of a stochastic method do not agree so
    closely on every arm; an arm that is deterministic across seeds (an untrained reference) cannot make a pair by
    itself, since every arm must agree. Seeds that scored different items (a nested design) are never compared."""
    import numpy as np

    from agentpost.record.outcomes import is_outcomes

    by_layout: dict[str, list[tuple[int, dict]]] = {}
    for r in receipts:
        outcomes = {k: v for k, v in (r.get("metrics") or {}).items() if is_outcomes(v)}
        if outcomes:
            layout = sha256_json({k: [v["items"], sorted(v["arms"])] for k, v in sorted(outcomes.items())})
            by_layout.setdefault(layout, []).append((r.get("seed", -1), outcomes))
    pairs = []
    for group in by_layout.values():
        if len(group) < 2:
            continue
        ratio = np.zeros((len(group), len(group)))
        for name, first in group[0][1].items():
            for arm in first["arms"]:
                x = np.asarray([outcomes[name]["arms"][arm] for _, outcomes in group], dtype=np.float64)
                spread = np.abs(x - x.mean(axis=1, keepdims=True)).mean(axis=1)
                for i in range(len(group)):
                    diff = np.abs(x - x[i])
                    diff[diff <= NEAR_COPY_RTOL * np.maximum(1.0, np.abs(x[i]))] = 0.0  # a nudge is no difference
                    dist = diff.mean(axis=1)
                    pair_spread = (spread + spread[i]) / 2
                    with np.errstate(divide="ignore", invalid="ignore"):
                        r_i = np.where(dist == 0, 0.0, np.where(pair_spread > 0, dist / pair_spread, np.inf))
                    ratio[i] = np.maximum(ratio[i], r_i)
        pairs += [
            (group[i][0], group[j][0])
            for i in range(len(group))
            for j in range(i + 1, len(group))
            if ratio[i, j] <= NEAR_COPY_RATIO and group[i][0] != group[j][0]
        ]
    return pairs


def copied_seeds(receipts: list[dict]) -> list[list[int]]:
    """Groups of seeds that are one run copied under other seeds: their recorded metrics (all but the environment
    facts) are identical, or their per-item outcomes near-identical (:func:`near_copies`: a copy with a value
    nudged). A stochastic method at two seeds never records the same per-item results."""
    by_metrics: dict[str, list[int]] = {}
    for r in receipts:
        metrics = {k: v for k, v in (r.get("metrics") or {}).items() if k != GLUE_NAME}
        if metrics:
            by_metrics.setdefault(sha256_json(metrics), []).append(r.get("seed", -1))
    groups = [set(seeds) for seeds in by_metrics.values() if len(seeds) > 1] + [set(p) for p in near_copies(receipts)]
    merged: list[set[int]] = []
    for group in groups:  # pairs that share a seed are one group
        for other in [m for m in merged if m & group]:
            merged.remove(other)
            group |= other
        merged.append(group)
    return sorted(sorted(g) for g in merged)


def gpu_device_allowed(device: dict) -> bool:
    return device.get("kind") == "cuda" and any(
        a.lower() in str(device.get("name", "")).lower() for a in config()["gpu_allow"]
    )


def gpu_evidence_problems(receipts: list[dict]) -> list[str]:
    """Why a set of same-configuration runs does not count as GPU evidence (empty list = it does).

    Besides the device name (which anyone can type), every run must carry facts a CPU run cannot produce: a CUDA
    build of torch in its packages and a CUDA event timing recorded by the notebook's :func:`show_device` call.
    """
    reasons = []

    def seeds_where(test) -> list:
        return sorted(r["seed"] for r in receipts if test(r))

    if bad := seeds_where(lambda r: not gpu_device_allowed(r["device"])):
        reasons.append(f"seeds {bad} did not run on an allowed CUDA device ({', '.join(config()['gpu_allow'])})")
    if bad := seeds_where(lambda r: not r.get("packages", {}).get("torch_cuda")):
        reasons.append(f"seeds {bad} record no CUDA build of torch")
    cuda_ms = lambda r: (r.get("metrics", {}).get(GLUE_NAME) or {}).get("cuda_event_ms")  # noqa: E731
    if bad := seeds_where(lambda r: not (isinstance(cuda_ms(r), (int, float)) and cuda_ms(r) > 0)):  # type: ignore[operator]  # isinstance checked just before
        reasons.append(f"seeds {bad} recorded no CUDA event timing in the notebook")
    if bad := seeds_where(lambda r: r.get("kind") != "profile"):
        reasons.append(f"seeds {bad} are ad-hoc runs (made with overrides)")
    if failed := seeds_where(lambda r: r["status"] != "ok"):
        reasons.append(f"seeds {failed} failed")
    if len({rc.configuration_key(r) for r in receipts}) > 1:
        reasons.append("runs differ in more than the seed (notebook, parameters, code or data)")
    for seeds in copied_seeds(receipts):
        reasons.append(f"seeds {seeds} recorded identical metrics (copies of one run)")
    seeds = {r["seed"] for r in receipts if r["status"] == "ok"}  # type: ignore[assignment]
    if len(seeds) < config()["min_seeds"]:
        reasons.append(f"{len(seeds)} successful seeds; at least {config()['min_seeds']} are needed")
    return reasons
