"""Content-addressed run keys: a run is reused while its inputs are unchanged."""

from __future__ import annotations

import functools

import nbformat

from agentpost.catalogue import chapter as get_chapter
from agentpost.data import DATASETS, data_file
from agentpost.evidence.hashing import notebook_source_hash, sha256_file, sha256_json, sha256_tree
from agentpost.project import project_root

#: What counts as "the code" of a run: the library, its assets, the kernels and the build configuration.
CODE_PATTERNS = ("agentpost/**/*.py", "agentpost/models/assets/**/*", "kernels/**/*.py", "pyproject.toml")


@functools.lru_cache(maxsize=None)
def code_tree_hash() -> str:
    return sha256_tree(project_root(), CODE_PATTERNS)


def data_hashes(chapter_id: str) -> dict[str, str]:
    chapter = get_chapter(chapter_id)
    return {f"{n}/{f}": sha256_file(data_file(n, f)) for n in chapter.datasets for f in DATASETS[n]}


def source_hash(chapter_id: str) -> str:
    return notebook_source_hash(nbformat.read(get_chapter(chapter_id).notebook, as_version=4))


def input_hashes(spec) -> dict:
    """Every input that defines a run except the seed: equal across the seeds of one configuration."""
    return {
        "source_notebook": source_hash(spec.chapter),
        "parameters": sha256_json(spec.parameters),
        "code_tree": code_tree_hash(),
        "data": data_hashes(spec.chapter),
    }


def run_key(spec, hashes: dict | None = None) -> str:
    hashes = hashes or input_hashes(spec)
    return sha256_json({"profile": spec.profile, "seed": spec.seed, **hashes})[:16]
