"""Sphinx extension for the book (listed in ``_config.yml``): fixes that make every page load without console errors and fit the page.

* In the ledger's and evidence pages' tables, text wraps between whole words and only long metric names may break
  anywhere (``assets/agentpost-book.css``), so a "Recorded metrics across seeds" table fits the page instead of
  hiding its last column, and short columns are not squeezed letter by letter.
* Jupyter Book 1 runs sphinx-thebe's ``env-before-read-docs`` handler twice, so every page declared
  ``const THEBE_JS_URL`` twice (a SyntaxError in the browser console); each page keeps the first copy of a script.
The browser test (``tests/e2e/test_browser.py``) is what finds such errors.
"""

from __future__ import annotations

from pathlib import Path

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


def _add_assets(app, config) -> None:
    config.html_static_path.append(str(ASSETS))


def setup(app):
    app.connect("config-inited", _add_assets)
    app.add_css_file("agentpost-book.css")
    app.connect("html-page-context", _unique_scripts, priority=900)  # after the themes add their scripts
    return {"parallel_read_safe": True, "parallel_write_safe": True}
