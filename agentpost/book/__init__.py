"""Sphinx extension for the book (listed in ``_config.yml``): fixes that make every page load without console errors and fit the page.

* In the ledger's and evidence pages' tables, text wraps between whole words and only long metric names may break
  anywhere (``assets/agentpost-book.css``), so a "Recorded metrics across seeds" table fits the page instead of
  hiding its last column, and short columns are not squeezed letter by letter.
* Jupyter Book 1 runs sphinx-thebe's ``env-before-read-docs`` handler twice, so every page declared
  ``const THEBE_JS_URL`` twice (a SyntaxError in the browser console); each page keeps the first copy of a script.
The browser test (``tests/e2e/test_browser.py``) is what finds such errors.

It also puts an "Open in JupyterLab" button in the header of every chapter page (``notebooks/<chapter>``): a link to
the same notebook in the JupyterLab that ``make lab`` serves (root ``notebooks/``, at ``agentpost_lab_url`` in
``_config.yml``, ``http://localhost:8888`` by default). It needs no network; the link works while ``make lab`` runs.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import quote

ASSETS = Path(__file__).parent / "assets"


def _unique_scripts(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for script in scripts:
        # the two copies differ only in filename None vs "" (an inline script either way)
        key = (getattr(script, "filename", None) or "", repr(sorted(getattr(script, "attributes", {}).items())))
        if key not in seen:
            seen.add(key)
            unique.append(script)
    scripts[:] = unique


#: The folder ``make lab`` serves as JupyterLab's root; its notebooks are the chapter pages.
LAB_ROOT = "notebooks"


def lab_link(lab_url: str, docname: str) -> str | None:
    """The JupyterLab URL of chapter page ``docname`` (``notebooks/graft`` -> ``<lab_url>/lab/tree/graft.ipynb``),
    or None for a page that is not a chapter notebook."""
    folder, _, name = docname.partition("/")
    if folder != LAB_ROOT or not name:
        return None
    return f"{lab_url.rstrip('/')}/lab/tree/{quote(name)}.ipynb"


def _lab_button(app, pagename, templatename, context, doctree) -> None:
    url = lab_link(app.config.agentpost_lab_url, pagename)
    if url is None or "header_buttons" not in context or context.get("page_source_suffix") != ".ipynb":
        return
    context["header_buttons"].insert(
        0,
        {
            "type": "link",
            "url": url,
            "icon": "fas fa-flask",
            "text": "Open in JupyterLab",
            "label": "jupyterlab-button",
            "tooltip": "Run this notebook in the local JupyterLab (start it with make lab)",
        },
    )


def _add_assets(app, config) -> None:
    config.html_static_path.append(str(ASSETS))


def setup(app):
    app.add_config_value("agentpost_lab_url", "http://localhost:8888", "html")
    app.connect("config-inited", _add_assets)
    app.add_css_file("agentpost-book.css")
    app.connect("html-page-context", _unique_scripts, priority=900)  # after the themes add their scripts
    app.connect("html-page-context", _lab_button, priority=600)  # after sphinx-book-theme's buttons (501)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
