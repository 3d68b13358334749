"""Receipts: the one typed record next to each output notebook (book/receipts.md).

This module owns everything about a receipt: its schema (:class:`Receipt`, a frozen pydantic model whose JSON
schema is :func:`json_schema`), its construction (:func:`build`), the hashing rules (which inputs are hashed and
how; the parameter hash leaves out the seed so the seeds of one configuration share it), the run key (the
content address of one run), the configuration key (everything but the seed), the seal, and where a run's
folder lives under :func:`runs_root`. ``run.execute`` fills it; ``validate``, ``levels``, ``ledger`` and
``agentpost list`` read it.

A run made with ``-p`` overrides is an *ad-hoc* run: ``kind = "ad-hoc"``, its own folder
(``<chapter>/<profile>/ad-hoc/``) and its own run key, so it never counts as the profile's evidence.

Schema versions: 5 (written now) stores the run compactly (:mod:`agentpost.evidence.run_store`: the notebook
gzipped, per-item outcomes in ``outcomes.parquet`` sealed by ``outcomes_sha256``) and judges staleness by what can
change the numbers: ``imported_code`` holds each imported file's *code* hash and ``notebook_code`` the notebook's
code cells' (:func:`agentpost.record.hashing.code_hash`: docstrings, comments, formatting and prose do not count).
4 listed the imported files by their bytes' sha256; 3 added ``backend``, where the run executed
(:data:`BACKEND_NAMES`; not part of the run key, so a run is the same evidence whatever executed it); 2 had neither.
Older receipts still read and validate as they did (:data:`MODELS`); ``agentpost migrate`` turns a version 4 run
into version 5 once, its outcomes kept bit for bit.
"""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from agentpost.record.hashing import (
    CODE_HASH_RULE,
    code_hash,
    notebook_code_hash,
    notebook_source_hash,
    sha256_file,
    sha256_json,
    sha256_tree,
)
from agentpost.project import project_root

SCHEMA_VERSION = 5
RECEIPT_NAME = "receipt.json"
#: The executed notebook of a schema <= 4 run; schema 5 stores it gzipped (:data:`STORED_NOTEBOOK_NAME`).
NOTEBOOK_NAME = "notebook.ipynb"
STORED_NOTEBOOK_NAME = "notebook.ipynb.gz"
#: The runs root, relative to the project root (the one place it is named).
RUNS_DIR = "book/runs"
ADHOC_DIR = "ad-hoc"

#: What counts as "the code" of a run: the library, its assets, the kernels and the build configuration, in the
#: folder the library was imported from (:func:`code_root`).
CODE_PATTERNS = ("agentpost/**/*.py", "agentpost/*/assets/**/*", "kernels/**/*.py", "pyproject.toml")

Kind = Literal["profile", "ad-hoc"]
#: Where a run can execute (agentpost.run.backends); ``submitit-local`` is submitit's local executor (no Slurm).
BACKEND_NAMES = ("local", "ray", "slurm", "submitit-local")
Backend = Literal[BACKEND_NAMES]  # type: ignore[valid-type]  # the literal spelled from the names tuple


