"""How a run folder stores what a run recorded: per-item outcomes once, as a compressed columnar file, and the executed
notebook without the bulk a reader does not need (README, "Evidence that travels"; book/receipts.md).

A run folder holds ``notebook.ipynb``, ``receipt.json`` and, where the run recorded per-item outcomes
(:func:`agentpost.record.outcomes.record_outcomes`), ``outcomes.parquet``: one row per (scrap, arm, item) with its
value, float64 exactly as recorded, zstd-compressed. In the notebook and in the receipt's metrics each outcomes scrap
keeps its metric, its arms' facts and its visible per-arm summary, and its data becomes a reference
(:func:`is_reference`); the receipt seals the file by its sha256 (``outcomes_sha256``). Figures are kept as the
sha256 of their PNG in the output's metadata (the chapter's committed notebook shows them; a run's evidence is its
data). :func:`compact` does this to a freshly executed run, :func:`inflate` undoes it for every reader, so
validation, comparisons, the planner and the ledger read one form whatever the folder holds.
"""

from __future__ import annotations

import copy
import gzip
import shutil
import io
import json
from pathlib import Path
from typing import Any, Callable

from agentpost.record.hashing import sha256_bytes
from agentpost.record.outcomes import KIND, is_outcomes
from agentpost.evidence.receipt import NOTEBOOK_NAME, RECEIPT_NAME, STORED_NOTEBOOK_NAME, write_atomic_bytes
from agentpost.record.recording import SCRAP_MIME

OUTCOMES_NAME = "outcomes.parquet"
REFERENCE_KIND = "outcomes-in-file"
#: Output metadata key under which a dropped figure's PNG hash is kept.
FIGURE_KEY = "figure_sha256"
_COLUMNS = ("scrap", "arm", "item", "value")


def is_reference(value: Any) -> bool:
    return isinstance(value, dict) and value.get("kind") == REFERENCE_KIND


def reference(payload: dict) -> dict:
    """What an outcomes scrap keeps in the notebook and the receipt: all but its items and values."""
    return {
        "kind": REFERENCE_KIND,
        "file": OUTCOMES_NAME,
        "metric": payload["metric"],
        "facts": payload["facts"],
        "arms": sorted(payload["arms"]),
        "n_items": len(payload["items"]),
    }


def outcomes_bytes(payloads: dict[str, dict]) -> bytes:
    """The outcomes file of ``{scrap name: outcomes payload}``: long form, rows in recorded order."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    cols: dict[str, list] = {c: [] for c in _COLUMNS}
    for name, payload in payloads.items():
        for arm, values in payload["arms"].items():
            cols["scrap"] += [name] * len(values)
            cols["arm"] += [arm] * len(values)
            cols["item"] += payload["items"]
            cols["value"] += values
    table = pa.table(
        {
            "scrap": pa.array(cols["scrap"], pa.string()),
            "arm": pa.array(cols["arm"], pa.string()),
            "item": pa.array(cols["item"], pa.string()),
            "value": pa.array(cols["value"], pa.float64()),
        }
    )
    sink = io.BytesIO()
    pq.write_table(table, sink, compression="zstd", use_dictionary=["scrap", "arm", "item"])
    return sink.getvalue()


def read_outcomes(data: bytes) -> dict[str, dict]:
    """``{scrap name: {"items": [...], "arms": {arm: [values]}}}`` from an outcomes file's bytes."""
    import numpy as np
    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO(data), use_threads=False)  # no thread pool left behind in a process that forks
    scrap, arm, item = (table.column(c).to_numpy(zero_copy_only=False) for c in _COLUMNS[:3])
    value = table.column("value").to_numpy()
    if len(value) == 0:
        return {}
    # the rows of one (scrap, arm) are contiguous, in recorded order (outcomes_bytes)
    cuts = [0, *(np.flatnonzero((scrap[1:] != scrap[:-1]) | (arm[1:] != arm[:-1])) + 1).tolist(), len(scrap)]
    out: dict[str, dict] = {}
    for a, b in zip(cuts[:-1], cuts[1:]):
        entry = out.setdefault(str(scrap[a]), {"items": item[a:b].tolist(), "arms": {}})
        entry["arms"][str(arm[a])] = value[a:b].tolist()
    return out


def _full(ref: dict, stored: dict[str, dict], name: str) -> dict:
    if name not in stored:
        raise KeyError(f"outcomes scrap {name!r} is not in {OUTCOMES_NAME}")
    entry = stored[name]
    return {
        "kind": KIND,
        "metric": ref["metric"],
        "items": list(entry["items"]),
        "arms": {arm: list(entry["arms"][arm]) for arm in sorted(entry["arms"])},
        "facts": ref["facts"],
    }


def _outputs(nb: dict):
    """Every output of ``nb``, its scrap bundle (if any) parsed into a dict in place."""
    for cell in nb.get("cells", []):
        for output in cell.get("outputs", []) or []:
            bundle = output.get("data") or {}
            if isinstance(bundle.get(SCRAP_MIME), str):
                bundle[SCRAP_MIME] = json.loads(bundle[SCRAP_MIME])
            yield output


