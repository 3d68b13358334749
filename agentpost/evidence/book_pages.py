"""Sphinx extension (listed in ``_config.yml``): what the book's pages show of the code and of cells' outputs.

* The hand-written pages cite values of the code as MyST substitutions instead of typing them:
  ``{{ receipt_schema_version }}`` is :data:`agentpost.evidence.receipt.SCHEMA_VERSION`.
* A progress bar is not a result: the lines a text progress bar (tqdm) writes into a cell's stderr are left out of
  the page (:func:`without_progress_bars`; ``agentpost refresh`` leaves them out of the committed notebooks too);
  what else the stream says (a warning) stays.
* A table header row without text (a Markdown key/value table must have one) is not shown as an empty row.

No chapter notebook imports this module (the runs' code hashes do not depend on it).
"""

from __future__ import annotations

import re

#: One state of a text progress bar: ``desc: 42%|████▏     | 5/12 [00:11<00:16,  2.31s/it]`` (tqdm's format).
PROGRESS_BAR = re.compile(r"^[^\n]*\d+%\|[^|\n]*\| *\d+(?:\.\d+)?[kMG]?/\d+(?:\.\d+)?[kMG]? \[[^\]\n]*\]\s*$")


def without_progress_bars(text: str) -> str:
    """``text`` (a cell's stderr) without the states of text progress bars; empty when nothing else was written."""
    kept = [line for line in re.split(r"[\r\n]", text) if line.strip() and not PROGRESS_BAR.match(line)]
    return "\n".join(kept) + "\n" if kept else ""


def substitutions() -> dict[str, str]:
    """The code's values the hand-written pages cite (``{{ name }}``)."""
    from agentpost.evidence.receipt import SCHEMA_VERSION

    return {"receipt_schema_version": str(SCHEMA_VERSION)}


def _add_substitutions(app, config) -> None:
    config.myst_substitutions = {**(config.myst_substitutions or {}), **substitutions()}


def _tidy(app, doctree) -> None:
    from docutils import nodes

    for block in list(doctree.findall(nodes.literal_block)):
        if "stderr" not in block.get("classes", []):
            continue
        text = without_progress_bars(block.astext())
        if text == block.astext():
            continue
        if text:
            block.clear()
            block += nodes.Text(text)
        else:
            parent = block.parent
            parent.remove(block)
            if isinstance(parent, nodes.container) and not parent.children:
                parent.parent.remove(parent)
    for head in list(doctree.findall(nodes.thead)):
        if not head.astext().strip():
            head.parent.remove(head)


def setup(app):
    app.connect("config-inited", _add_substitutions)
    app.connect("doctree-read", _tidy)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
