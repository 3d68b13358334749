"""Re-execute a chapter notebook in place with its own defaults (the smoke profile), for the committed outputs."""

from __future__ import annotations

import time

import nbformat

from agentpost.evidence.receipt import write_atomic
from agentpost.run.execute import check_scratch, execute_papermill, sanitize_notebook
from agentpost.run.params import started_chapter


def refresh_notebook(chapter_id: str) -> float:
    """Execute ``notebooks/<id>.ipynb`` with no injected parameters and replace it atomically; returns seconds.

    A failing cell raises papermill's error and leaves the committed notebook as it was."""
    chapter, _ = started_chapter(chapter_id)
    check_scratch()
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
