"""Receipts: the JSON record next to each output notebook (DESIGN.md, "Receipts").

Schema (``schema_version`` 1)::

    schema_version, chapter, profile, seed, status ("ok" | "failed"), run_key,
    error: null | {cell_index, ename, evalue},
    parameters: {...}                       # as injected, seed included
    hashes: {source_notebook, parameters, output_notebook, code_tree, data: {"<set>/<file>": sha256}},
    packages: {...}, device: {kind, name, count, memory_bytes, driver, cuda, machine},
    timing: {start, end, wall_s}, peak_memory: {host_rss_bytes},
    metrics: {name: value}                  # every glued data scrap of the output notebook
    receipt_sha256                           # over all other fields (canonical JSON)
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from agentpost.evidence.hashing import sha256_json

SCHEMA_VERSION = 1
RECEIPT_NAME = "receipt.json"
NOTEBOOK_NAME = "notebook.ipynb"


def seal(receipt: dict) -> dict:
    """Add the self-hash that makes any later edit of a field detectable."""
    body = {k: v for k, v in receipt.items() if k != "receipt_sha256"}
    return {**body, "receipt_sha256": sha256_json(body)}


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def dump(receipt: dict) -> str:
    return json.dumps(receipt, indent=2, sort_keys=True) + "\n"


def load(path: Path) -> dict:
    return json.loads(Path(path).read_text(encoding="utf-8"))
