"""The runs a command asks for, planned and checked before anything executes: the chapters (named once, started),
their profiles and parameters (the rules of :mod:`agentpost.catalogue.params`), the seeds, and the data files (each
present and matching its SOURCE.md checksum); any violation raises :class:`UsageError` (exit code 2).

Planning reads each chapter notebook once and hashes every input once; the run key travels to the worker in the
:class:`RunSpec`, so the worker executes without hashing again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentpost.catalogue import Chapter, chapter as get_chapter
from agentpost.catalogue.params import (
    DEFAULT_MAX_RETRIES,
    RESOURCE_DEFAULTS,
    load_profile,
    notebook_parameters,
    parse_overrides,
    parse_seeds,
    placement,
    profile_parameters,
    read_notebook,
)
from agentpost.data.registry import DATASETS, DataChecksumError, DataMissingError, data_file
from agentpost.data.registry import _candidates as _local_candidates
from agentpost.errors import UsageError
from agentpost.evidence import receipt as rc


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


def check_data(chapter: Chapter) -> None:
    """Every data file of the chapter exists and matches its SOURCE.md checksum. A data folder named by
    ``AGENTPOST_DATA`` must hold the chapter's data sets when no local copy exists elsewhere: a user who named a
    folder is told at once, not after a wait on the hub."""
    import os

    named = os.environ.get("AGENTPOST_DATA")
    for name in chapter.datasets:
        local = [p for p in _local_candidates(name) if p.is_dir()]
        if named and not local:
            raise UsageError(
                f"{chapter.id}: data set {name!r} not found: AGENTPOST_DATA={named} holds no {name}/ folder (nor "
                "does ../shared/data beside the checkout); point it at the folder holding the data sets, or unset it"
            )
        for filename in DATASETS[name]:
            try:
                data_file(name, filename)
            except (DataMissingError, DataChecksumError) as err:
                raise UsageError(f"{chapter.id}: {err}") from None


def started_chapter(chapter_id: str) -> tuple[Chapter, Any]:
    """The catalogue's chapter and its readable notebook, or :class:`UsageError` (unknown, not started, unreadable)."""
    try:
        chapter = get_chapter(chapter_id)
    except KeyError as err:
        raise UsageError(str(err.args[0])) from None
    if not chapter.started:
        raise UsageError(f"{chapter_id}: no notebook yet (notebooks/{chapter_id}.ipynb); the chapter is not started")
    return chapter, read_notebook(chapter.notebook)


def plan_runs(
    chapter_ids: list[str], profile: str, *, seeds: str | None = None, overrides: Sequence[str] = ()
) -> list[RunSpec]:
    """Validate everything and return the runs to execute, keys computed; raises :class:`UsageError` on bad input."""
    if not chapter_ids:
        raise UsageError("name at least one chapter (see `agentpost list`)")
    twice = sorted({c for c in chapter_ids if chapter_ids.count(c) > 1})
    if twice:
        raise UsageError(f"chapter(s) named more than once: {', '.join(twice)}")
    extra = parse_overrides(list(overrides))
    specs = []
    for chapter_id in chapter_ids:
        chapter, notebook = started_chapter(chapter_id)  # the one read of the notebook in the parent
        raw = load_profile(chapter, profile)
        parameters = profile_parameters(chapter, profile, extra, *notebook_parameters(notebook, chapter.notebook.name))
        seed_list = parse_seeds(
            seeds, raw.get("seeds"), f"params/{chapter_id}/{profile}.yaml" if seeds is None else "--seeds"
        )
        check_data(chapter)
        hashes = rc.input_hashes(notebook, parameters, chapter.datasets)
        kind = "ad-hoc" if extra else "profile"
        resources, retries = placement(raw, f"params/{chapter_id}/{profile}.yaml")
        for seed in seed_list:
            key = rc.run_key(chapter_id, profile, kind, seed, hashes)
            specs.append(
                RunSpec(
                    chapter_id,
                    profile,
                    seed,
                    parameters,
                    raw.get("timeout_s"),
                    dict(extra),
                    hashes,
                    key,
                    resources,
                    retries,
                )
            )
    return specs
