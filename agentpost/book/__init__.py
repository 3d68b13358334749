"""Sphinx extension for the book (listed in ``_config.yml``): fixes that make every page load without console errors.

* Jupyter Book 1 runs sphinx-thebe's ``env-before-read-docs`` handler twice, so every page declared
  ``const THEBE_JS_URL`` twice (a SyntaxError in the browser console); each page keeps the first copy of a script.
The browser test (``tests/e2e/test_browser.py``) is what finds such errors.
"""

from __future__ import annotations


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


def setup(app):
    app.connect("html-page-context", _unique_scripts, priority=900)  # after the themes add their scripts
    return {"parallel_read_safe": True, "parallel_write_safe": True}
