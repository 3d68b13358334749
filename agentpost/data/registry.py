"""Where each public data set lives and which files it has."""

from __future__ import annotations

import os
from pathlib import Path

from agentpost.project import project_root

#: Data set name -> the files every chapter may read (all listed in the data set's SOURCE.md with checksums).
DATASETS: dict[str, tuple[str, ...]] = {
    "wikitext-2": ("train.txt", "valid.txt", "test.txt"),
    "stabletoolbench": ("apis.jsonl", "queries.jsonl"),
    "gsm8k": ("train.jsonl", "test.jsonl"),
    "movietweetings-100k": ("movies.dat", "ratings.dat"),
}

_READ: dict[str, Path] = {}


class DataMissingError(FileNotFoundError):
    """A public data set or one of its files is not available locally."""


def _candidates(name: str) -> list[Path]:
    roots = []
    if os.environ.get("AGENTPOST_DATA"):
        roots.append(Path(os.environ["AGENTPOST_DATA"]))
    roots.append(project_root().parent / "shared" / "data")
    return [r / name for r in roots]


def dataset_dir(name: str) -> Path:
    """The local folder of data set ``name``; raises :class:`DataMissingError` naming where it looked."""
    if name not in DATASETS:
        raise KeyError(f"unknown data set {name!r}; known: {', '.join(sorted(DATASETS))}")
    for folder in _candidates(name):
        if folder.is_dir():
            return folder
    looked = ", ".join(str(p) for p in _candidates(name))
    raise DataMissingError(
        f"data set {name!r} not found (looked in {looked}). Set AGENTPOST_DATA to a folder holding {name}/, "
        f"or fetch it from its public source as its SOURCE.md describes."
    )


def data_file(name: str, filename: str) -> Path:
    """Path of one file of a data set, recorded as read (for the receipt)."""
    path = dataset_dir(name) / filename
    if not path.is_file():
        raise DataMissingError(f"data file {name}/{filename} is missing (expected at {path})")
    _READ[f"{name}/{filename}"] = path
    return path


def files_read() -> dict[str, Path]:
    """The data files read in this process so far, keyed ``<dataset>/<file>``."""
    return dict(_READ)
