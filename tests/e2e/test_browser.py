"""The built book in a real browser (headless Chromium driven by Playwright): what a reader sees.

The book is built from the committed notebooks in a throwaway copy of the project (no runs: the evidence pages
then say so). Every page -- the index, the ledger, each chapter and evidence page -- must load with no console
error; every glued value (``{glue:text}``) must be visible and non-empty; math must be typeset by MathJax (served
from the book itself, so this holds offline); every image must load; every local link and anchor must resolve;
the tables of the generated ledger and evidence pages must fit the page (none wider than its container; the
machine-to-machine spread table, nine numeric columns, keeps a scroll bar) and stay readable at a 1400-pixel
window: no word of a cell's text breaks across lines (only long metric names, inline code, may).
Chromium comes from the Debian package (``.ci/run`` installs it where missing).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest

from agentpost.project import project_root

REPO = project_root()
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
VIEWPORT = {"width": 1400, "height": 900}
#: Words of a generated table's cells (outside inline code) that render on more than one line: ``[cell, word]``
#: (the parts of a hyphenated word count as words: a line may end after a hyphen).
BROKEN_WORDS_JS = """() => {
  const broken = [];
  const tables = Array.from(document.querySelectorAll('.pst-scrollable-table-container > table:not(.dataframe)'))
    .filter(t => !t.closest('#machine-to-machine-spread'));
  for (const table of tables) {
    const walker = document.createTreeWalker(table, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      if (node.parentElement.closest('code')) continue;
      for (const match of node.textContent.matchAll(/[^\\s-]+-?/g)) {  // a break after a hyphen is a normal one
        const range = document.createRange();
        range.setStart(node, match.index);
        range.setEnd(node, match.index + match[0].length);
        const lines = new Set(Array.from(range.getClientRects()).filter(r => r.width > 0).map(r => Math.round(r.top)));
        if (lines.size > 1) broken.push([node.parentElement.closest('th, td').textContent.trim().slice(0, 40), match[0]]);
      }
    }
  }
  return broken;
}"""
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (install the Debian package 'chromium')")


@pytest.fixture(scope="module")
def html_root(tmp_path_factory) -> Path:
    project = tmp_path_factory.mktemp("browser-book")
    for name in ("pyproject.toml", "setup.py", "_config.yml"):
        if (REPO / name).exists():
            shutil.copy(REPO / name, project / name)
    for folder in ("book", "params", "notebooks"):
        shutil.copytree(
            REPO / folder, project / folder, ignore=shutil.ignore_patterns("runs", "generated", "__pycache__")
        )
    report = project / "claims.json"
    report.write_text("{}")
    env = {**os.environ, "AGENTPOST_ROOT": str(project)}
    ledger = subprocess.run(
        [sys.executable, "-m", "agentpost", "ledger", "--claims-report", str(report)],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
    )
    assert ledger.returncode == 0, ledger.stderr[-3000:]
    jb = shutil.which("jupyter-book", path=str(Path(sys.executable).parent)) or "jupyter-book"
    build = subprocess.run(
        [jb, "build", str(project), "-W", "-n", "--keep-going", "--path-output", str(project)],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
    )
    warnings = [line for line in (build.stdout + build.stderr).splitlines() if "WARNING" in line or "ERROR" in line]
    assert build.returncode == 0, "\n".join(warnings[:20]) or build.stderr[-3000:]
    return project / "_build" / "html"


def book_pages(html: Path) -> list[Path]:
    """The index (the page its redirect points to), the ledger, every chapter and every evidence page."""
    index = html / "index.html"
    redirect = re.search(r'http-equiv="Refresh" content="0; url=([^"]+)"', index.read_text(encoding="utf-8"), re.I)
    pages = [(html / redirect.group(1)) if redirect else index, html / "book" / "generated" / "ledger.html"]
    pages += sorted((html / "notebooks").glob("*.html")) + sorted(
        (html / "book" / "generated" / "evidence").glob("*.html")
    )
    return [p for p in pages if p.is_file()]


def _ids(page: Path, cache: dict) -> set[str]:
    if page not in cache:
        cache[page] = set(re.findall(r'\bid="([^"]+)"', page.read_text(encoding="utf-8")))
    return cache[page]


def test_every_page_loads_cleanly_with_values_math_images_and_links(html_root):
    from playwright.sync_api import sync_playwright

    pages = book_pages(html_root)
    notebooks = sorted(p.stem for p in (REPO / "notebooks").glob("*.ipynb"))
    assert {p.stem for p in pages if p.parent.name == "notebooks"} == set(notebooks)
    problems: list[str] = []
    ids_cache: dict = {}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        for path in pages:
            page = browser.new_page(viewport=VIEWPORT)
            errors: list[str] = []
            page.on("console", lambda msg, errors=errors: errors.append(msg.text) if msg.type == "error" else None)
            page.on("pageerror", lambda exc, errors=errors: errors.append(str(exc)))
            page.goto(path.as_uri(), wait_until="load")
            name = path.relative_to(html_root).as_posix()
            if page.evaluate("document.querySelector('.math') !== null"):
                page.wait_for_function("window.MathJax && MathJax.startup && MathJax.startup.promise", timeout=20000)
                page.evaluate("MathJax.startup.promise")
                typeset = page.evaluate("document.querySelectorAll('mjx-container').length")
                raw = page.evaluate(
                    "Array.from(document.querySelectorAll('.math')).filter(e => !e.querySelector('mjx-container')).length"
                )
                if not typeset or raw:
                    problems.append(f"{name}: math not typeset ({typeset} typeset, {raw} raw)")
            empty = page.evaluate(
                "Array.from(document.querySelectorAll('.pasted-text, .pasted-inline'))"
                ".filter(e => !e.textContent.trim() || e.offsetParent === null).length"
            )
            if empty:
                problems.append(f"{name}: {empty} glued value(s) empty or hidden")
            broken = page.evaluate(
                "Array.from(document.images).filter(i => !(i.complete && i.naturalWidth > 0))"
                ".map(i => i.getAttribute('src') || '').slice(0, 5)"
            )
            if broken:
                problems.append(f"{name}: images that do not load: {broken}")
            for href in page.evaluate("Array.from(document.querySelectorAll('a[href]')).map(a => a.href)"):
                url = urlparse(href)
                if url.scheme != "file":
                    continue
                target = Path(unquote(url.path))
                if not target.exists():
                    problems.append(
                        f"{name}: link to missing {target.relative_to(html_root) if html_root in target.parents else target}"
                    )
                elif url.fragment and target.suffix == ".html" and unquote(url.fragment) not in _ids(target, ids_cache):
                    problems.append(f"{name}: anchor #{url.fragment} not in {target.name}")
            if "/generated/" in f"/{name}":  # the ledger's and evidence pages' tables fit the page (no hidden column)
                # (the nine numeric columns of the machine-to-machine spread table keep their scroll bar)
                wide = page.evaluate(
                    "Array.from(document.querySelectorAll('.pst-scrollable-table-container'))"
                    ".filter(c => !c.closest('#machine-to-machine-spread'))"
                    ".filter(c => c.scrollWidth > c.clientWidth + 1).length"
                )
                if wide:
                    problems.append(
                        f"{name}: {wide} table(s) wider than the page (a column hidden behind a scroll bar)"
                    )
                if broken := page.evaluate(BROKEN_WORDS_JS):
                    problems.append(
                        f"{name}: {len(broken)} word(s) broken across lines in table cells, e.g. {broken[:3]}"
                    )
            if errors:
                problems.append(f"{name}: console errors {errors[:3]}")
            page.close()
        browser.close()
    assert not problems, "\n".join(problems)
