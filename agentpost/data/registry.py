"""Where each public data set lives, which files it has, and their checksums.

Each data set folder holds a ``SOURCE.md`` whose ``## Files`` table lists every file with its size in bytes and
its sha256. :func:`checksums` parses that table once; :func:`data_file` refuses a file whose size or sha256 differs
(hashes are memoised on (path, size, mtime), so a file is read once per process while it is unchanged). The
repository pins the same size and sha256 of every file a chapter reads (:data:`PINNED`): a data file edited together
with the SOURCE.md beside it is still refused.

:func:`dataset_dir` looks in ``$AGENTPOST_DATA``, then ``../shared/data`` beside the checkout; a data set with a
public hub copy (:data:`agentpost.data.sources.HUB_SOURCES`) is otherwise rebuilt from the hub by
:func:`agentpost.data.hf.from_hub`, checked against the sizes and sha256 pinned there (the same values as its
SOURCE.md, which a machine without the data folder does not have). Layering: sources <- hf <- registry.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path

from agentpost.data import hf
from agentpost.data.sources import DATASETS, HUB_SOURCES, DataChecksumError, DataMissingError, HubSource
from agentpost.record.hashing import sha256_file
from agentpost.project import project_root

__all__ = [
    "DATASETS",
    "HUB_SOURCES",
    "DataChecksumError",
    "DataMissingError",
    "HubSource",
    "checksums",
    "data_file",
    "dataset_dir",
    "files_read",
    "verify_file",
]

#: Size and sha256 of every file in :data:`DATASETS`, pinned in the repository (the values of the data sets' SOURCE.md
#: when the chapters were written; the hub sets' are those of :data:`HUB_SOURCES`).
PINNED: dict[str, dict[str, tuple[int, str]]] = {
    **{
        name: {f: (size, digest) for f, (_split, size, digest) in hub.files.items()}
        for name, hub in HUB_SOURCES.items()
    },
    "stabletoolbench": {
        "apis.jsonl": (1315896, "4a0bf03cef462f083f0b4db0ca65fdb72a7f5f0db10850b9cad07a313cdf8127"),
        "queries.jsonl": (583836, "25b02c437bae7cc1329115c207765c7a43e67b7a6452340dc1ff147b658e737e"),
    },
    "movietweetings-100k": {
        "movies.dat": (542192, "e63fb84bc734e3c574f135634a40d3cbafab22b8f94f5fc0b80f80d1d2076efc"),
        "ratings.dat": (2945101, "c0dd868c2632d10002ebc928ddc5345f33adeaa59eca52c2941c26a2c5e36fd6"),
    },
}

_READ: dict[str, Path] = {}
_ROW = re.compile(r"^\|\s*([^|\s][^|]*?)\s*\|\s*(\d+)\s*\|\s*([0-9a-f]{64})\s*\|")


def _candidates(name: str) -> list[Path]:
    roots = []
    if os.environ.get("AGENTPOST_DATA"):
        roots.append(Path(os.environ["AGENTPOST_DATA"]))
    roots.append(project_root().parent / "shared" / "data")
    return [r / name for r in roots]


def dataset_dir(name: str) -> Path:
    """The local folder of data set ``name`` (else its hub copy, rebuilt and checked in the project cache); raises
    :class:`DataMissingError` naming where it looked."""
    if name not in DATASETS:
        raise KeyError(f"unknown data set {name!r}; known: {', '.join(sorted(DATASETS))}")
    for folder in _candidates(name):
        if folder.is_dir():
            return folder
    looked = ", ".join(str(p) for p in _candidates(name))
    if name in HUB_SOURCES:
        try:
            return hf.from_hub(name)
        except DataMissingError as err:
            raise DataMissingError(f"data set {name!r} not found locally (looked in {looked}); {err}") from err
    raise DataMissingError(
        f"data set {name!r} not found (looked in {looked}). Set AGENTPOST_DATA to a folder holding {name}/, "
        f"or fetch it from its public source as its SOURCE.md describes."
    )


@functools.lru_cache(maxsize=None)
def _parse_source(source: Path, name: str) -> dict[str, tuple[int, str]]:
    where = f"{name}/SOURCE.md"
    try:
        text = source.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise DataChecksumError(f"{where} is not UTF-8 text (byte {err.start}: {err.reason})") from None
    except OSError as err:
        raise DataMissingError(f"{where} cannot be read: {err.strerror or type(err).__name__}") from None
    table, in_files = {}, False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("## "):
            in_files = line.strip() == "## Files"
        elif in_files and (m := _ROW.match(line)):
            if m.group(1) in table:
                raise DataChecksumError(f"{where} lists {m.group(1)[:80]} twice (line {number}); one row per file")
            table[m.group(1)] = (int(m.group(2)), m.group(3))
    return table


def checksums(name: str) -> dict[str, tuple[int, str]]:
    """``{file: (bytes, sha256)}`` from the ``## Files`` table of data set ``name``'s SOURCE.md (parsed once)."""
    source = dataset_dir(name) / "SOURCE.md"
    if not source.is_file():
        raise DataMissingError(f"data set {name!r} has no SOURCE.md with checksums (expected at {source})")
    return _parse_source(source, name)


def verify_file(name: str, filename: str, path: Path) -> None:
    """Raise :class:`DataChecksumError` naming the file unless it has SOURCE.md's size and sha256."""
    expected = checksums(name).get(filename)
    if expected is None:
        raise DataChecksumError(
            f"data file {name}/{filename} is not listed in {name}/SOURCE.md, so it cannot be checked"
        )
    size, digest = expected
    try:
        actual_size = path.stat().st_size
        actual = sha256_file(path) if actual_size == size else ""
    except OSError as err:
        raise DataMissingError(
            f"data file {name}/{filename} cannot be read: {err.strerror or type(err).__name__}"
        ) from None
    if actual_size != size:
        raise DataChecksumError(f"data file {name}/{filename} has {actual_size} bytes; {name}/SOURCE.md records {size}")
    if actual != digest:
        raise DataChecksumError(
            f"data file {name}/{filename} has sha256 {actual[:12]}…; {name}/SOURCE.md records {digest[:12]}…"
        )
    pinned = PINNED.get(name, {}).get(filename)
    if pinned != expected:
        pin = f"{pinned[0]} bytes, sha256 {pinned[1][:12]}…" if pinned else "nothing"
        raise DataChecksumError(
            f"data file {name}/{filename} matches {name}/SOURCE.md ({size} bytes, sha256 {digest[:12]}…) "
            f"but the repository pins {pin} (agentpost/data/registry.py PINNED): the data and its "
            "SOURCE.md are not the ones this checkout was written for"
        )


def data_file(name: str, filename: str) -> Path:
    """Path of one file of a data set, checked against its SOURCE.md checksum and recorded as read."""
    path = dataset_dir(name) / filename
    if not path.is_file():
        what = "is not a regular file" if path.exists() or path.is_symlink() else "is missing"
        raise DataMissingError(f"data file {name}/{filename} {what} (expected at {path})")
    verify_file(name, filename, path)
    _READ[f"{name}/{filename}"] = path
    return path


def files_read() -> dict[str, Path]:
    """The data files read in this process so far, keyed ``<dataset>/<file>``."""
    return dict(_READ)
