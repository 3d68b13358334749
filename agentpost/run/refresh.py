"""Re-execute a chapter notebook in place with its own defaults (the smoke profile), for the committed outputs."""

from __future__ import annotations

import time

import nbformat
import papermill

from agentpost.catalogue import chapter as get_chapter
from agentpost.evidence.receipt import write_atomic
from agentpost.run.execute import sanitize_notebook


def refresh_notebook(chapter_id: str) -> float:
    """Execute ``notebooks/<id>.ipynb`` with no injected parameters and replace it atomically; returns seconds."""
    chapter = get_chapter(chapter_id)
    tmp = chapter.notebook.with_name(f".{chapter.id}.refresh.ipynb")
    t0 = time.perf_counter()
    try:
        papermill.execute_notebook(str(chapter.notebook), str(tmp), kernel_name="python3", cwd=str(chapter.notebook.parent),
                                   progress_bar=True, request_save_on_cell_execute=False)
        nb = sanitize_notebook(nbformat.read(tmp, as_version=4))
        nb.get("metadata", {}).pop("papermill", None)
        for cell in nb["cells"]:
            cell.get("metadata", {}).pop("papermill", None)
            cell.get("metadata", {}).pop("execution", None)
        write_atomic(chapter.notebook, nbformat.writes(nbformat.from_dict(nb)) + "\n")
    finally:
        tmp.unlink(missing_ok=True)
    return time.perf_counter() - t0