class _Strict(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class CellError(_Strict):
    cell_index: int
    ename: str
    evalue: str


class Hashes(_Strict):
    source_notebook: str  # sha256 of the notebook's cells without outputs (hashing.notebook_source_hash)
    parameters: str  # sha256 of the parameters without the seed
    code_tree: str  # sha256 over CODE_PATTERNS
    data: dict[str, str]  # "<set>/<file>" -> sha256, every file of the chapter's data sets
    output_notebook: str  # sha256 of the executed notebook as written


class Timing(_Strict):
    start: str  # ISO 8601, UTC, seconds
    end: str
    wall_s: float


class PeakMemory(_Strict):
    host_rss_bytes: int


class ReceiptV2(_Strict):
    """Schema version 2: one run, before receipts named their backend (read, never written)."""

    schema_version: Literal[2]
    chapter: str
    profile: str
    kind: Kind
    seed: int
    status: Literal["ok", "failed"]
    run_key: str
    error: CellError | None
    overrides: dict[str, Any]  # the -p overrides (empty for a profile run)
    parameters: dict[str, Any]  # as injected: the profile's parameters, the overrides, and the seed
    hashes: Hashes
    packages: dict[str, str | None]
    device: dict[str, Any]
    timing: Timing
    peak_memory: PeakMemory
    metrics: dict[str, Any]  # every glued data scrap of the output notebook
    receipt_sha256: str  # over every other field (canonical JSON)

    def as_dict(self) -> dict:
        return self.model_dump(mode="json")


class ReceiptV3(ReceiptV2):
    """Schema version 3: before receipts listed the code files the run imported (read, never written)."""

    schema_version: Literal[3]  # type: ignore[assignment]  # each schema its own version
    backend: Backend  # where it executed; not part of the run key


class ReceiptV4(ReceiptV2):
    """Schema version 4: imported files by their bytes, outcomes and the notebook stored as JSON (read, never
    written; ``agentpost migrate`` makes them version 5)."""

    schema_version: Literal[4]  # type: ignore[assignment]  # each schema its own version
    backend: Backend  # where it executed; not part of the run key
    #: sha256 of every file of the project's code (CODE_PATTERNS' .py files, by path relative to the code root)
    #: that the run's kernel had imported when its last cell finished.
    imported_code: dict[str, str]


class Receipt(ReceiptV2):
    """One run: a chapter notebook executed by papermill at one profile (plus overrides) and one seed."""

    schema_version: Literal[5]  # type: ignore[assignment]  # each schema its own version
    backend: Backend  # where it executed; not part of the run key
    #: Code hash (hashing.code_hash) of every file of the project's code (CODE_PATTERNS' .py files, by path relative
    #: to the code root) that the run's kernel had imported when its last cell finished: staleness is judged by
    #: these, so an edit elsewhere in the tree, or of a docstring or comment, does not make the run old. Not part of
    #: the run key (the cache keys on the whole tree).
    imported_code: dict[str, str]
    notebook_code: str  # hashing.notebook_code_hash of the executed notebook: its code cells, not its prose
    outcomes_sha256: str | None  # sha256 of outcomes.parquet (None: the run recorded no per-item outcomes)


#: The model of each schema version that still reads.
MODELS: dict[int, type[ReceiptV2]] = {2: ReceiptV2, 3: ReceiptV3, 4: ReceiptV4, 5: Receipt}


def json_schema() -> dict:
    """The receipt's JSON schema (generated from :class:`Receipt`)."""
    return Receipt.model_json_schema()


# ---------------------------------------------------------------- hashing rules and keys


@functools.lru_cache(maxsize=None)
def source_notebook(chapter_id: str):
    """The chapter's source notebook, read once per process (planning, hashing and validation share it)."""
    import nbformat

    from agentpost.catalogue import chapter as get_chapter

    return nbformat.read(get_chapter(chapter_id).notebook, as_version=4)


def code_root() -> Path:
    """The folder holding the ``agentpost`` package this process imported. A run's kernel imports the same one (same
    interpreter, same environment), so the code hash describes the code that ran, even when ``PYTHONPATH`` or an
    editable install points elsewhere than the checkout ``AGENTPOST_ROOT`` names."""
    import agentpost

    return Path(agentpost.__file__).resolve().parent.parent


@functools.lru_cache(maxsize=None)
def code_tree_hash() -> str:
    return sha256_tree(code_root(), CODE_PATTERNS)


def changed_code(imported: dict[str, str], by_code: bool = True) -> list[str]:
    """The files of ``imported`` (``{path relative to the code root: hash}``) that differ now or are gone: by their
    code hash (schema 5, :func:`agentpost.record.hashing.code_hash`) or, with ``by_code=False``, their bytes'
    sha256 (schema 4)."""
    root = code_root()
    digest_of = code_file_hash if by_code else sha256_file
    changed = []
    for rel, digest in sorted(imported.items()):
        path = root / rel
        try:
            same = _inside(str(path), str(root)) and digest_of(path) == digest
        except (OSError, UnicodeDecodeError):
            same = False
        if not same:
            changed.append(rel)
    return changed


@functools.lru_cache(maxsize=None)
def _inside(path: str, root: str) -> bool:
    """Whether ``path`` resolves inside ``root`` (once per process and path: links do not move under a command)."""
    return Path(path).resolve().is_relative_to(root)


def code_file_hash(path: Path) -> str:
    """:func:`code_hash` of a Python file, kept in the project's cache under the sha256 of its bytes (itself
    memoized on path, size and mtime), so a command does not parse every imported file again."""
    from agentpost.project import cache_root

    digest = sha256_file(path)
    kept = cache_root() / "code-hashes" / f"{CODE_HASH_RULE}-{digest}"
    try:
        return kept.read_text(encoding="ascii")
    except OSError:
        pass
    value = code_hash(path.read_bytes().decode("utf-8"))
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(kept, value)
    except OSError:  # a read-only cache only costs time
        pass
    return value


@functools.lru_cache(maxsize=None)
def current_notebook_code(chapter_id: str) -> str:
    """:func:`notebook_code_hash` of the chapter's source notebook as it is now."""
    return notebook_code_hash(source_notebook(chapter_id))


def data_hashes(datasets: tuple[str, ...]) -> dict[str, str]:
    """sha256 of every file of the given data sets (each checked against its SOURCE.md when read)."""
    from agentpost.data.registry import DATASETS, data_file

    return {f"{n}/{f}": sha256_file(data_file(n, f)) for n in datasets for f in DATASETS[n]}


def parameter_hash(parameters: dict) -> str:
    """Hash of the parameters without the seed: equal across the seeds of one configuration."""
    return sha256_json({k: v for k, v in parameters.items() if k != "seed"})


def input_hashes(notebook: dict, parameters: dict, datasets: tuple[str, ...]) -> dict:
    """Every input that defines a run except the seed, from the already-read source ``notebook``."""
    return {
        "source_notebook": notebook_source_hash(notebook),
        "parameters": parameter_hash(parameters),
        "code_tree": code_tree_hash(),
        "data": data_hashes(datasets),
    }


def input_hashes_of(receipt: dict) -> dict:
    """The input hashes a receipt records (its hashes without the output notebook's)."""
    return {k: v for k, v in receipt["hashes"].items() if k != "output_notebook"}


def run_key(chapter: str, profile: str, kind: str, seed: int, hashes: dict) -> str:
    """The content address of one run: a run with the same key is not executed again."""
    return sha256_json({"chapter": chapter, "profile": profile, "kind": kind, "seed": seed, **hashes})[:16]


def run_key_of(receipt: dict) -> str:
    return run_key(receipt["chapter"], receipt["profile"], receipt["kind"], receipt["seed"], input_hashes_of(receipt))


def configuration_key(receipt: dict) -> str:
    """Everything about a run except its seed: the seeds of one configuration share this key.

    A receipt that lists its imported code (schema 4) is keyed by those files instead of the whole tree, so seeds
    run before and after an edit the run never imports (``agentpost run CHAPTER --seeds 45,46`` a week later)
    still replicate one configuration; schema 5 keys them by their code hashes and the notebook by its code cells,
    so an edit of a docstring, a comment or the chapter's prose does not split a configuration either."""
    hashes = input_hashes_of(receipt)
    if receipt.get("schema_version", 0) >= 5:
        hashes = {
            **{k: v for k, v in hashes.items() if k not in ("code_tree", "source_notebook")},
            "imported_code": sha256_json(receipt["imported_code"]),
            "notebook_code": receipt["notebook_code"],
        }
    elif receipt.get("imported_code"):
        hashes = {
            **{k: v for k, v in hashes.items() if k != "code_tree"},
            "imported_code": sha256_json(receipt["imported_code"]),
        }
    return sha256_json(
        {"chapter": receipt["chapter"], "profile": receipt["profile"], "kind": receipt.get("kind"), **hashes}
    )


# ---------------------------------------------------------------- where runs live


def runs_root() -> Path:
    return project_root() / RUNS_DIR


def run_folder(chapter: str, profile: str, kind: str, seed: int, key: str) -> Path:
    """A run's folder relative to :func:`runs_root`: ``<chapter>/<profile>[/ad-hoc]/seed-<seed>-<key>``."""
    base = Path(chapter) / profile / (ADHOC_DIR if kind == "ad-hoc" else "")
    return base / f"seed-{seed}-{key}"


#: The name of a run folder (:func:`run_folder`); the key is checked against the receipt by validation.
RUN_FOLDER_NAME = re.compile(r"seed-[0-9]+-[0-9A-Za-z]+")


def misplaced(run_dir: Path) -> bool:
    """Whether ``run_dir``, a folder holding a receipt under the runs root, is not where any run is written
    (:func:`run_folder`): a stray receipt (``book/runs/receipt.json``, ``book/runs/<chapter>/receipt.json``), never a
    run. A folder outside the runs root (``agentpost validate`` of a copy) is judged by the folder check of
    validation instead (its last parts must be the receipt's :func:`run_folder`)."""
    run_dir = Path(run_dir)
    try:
        parts = run_dir.resolve().relative_to(runs_root().resolve()).parts
    except (ValueError, OSError):
        return False
    shape_ok = len(parts) == 3 or (len(parts) == 4 and parts[2] == ADHOC_DIR)
    return not (shape_ok and RUN_FOLDER_NAME.fullmatch(parts[-1]))


def run_dirs(root: Path | None = None) -> list[Path]:
    """Every finished run folder under ``root`` (default: the runs root), profile and ad-hoc runs alike, ``root``
    itself included when it holds a receipt; a folder that is a symbolic link is listed (not followed further), so
    that validation names it instead of skipping it. A receipt in an unexpected place (``book/runs/receipt.json``)
    is listed like any other and found invalid where it lies; it never hides the runs beside or below it, so
    ``list``, ``validate``, ``compare`` and the ledger agree on which runs exist."""
    root = runs_root() if root is None else Path(root)
    found = []
    for folder, subfolders, files in os.walk(root) if root.is_dir() else ():
        if RECEIPT_NAME in files and not Path(folder).name.startswith(".tmp-"):
            found.append(Path(folder))
        found += [
            Path(folder, s)
            for s in subfolders
            if os.path.islink(os.path.join(folder, s)) and os.path.isfile(os.path.join(folder, s, RECEIPT_NAME))
        ]
    return sorted(found)


# ---------------------------------------------------------------- construction, seal, files


def seal(receipt: dict) -> dict:
    """Add the self-hash that makes any later edit of a field detectable (not a signature: see book/receipts.md)."""
    body = {k: v for k, v in receipt.items() if k != "receipt_sha256"}
    return {**body, "receipt_sha256": sha256_json(body)}


def build(**fields: Any) -> Receipt:
    """A sealed, schema-checked receipt from its fields (everything but ``schema_version`` and the seal)."""
    draft = Receipt.model_validate({"schema_version": SCHEMA_VERSION, **fields, "receipt_sha256": ""})
    return Receipt.model_validate(seal(draft.as_dict()))


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` (UTF-8) through a temporary file and a rename."""
    write_atomic_bytes(path, text.encode("utf-8"))


def write_atomic_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and a rename."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def dump(receipt: Receipt | dict) -> str:
    body = receipt.as_dict() if isinstance(receipt, Receipt) else receipt
    return json.dumps(body, indent=2, sort_keys=True) + "\n"


def load_raw(path: Path) -> dict:
    """The receipt as written (validation checks its seal and schema: :func:`agentpost.evidence.validate.check_run`)."""
    return json.loads(Path(path).read_text(encoding="utf-8"))
