"""Parameter profiles and their checks, done before anything executes.

A profile ``params/<chapter>/<profile>.yaml`` holds ``seeds`` and ``parameters``. Every parameter must exist in
the notebook's cell tagged ``parameters`` and have the type of its default there (an int is accepted for a
float). Any violation — unknown key, wrong type, empty seed list, missing profile, missing data file — raises
:class:`UsageError` (exit code 2) before a single run starts.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
import yaml

from agentpost.catalogue import Chapter, chapter as get_chapter
from agentpost.data import DATASETS, DataMissingError, data_file

PROFILE_KEYS = {"seeds", "parameters", "description", "timeout_s"}


class UsageError(ValueError):
    """Bad input from the user; the CLI exits with code 2 and writes nothing."""


@dataclass(frozen=True)
class RunSpec:
    """One papermill execution: a chapter notebook at one profile and one seed."""

    chapter: str
    profile: str
    seed: int
    parameters: dict = field(hash=False)
    timeout_s: int | None = None

    def notebook_parameters(self) -> dict:
        return {**self.parameters, "seed": self.seed}


def notebook_defaults(notebook: Path) -> dict[str, Any]:
    """Names and default values of the notebook's ``parameters`` cell (literal assignments only)."""
    nb = nbformat.read(notebook, as_version=4)
    cells = [c for c in nb.cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise UsageError(f"{notebook.name}: expected exactly one cell tagged 'parameters', found {len(cells)}")
    defaults: dict[str, Any] = {}
    for node in ast.parse(cells[0].source).body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            defaults[node.target.id] = ast.literal_eval(node.value)
        elif isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            defaults[node.targets[0].id] = ast.literal_eval(node.value)
        else:
            raise UsageError(f"{notebook.name}: the parameters cell may only hold `name = literal` lines")
    from papermill.translators import PythonTranslator

    seen_by_papermill = {p.name for p in PythonTranslator.inspect(cells[0])}
    if seen_by_papermill != set(defaults):
        raise UsageError(f"{notebook.name}: papermill cannot parse the parameters {sorted(set(defaults) - seen_by_papermill)}"
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


def check_parameters(chapter: Chapter, parameters: dict, *, source: str) -> dict:
    """Check names and types against the notebook; returns the parameters with ints promoted to float where due."""
    defaults = notebook_defaults(chapter.notebook)
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
    path = chapter.profile_path(profile)
    if not path.is_file():
        known = ", ".join(chapter.profiles) or "none"
        raise UsageError(f"{chapter.id}: no profile {profile!r} (expected {path.name} in params/{chapter.id}/; known: {known})")
    raw = yaml.safe_load(path.read_text()) or {}
    unknown = set(raw) - PROFILE_KEYS
    if unknown:
        raise UsageError(f"params/{chapter.id}/{path.name}: unknown profile keys {sorted(unknown)} (allowed: {sorted(PROFILE_KEYS)})")
    return raw


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
    for name in chapter.datasets:
        for filename in DATASETS[name]:
            try:
                data_file(name, filename)
            except DataMissingError as err:
                raise UsageError(f"{chapter.id}: {err}") from None


def plan_runs(chapter_ids: list[str], profile: str, *, seeds: str | None = None, overrides: list[str] = ()) -> list[RunSpec]:
    """Validate everything and return the runs to execute; raises :class:`UsageError` on any bad input."""
    if not chapter_ids:
        raise UsageError("name at least one chapter (see `agentpost list`)")
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
        source = f"params/{chapter_id}/{profile}.yaml"
        parameters = check_parameters(chapter, dict(raw.get("parameters") or {}), source=source)
        parameters.update(check_parameters(chapter, extra, source="-p"))
        check_data(chapter)
        for seed in parse_seeds(seeds, raw.get("seeds"), source if seeds is None else "--seeds"):
            specs.append(RunSpec(chapter_id, profile, seed, parameters, raw.get("timeout_s")))
    return specs
