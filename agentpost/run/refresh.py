"""Re-execute a chapter notebook in place with its own defaults (the smoke profile), for the committed outputs.

The committed outputs keep what a reader needs: progress bars are left out of the cells' stderr
(:func:`agentpost.evidence.book_pages.without_progress_bars`), the rest of the stream stays.
"""

from __future__ import annotations

import time

import nbformat

from agentpost.evidence.book_pages import without_progress_bars
from agentpost.evidence.receipt import write_atomic
from agentpost.run.execute import check_scratch, execute_papermill, sanitize_notebook
from agentpost.run.params import started_chapter


def drop_progress_bars(outputs: list) -> list:
    """A cell's outputs with progress bars left out of its stderr streams (a stream left empty is dropped)."""
    kept = []
    for out in outputs:
        if out.get("output_type") == "stream" and out.get("name") == "stderr":
            text = without_progress_bars("".join(out.get("text", "")))
            if not text:
                continue
            out = {**out, "text": text}
        kept.append(out)
    return kept


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
            if "outputs" in cell:
                cell["outputs"] = drop_progress_bars(cell["outputs"])
        write_atomic(chapter.notebook, nbformat.writes(nbformat.from_dict(nb)) + "\n")
    finally:
        tmp.unlink(missing_ok=True)
    return time.perf_counter() - t0