def compact(nb: dict, metrics: dict) -> tuple[dict, dict, bytes | None]:
    """A freshly executed run's (notebook, metrics) in stored form, and its outcomes file's bytes (None: no
    outcomes). The inputs are not changed."""
    nb, metrics = copy.deepcopy(nb), dict(metrics)
    payloads = {name: value for name, value in metrics.items() if is_outcomes(value)}
    for name, payload in payloads.items():
        metrics[name] = reference(payload)
    for output in _outputs(nb):
        bundle = output.get("data") or {}
        scrap = bundle.get(SCRAP_MIME)
        if isinstance(scrap, dict) and is_outcomes(scrap.get("data")):
            scrap["data"] = reference(scrap["data"])
        if "image/png" in bundle:
            png = bundle.pop("image/png")
            output.setdefault("metadata", {}).setdefault("agentpost", {})[FIGURE_KEY] = sha256_bytes(
                "".join(png).encode("ascii")
            )
            bundle.setdefault("text/plain", "<figure>")
    return nb, metrics, (outcomes_bytes(payloads) if payloads else None)


def inflate(nb: dict | None, metrics: dict, outcomes: bytes | None) -> tuple[dict | None, dict]:
    """(notebook, metrics) with every outcomes reference replaced by its recorded items and values, from the bytes of
    the run's outcomes file; inputs without references come back as they are."""
    if not any(is_reference(v) for v in metrics.values()):
        return nb, metrics
    if outcomes is None:
        raise FileNotFoundError(f"the receipt references {OUTCOMES_NAME}, which is missing")
    stored = read_outcomes(outcomes)
    metrics = {name: _full(value, stored, name) if is_reference(value) else value for name, value in metrics.items()}
    if nb is not None:
        nb = copy.deepcopy(nb)
        for output in _outputs(nb):
            scrap = (output.get("data") or {}).get(SCRAP_MIME)
            if isinstance(scrap, dict) and is_reference(scrap.get("data")):
                scrap["data"] = _full(scrap["data"], stored, scrap["name"])
    return nb, metrics


def notebook_path(run_dir: Path) -> Path:
    """The run's executed notebook: gzipped (schema 5) or, in an older run, plain JSON."""
    stored = Path(run_dir) / STORED_NOTEBOOK_NAME
    return stored if stored.exists() or stored.is_symlink() else Path(run_dir) / NOTEBOOK_NAME


def read_notebook_text(path: Path) -> str:
    """The notebook's JSON text (what ``hashes.output_notebook`` hashes), from either form."""
    data = Path(path).read_bytes()
    return (gzip.decompress(data) if path.name.endswith(".gz") else data).decode()


def stored_notebook_bytes(text: str) -> bytes:
    """The bytes of ``notebook.ipynb.gz`` for a notebook's JSON text (no timestamp: equal text, equal bytes)."""
    return gzip.compress(text.encode(), compresslevel=9, mtime=0)


def read_outcomes_file(run_dir: Path) -> bytes | None:
    path = Path(run_dir) / OUTCOMES_NAME
    return path.read_bytes() if path.is_file() else None


class RejectedFolder(RuntimeError):
    """The folder written by :func:`replace_run_folder` failed its check; the previous folder is back in place."""


def replace_run_folder(final: Path, files: dict[str, bytes], check: Callable[[Path], list] | None = None) -> None:
    """Make ``final`` hold exactly ``files``: written into ``.tmp-<name>``, then renamed into place (a folder already
    there is moved aside first and removed last), so a reader never sees half a run. With ``check``, the new folder
    must give no problems in place, or the previous one is put back and :class:`RejectedFolder` raised."""
    tmp = final.with_name(f".tmp-{final.name}")
    old = final.with_name(f".tmp-old-{final.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        for name, data in files.items():
            write_atomic_bytes(tmp / name, data)
        if final.exists():
            shutil.rmtree(old, ignore_errors=True)
            final.rename(old)
        tmp.rename(final)
        problems = check(final) if check is not None else []
        if problems:
            shutil.rmtree(final)
            if old.exists():
                old.rename(final)
            raise RejectedFolder("; ".join(map(str, problems[:3])))
    except BaseException:  # a stop (SIGTERM) mid-write leaves no temporary folder and the old run in place
        shutil.rmtree(tmp, ignore_errors=True)
        if old.exists() and not final.exists():
            old.rename(final)
        raise
    shutil.rmtree(old, ignore_errors=True)


def read_receipt(run_dir: Path) -> dict:
    """A run's receipt with its per-item outcomes read back from ``outcomes.parquet`` (unchecked: ``agentpost
    validate`` checks the seal and the file's hash), for a reader who wants one run's recorded values."""
    receipt = json.loads((Path(run_dir) / RECEIPT_NAME).read_text(encoding="utf-8"))
    return {**receipt, "metrics": inflate(None, receipt["metrics"], read_outcomes_file(run_dir))[1]}
