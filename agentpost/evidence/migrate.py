"""``agentpost migrate``: a schema 4 run folder rewritten once into schema 5, its recorded evidence kept bit for bit.

What changes (:mod:`agentpost.evidence.run_store`, :mod:`agentpost.evidence.receipt`): per-item outcomes move from the
notebook and the receipt into ``outcomes.parquet``; figures leave the notebook (their PNG hashes stay); the notebook
is gzipped; ``imported_code`` becomes each imported file's code hash and ``notebook_code`` is added, so the run is
judged stale by what can change its numbers. The code hashes are computed from the very files the run imported: the
current file where its bytes still have the recorded sha256, otherwise the version in the repository's git history
with that sha256. Nothing is typed: a file that cannot be found that way leaves the run as it is.

Before a folder is replaced, the outcomes and every glued value read back from the new form must equal the old
ones exactly (canonical JSON, so every float to its last bit); after, the new folder must validate where it lies,
or the old one is put back.
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
from pathlib import Path

import nbformat

from agentpost.evidence import receipt as rc
from agentpost.evidence import run_store
from agentpost.record.hashing import code_hash, notebook_code_hash, sha256_bytes, sha256_file, sha256_json
from agentpost.record.recording import read_scraps
from agentpost.evidence.validate import check_run


class NotMigrated(RuntimeError):
    """Why a run folder was left as it is."""


@functools.lru_cache(maxsize=1)
def _history_sources() -> dict[str, bytes]:
    """``{sha256: bytes}`` of every Python file version of ``agentpost/`` and ``kernels/`` in the git history of the
    code root (empty where it is not a git checkout)."""
    root = rc.code_root()
    try:
        listing = subprocess.run(
            ["git", "-C", str(root), "rev-list", "--all", "--objects", "--", "agentpost", "kernels"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    blobs = sorted({line.split(" ", 1)[0] for line in listing.splitlines() if line.endswith(".py") and " " in line})
    if not blobs:
        return {}
    out = subprocess.run(
        ["git", "-C", str(root), "cat-file", "--batch"],
        input=("\n".join(blobs) + "\n").encode(),
        capture_output=True,
        check=True,
    ).stdout
    found, pos = {}, 0
    while pos < len(out):
        header_end = out.index(b"\n", pos)
        _, kind, size = out[pos:header_end].split(b" ")
        data = out[header_end + 1 : header_end + 1 + int(size)]
        pos = header_end + 1 + int(size) + 1
        if kind == b"blob":
            found[hashlib.sha256(data).hexdigest()] = data
    return found


def source_with_digest(rel: str, digest: str) -> str:
    """The text of the file ``rel`` whose bytes had sha256 ``digest`` when a run imported it."""
    path = rc.code_root() / rel
    if path.is_file() and sha256_file(path) == digest:
        return path.read_text(encoding="utf-8")
    data = _history_sources().get(digest)
    if data is None:
        raise NotMigrated(
            f"{rel} as the run imported it (sha256 {digest[:12]}) is neither the current file nor in the git history"
        )
    return data.decode("utf-8")


def migrated_files(run_dir: Path) -> dict[str, bytes]:
    """The files of the schema 5 form of a valid schema 4 run (checked to hold the same evidence)."""
    report = check_run(run_dir)
    if report.problems:
        raise NotMigrated(
            f"it does not validate ({report.problems[0].field}: {report.problems[0].message}); "
            "`agentpost validate` names why"
        )
    raw = rc.load_raw(run_dir / rc.RECEIPT_NAME)
    if raw["schema_version"] != 4:
        raise NotMigrated(
            f"schema {raw['schema_version']}: only schema 4 runs (which list their imported code) "
            "migrate" + (" (already current)" if raw["schema_version"] == rc.SCHEMA_VERSION else "")
        )
    nb_text = run_store.read_notebook_text(run_store.notebook_path(run_dir))
    nb = nbformat.reads(nb_text, as_version=4)
    code = {rel: code_hash(source_with_digest(rel, digest)) for rel, digest in sorted(raw["imported_code"].items())}
    stored_nb, metrics, outcomes = run_store.compact(nb, raw["metrics"])
    stored_text = nbformat.writes(nbformat.from_dict(stored_nb)) + "\n"
    fields = {k: v for k, v in raw.items() if k not in ("schema_version", "receipt_sha256")}
    fields.update(
        imported_code=code,
        notebook_code=notebook_code_hash(nb),
        metrics=metrics,
        outcomes_sha256=None if outcomes is None else sha256_bytes(outcomes),
        hashes={**raw["hashes"], "output_notebook": sha256_bytes(stored_text.encode())},
    )
    receipt = rc.build(**fields)
    back_nb, back_metrics = run_store.inflate(nbformat.reads(stored_text, as_version=4), metrics, outcomes)
    assert back_nb is not None  # inflate returns the notebook it was given
    if sha256_json(back_metrics) != sha256_json(raw["metrics"]) or sha256_json(read_scraps(back_nb)) != sha256_json(
        read_scraps(nb)
    ):
        raise NotMigrated("its recorded values would not read back bit for bit from the compact form")
    files = {
        rc.STORED_NOTEBOOK_NAME: run_store.stored_notebook_bytes(stored_text),
        rc.RECEIPT_NAME: rc.dump(receipt).encode(),
    }
    if outcomes is not None:
        files[run_store.OUTCOMES_NAME] = outcomes
    return files


def migrate_run(run_dir: Path) -> None:
    """Replace a schema 4 run folder by its schema 5 form; raises :class:`NotMigrated` (the folder untouched)."""
    files = migrated_files(run_dir)
    try:
        run_store.replace_run_folder(Path(run_dir), files, check=lambda folder: check_run(folder).problems)
    except run_store.RejectedFolder as err:
        raise NotMigrated(f"the new form did not validate ({err}); the old folder is back") from None
