"""Re-execute a chapter notebook in place with its own defaults (the smoke profile), for the committed outputs."""

from __future__ import annotations

import time

import nbformat

from agentpost.catalogue import chapter as get_chapter
from agentpost.errors import UsageError
from agentpost.evidence.receipt import write_atomic
from agentpost.run.execute import execute_papermill, sanitize_notebook
from agentpost.run.params import read_notebook


def refresh_notebook(chapter_id: str) -> float:
    """Execute ``notebooks/<id>.ipynb`` with no injected parameters and replace it atomically; returns seconds.

    A failing cell raises papermill's error and leaves the committed notebook as it was."""
    try:
        chapter = get_chapter(chapter_id)
    except KeyError as err:
        raise UsageError(str(err.args[0])) from None
    if not chapter.started:
        raise UsageError(f"{chapter_id}: no notebook yet (notebooks/{chapter_id}.ipynb); the chapter is not started")
    read_notebook(chapter.notebook)
    tmp = chapter.notebook.with_name(f".{chapter.id}.refresh.ipynb")
    t0 = time.perf_counter()
    try:
        execute_papermill(chapter.notebook, tmp, progress_bar=True)
        nb = sanitize_notebook(nbformat.read(tmp, as_version=4))
        nb.get("metadata", {}).pop("papermill", None)
        for cell in nb["cells"]:
            cell.get("metadata", {}).pop("papermill", None)
            cell.get("metadata", {}).pop("execution", None)
        write_atomic(chapter.notebook, nbformat.writes(nbformat.from_dict(nb)) + "\n")
    finally:
        tmp.unlink(missing_ok=True)
    return time.perf_counter() - t0
