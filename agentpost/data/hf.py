"""The one home of 🤗 ``datasets`` in the project: data files as Arrow tables, and the hub fallback.

* :func:`local_rows` reads a data file (checked by :func:`agentpost.data.registry.data_file`) with
  ``datasets.load_dataset("json" | "text" | "csv", data_files=...)``: the rows are an Arrow table, memory-mapped
  from the project cache (:func:`agentpost.project.cache_root` ``/datasets``, never the data folder, which may be
  read-only) and re-used while the file's fingerprint is unchanged.
* :func:`from_hub` is the last resort of :func:`agentpost.data.registry.dataset_dir` on a machine without a local
  copy: it loads the public hub copy named in :data:`agentpost.data.sources.HUB_SOURCES` (``openai/gsm8k``,
  ``Salesforce/wikitext``), writes each file back in the local format, and keeps it only if its size and sha256
  are those of the data set's SOURCE.md. Offline (``HF_HUB_OFFLINE=1``) or with the hub unreachable it raises
  :class:`~agentpost.data.sources.DataMissingError` saying what to do. Tests never take this path to the hub.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from pathlib import Path

from agentpost.data.sources import HUB_SOURCES, DataChecksumError, DataMissingError
from agentpost.project import cache_root, hub_offline


def datasets_cache() -> Path:
    """The ``datasets`` cache of the project (Arrow files of local data and hub downloads)."""
    return cache_root() / "datasets"


@contextlib.contextmanager
def _quiet():
    """No "Generating split" bars or info logs: loading a few MB is not long work, and notebooks keep stderr clean."""
    import datasets
    from datasets.utils import logging as ds_logging

    bars_were_off, level = datasets.are_progress_bars_disabled(), ds_logging.get_verbosity()
    datasets.disable_progress_bars()
    ds_logging.set_verbosity_error()
    try:
        yield
    finally:
        ds_logging.set_verbosity(level)
        if not bars_were_off:
            datasets.enable_progress_bars()


def local_rows(path: Path, builder: str, **config):
    """``datasets.Dataset`` of the data file ``path`` (from :func:`agentpost.data.registry.data_file`, which checks
    and records it), in file order.

    ``builder`` is a packaged ``datasets`` builder (``"json"``, ``"text"``, ``"csv"``); ``config`` goes to it
    (e.g. ``keep_linebreaks=True`` for text)."""
    import datasets

    with _quiet():
        return datasets.load_dataset(
            builder, data_files={"rows": str(path)}, split="rows", cache_dir=str(datasets_cache()), **config
        )


def _gsm8k_file(rows) -> bytes:
    """openai/gsm8k rows -> the repository's JSONL (``json.dumps`` of ``{"question", "answer"}`` per line)."""
    return "".join(json.dumps({"question": r["question"], "answer": r["answer"]}) + "\n" for r in rows).encode("utf-8")


def _wikitext_file(rows) -> bytes:
    """Salesforce/wikitext rows (one per line, newline kept; the loader turned the blank ``" \\n"`` lines into
    ``""``) -> the ``wiki.*.tokens`` file."""
    return "".join(r["text"] or " \n" for r in rows).encode("utf-8")


#: How each hub copy is written back in the local file format.
REBUILD = {"gsm8k": _gsm8k_file, "wikitext-2": _wikitext_file}


def _source_md(name: str, source) -> str:
    rows = "\n".join(f"| {f} | {size} | {digest} |" for f, (_split, size, digest) in source.files.items())
    return (
        f"# {name}, rebuilt from the hub copy {source.repo} ({source.config})\n\n"
        f"Written by agentpost.data.hf.from_hub; every file matched the size and sha256 of the data set's SOURCE.md.\n\n"
        f"## Files\n| file | bytes | sha256 |\n|---|---|---|\n{rows}\n"
    )


def _complete(folder: Path, source) -> bool:
    return (folder / "SOURCE.md").is_file() and all((folder / f).is_file() for f in source.files)


def from_hub(name: str) -> Path:
    """Folder (in the project cache) holding data set ``name`` rebuilt from its hub copy and checked (module doc)."""
    source = HUB_SOURCES[name]
    folder = cache_root() / "data" / name
    if _complete(folder, source):
        return folder
    try:
        import datasets

        with _quiet():
            splits = datasets.load_dataset(source.repo, source.config, cache_dir=str(datasets_cache()))
    except Exception as err:  # the hub client raises several unrelated types for "not reachable"
        where = (
            "HF_HUB_OFFLINE is set and the datasets cache has no copy"
            if hub_offline()
            else "the Hugging Face hub could not be reached"
        )
        detail = str(err).splitlines()[0] if str(err) else ""
        raise DataMissingError(
            f"its hub copy {source.repo} ({source.config}) cannot be loaded: "
            f"{where}. Set AGENTPOST_DATA to a folder holding {name}/ (as ../shared/data does), or run once with "
            f"network access. ({type(err).__name__}: {detail})"
        ) from err
    tmp = folder.with_name(f".{name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        for filename, (split, size, digest) in source.files.items():
            data = REBUILD[name](splits[split])
            actual = hashlib.sha256(data).hexdigest()
            if len(data) != size or actual != digest:
                raise DataChecksumError(
                    f"{source.repo} ({source.config}) split {split!r} rebuilds {name}/{filename} with {len(data)} bytes, "
                    f"sha256 {actual[:12]}…; {name}/SOURCE.md records {size} bytes, sha256 {digest[:12]}…. The hub copy "
                    f"differs from the data the chapters were run on; use a local copy (AGENTPOST_DATA)."
                )
            (tmp / filename).write_bytes(data)
        (tmp / "SOURCE.md").write_text(_source_md(name, source), encoding="utf-8")
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return folder
