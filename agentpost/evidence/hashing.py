"""Content hashes used by receipts and the run cache."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterable

_FILE_CACHE: dict[tuple[str, int, int], str] = {}


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path) -> str:
    """sha256 of a file, memoized on (path, size, mtime) so repeated runs do not re-read large data files."""
    path = Path(path)
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _FILE_CACHE:
        h = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        _FILE_CACHE[key] = h.hexdigest()
    return _FILE_CACHE[key]


def canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def sha256_json(value: Any) -> str:
    return sha256_bytes(canonical_json(value))


def sha256_tree(root: Path, patterns: Iterable[str]) -> str:
    """One hash over the relative paths and contents of the files under ``root`` matching ``patterns``."""
    h = hashlib.sha256()
    files = sorted({p for pat in patterns for p in root.glob(pat) if p.is_file() and "__pycache__" not in p.parts})
    for p in files:
        h.update(p.relative_to(root).as_posix().encode() + b"\0")
        h.update(sha256_file(p).encode() + b"\n")
    return h.hexdigest()


def notebook_source_hash(notebook: dict) -> str:
    """Hash of a notebook's cells without outputs, execution counts or metadata other than tags."""
    cells = [
        {
            "type": c.get("cell_type"),
            "source": "".join(c.get("source", "")) if isinstance(c.get("source"), list) else c.get("source", ""),
            "tags": sorted(c.get("metadata", {}).get("tags", [])),
        }
        for c in notebook.get("cells", [])
    ]
    return sha256_json(cells)
