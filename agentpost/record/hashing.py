"""Content hashes used by receipts and the run cache."""

from __future__ import annotations

import ast
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


#: The version of the code-hash rule, part of every code hash (a change of the rule changes every hash).
CODE_HASH_RULE = "py-ast-v1"


def _without_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                node.body = body[1:] or [ast.Pass()]
    return tree


def code_hash(source: str) -> str:
    """sha256 of what Python runs of ``source``: its syntax tree without docstrings (comments and formatting are not
    in the tree), so an edit of prose or layout leaves it unchanged and any change of behaviour does not. Text that
    does not parse (a cell with IPython magics) is hashed as its stripped text."""
    try:
        body = ast.dump(_without_docstrings(ast.parse(source)), include_attributes=False)
    except SyntaxError:
        body = "text:" + source.strip()
    return sha256_bytes(f"{CODE_HASH_RULE}\0{body}".encode())


#: Tags of the cells papermill adds to an executed notebook: the injected parameters (a run's own values, recorded
#: apart in its receipt) and the error banner.
PAPERMILL_TAGS = frozenset({"injected-parameters", "papermill-error-cell-tag"})


def notebook_code_hash(notebook: dict) -> str:
    """Hash of a notebook's code cells by :func:`code_hash`, with their tags (papermill injects after the cell
    tagged ``parameters``); markdown, outputs and the cells papermill adds do not count. Equal for the source
    notebook and every run executed from it, and unchanged by an edit of the prose."""
    cells = []
    for c in notebook.get("cells", []):
        tags = sorted(c.get("metadata", {}).get("tags", []))
        if c.get("cell_type") != "code" or PAPERMILL_TAGS & set(tags):
            continue
        source = "".join(c.get("source", "")) if isinstance(c.get("source"), list) else c.get("source", "")
        cells.append({"code": code_hash(source), "tags": tags})
    return sha256_json(cells)
