"""Parameter profiles and their checks, done before anything executes.

A profile ``params/<chapter>/<profile>.yaml`` holds ``seeds`` and ``parameters``. Every parameter must exist in
the notebook's cell tagged ``parameters`` and have the type of its default there (an int is accepted for a
float). Any violation — unknown key, wrong type, empty seed list, a profile name that is not an identifier or not
a file in ``params/<chapter>/``, a chapter named twice, a missing data file or one that fails its SOURCE.md checksum
— raises :class:`UsageError` (exit code 2) before a single run starts.

Two optional keys say how a scale-out backend (Ray, Slurm) places each run; neither is part of the run key:
``resources: {num_cpus: 1, num_gpus: 0.5}`` (per run; a fraction of a GPU below 1 packs runs on one GPU) and
``max_retries: 1`` (how often a run whose process died is started again).

Planning reads each chapter notebook once and hashes every input once; the run key travels to the worker in the
:class:`RunSpec`, so the worker executes without hashing again.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
import yaml

from agentpost.catalogue import Chapter, chapter as get_chapter
from agentpost.data.registry import DATASETS, DataChecksumError, DataMissingError, data_file
from agentpost.errors import UsageError
from agentpost.evidence import receipt as rc

PROFILE_KEYS = {"seeds", "parameters", "description", "timeout_s", "resources", "max_retries"}
#: Per-run resources a profile may ask for, and their defaults.
RESOURCE_DEFAULTS = {"num_cpus": 1, "num_gpus": 0}
DEFAULT_MAX_RETRIES = 1
PROFILE_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")

__all__ = ["RunSpec", "UsageError", "plan_runs", "profile_parameters"]


@dataclass(frozen=True)
class RunSpec:
    """One papermill execution: a chapter notebook at one profile (plus ``-p`` overrides) and one seed.

    ``hashes`` and ``run_key`` are computed once, in the parent, by :func:`plan_runs`.
    """

    chapter: str
    profile: str
    seed: int
    parameters: dict = field(hash=False)
    timeout_s: int | None = None
    overrides: dict = field(default_factory=dict, hash=False)
    hashes: dict = field(default_factory=dict, hash=False)
    run_key: str = ""
    resources: dict = field(default_factory=lambda: dict(RESOURCE_DEFAULTS), hash=False)
    max_retries: int = DEFAULT_MAX_RETRIES

    @property
    def kind(self) -> str:
        return "ad-hoc" if self.overrides else "profile"

    @property
    def folder(self) -> Path:
        return rc.runs_root() / rc.run_folder(self.chapter, self.profile, self.kind, self.seed, self.run_key)

    def notebook_parameters(self) -> dict:
        return {**self.parameters, "seed": self.seed}


def parameters_cell(nb) -> Any:
    cells = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise UsageError(f"expected exactly one cell tagged 'parameters', found {len(cells)}")
    return cells[0]


def literal_assignments(source: str, where: str) -> dict[str, Any]:
    """``name = literal`` lines of a parameters (or papermill's injected-parameters) cell."""
    values: dict[str, Any] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            values[node.target.id] = ast.literal_eval(node.value)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            values[node.targets[0].id] = ast.literal_eval(node.value)
        else:
            raise UsageError(f"{where}: the parameters cell may only hold `name = literal` lines")
    return values


def notebook_defaults(notebook: Path | Any) -> dict[str, Any]:
    """Names and default values of the notebook's ``parameters`` cell (a path, or an already-read notebook)."""
    name = notebook.name if isinstance(notebook, Path) else "notebook"
    nb = nbformat.read(notebook, as_version=4) if isinstance(notebook, Path) else notebook
    try:
        cell = parameters_cell(nb)
    except UsageError as err:
        raise UsageError(f"{name}: {err}") from None
    cells = [cell]
    defaults = literal_assignments(cells[0].source, name)
    from papermill.translators import PythonTranslator

    seen_by_papermill = {p.name for p in PythonTranslator.inspect(cells[0])}
    if seen_by_papermill != set(defaults):
        raise UsageError(f"{name}: papermill cannot parse the parameters {sorted(set(defaults) - seen_by_papermill)}"
                         " (keep comments free of quotes and brackets)")
    return defaults


def _type_ok(value: Any, default: Any) -> bool:
    if default is None:
        return True
    if isinstance(default, bool):
        return isinstance(value, bool)
    if isinstance(default, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    return isinstance(value, type(default))


def check_parameters(chapter: Chapter, parameters: dict, *, source: str, defaults: dict | None = None) -> dict:
    """Check names and types against the notebook's defaults (read from it when not given); returns the
    parameters with ints promoted to float where due."""
    defaults = notebook_defaults(chapter.notebook) if defaults is None else defaults
    checked = {}
    for key, value in parameters.items():
        if key == "seed":
            raise UsageError(f"{source}: 'seed' is set by the seed list, not as a parameter")
        if key not in defaults:
            raise UsageError(f"{source}: unknown parameter {key!r} for {chapter.id} (known: {', '.join(sorted(defaults))})")
        if not _type_ok(value, defaults[key]):
            raise UsageError(
                f"{source}: parameter {key!r} must be {type(defaults[key]).__name__} like its default "
                f"{defaults[key]!r}, got {type(value).__name__} {value!r}"
            )
        checked[key] = float(value) if isinstance(defaults[key], float) else value
    return checked


def load_profile(chapter: Chapter, profile: str) -> dict:
    """The profile file ``params/<chapter>/<profile>.yaml``; ``profile`` must be an identifier naming one of them,
    so nothing outside the repository is ever read or written through a profile name."""
    known = chapter.profiles
    if not isinstance(profile, str) or not PROFILE_NAME.match(profile) or profile not in known:
        what = "is not a profile name (lower-case letters, digits, _ and -)" if not PROFILE_NAME.match(str(profile)) else "is not a profile"
        raise UsageError(f"{chapter.id}: {profile!r} {what}; known profiles in params/{chapter.id}/: {', '.join(known) or 'none'}")
    path = chapter.profile_path(profile)
    raw = yaml.safe_load(path.read_text()) or {}
    unknown = set(raw) - PROFILE_KEYS
    if unknown:
        raise UsageError(f"params/{chapter.id}/{path.name}: unknown profile keys {sorted(unknown)} (allowed: {sorted(PROFILE_KEYS)})")
    placement(raw, f"params/{chapter.id}/{path.name}")
    return raw


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def placement(raw: dict, source: str) -> tuple[dict, int]:
    """A profile's per-run ``resources`` (defaults filled in) and ``max_retries``, checked."""
    resources = raw.get("resources", {})
    if not isinstance(resources, dict):
        raise UsageError(f"{source}: resources must be a mapping like {{num_cpus: 1, num_gpus: 0.5}}, got {resources!r}")
    unknown = sorted(set(resources) - set(RESOURCE_DEFAULTS))
    if unknown:
        raise UsageError(f"{source}: unknown resources {unknown} (allowed: {sorted(RESOURCE_DEFAULTS)})")
    resources = {**RESOURCE_DEFAULTS, **resources}
    cpus, gpus = resources["num_cpus"], resources["num_gpus"]
    if not _number(cpus) or cpus <= 0:
        raise UsageError(f"{source}: resources.num_cpus must be a number > 0, got {cpus!r}")
    if not _number(gpus) or gpus < 0 or (gpus > 1 and gpus != int(gpus)):
        raise UsageError(f"{source}: resources.num_gpus must be a whole number >= 0 or a fraction below 1 "
                         f"(several runs share one GPU), got {gpus!r}")
    retries = raw.get("max_retries", DEFAULT_MAX_RETRIES)
    if not isinstance(retries, int) or isinstance(retries, bool) or not 0 <= retries <= 10:
        raise UsageError(f"{source}: max_retries must be an integer from 0 to 10, got {retries!r}")
    return resources, retries


def parse_overrides(pairs: list[str]) -> dict:
    """``KEY=VALUE`` strings; VALUE is parsed as YAML (``3``, ``0.5``, ``true``, ``[1, 2]``, ``text``)."""
    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise UsageError(f"-p expects KEY=VALUE, got {pair!r}")
        key, value = pair.split("=", 1)
        out[key.strip()] = yaml.safe_load(value)
    return out


def parse_seeds(text: str | None, profile_seeds: Any, source: str) -> list[int]:
    seeds = profile_seeds if text is None else [s for s in text.split(",") if s.strip()]
    if not isinstance(seeds, list) or not seeds:
        raise UsageError(f"{source}: the seed list is empty; give --seeds 42,43,44 or `seeds:` in the profile")
    try:
        parsed = [int(s) for s in seeds]
    except (TypeError, ValueError):
        raise UsageError(f"{source}: seeds must be integers, got {seeds!r}") from None
    if len(set(parsed)) != len(parsed):
        raise UsageError(f"{source}: duplicate seeds in {parsed}")
    return parsed


def check_data(chapter: Chapter) -> None:
    """Every data file of the chapter exists and matches its SOURCE.md checksum."""
    for name in chapter.datasets:
        for filename in DATASETS[name]:
            try:
                data_file(name, filename)
            except (DataMissingError, DataChecksumError) as err:
                raise UsageError(f"{chapter.id}: {err}") from None


def profile_parameters(chapter: Chapter, profile: str, overrides: dict, defaults: dict) -> dict:
    """The parameters of a run: the profile file's, then the overrides, checked against the notebook's defaults.

    The one rule both planning and ``agentpost validate`` apply."""
    raw = load_profile(chapter, profile)
    parameters = check_parameters(chapter, dict(raw.get("parameters") or {}), source=f"params/{chapter.id}/{profile}.yaml",
                                  defaults=defaults)
    parameters.update(check_parameters(chapter, overrides, source="-p", defaults=defaults))
    return parameters


def plan_runs(chapter_ids: list[str], profile: str, *, seeds: str | None = None, overrides: list[str] = ()) -> list[RunSpec]:
    """Validate everything and return the runs to execute, keys computed; raises :class:`UsageError` on bad input."""
    if not chapter_ids:
        raise UsageError("name at least one chapter (see `agentpost list`)")
    twice = sorted({c for c in chapter_ids if chapter_ids.count(c) > 1})
    if twice:
        raise UsageError(f"chapter(s) named more than once: {', '.join(twice)}")
    extra = parse_overrides(list(overrides))
    specs = []
    for chapter_id in chapter_ids:
        try:
            chapter = get_chapter(chapter_id)
        except KeyError as err:
            raise UsageError(str(err.args[0])) from None
        if not chapter.started:
            raise UsageError(f"{chapter_id}: no notebook yet (notebooks/{chapter_id}.ipynb); the chapter is not started")
        raw = load_profile(chapter, profile)
        notebook = rc.source_notebook(chapter_id)  # the one read of the notebook in the parent
        parameters = profile_parameters(chapter, profile, extra, notebook_defaults(notebook))
        check_data(chapter)
        hashes = rc.input_hashes(notebook, parameters, chapter.datasets)
        kind = "ad-hoc" if extra else "profile"
        resources, retries = placement(raw, f"params/{chapter_id}/{profile}.yaml")
        for seed in parse_seeds(seeds, raw.get("seeds"), f"params/{chapter_id}/{profile}.yaml" if seeds is None else "--seeds"):
            key = rc.run_key(chapter_id, profile, kind, seed, hashes)
            specs.append(RunSpec(chapter_id, profile, seed, parameters, raw.get("timeout_s"), dict(extra), hashes, key,
                                 resources, retries))
    return specs
