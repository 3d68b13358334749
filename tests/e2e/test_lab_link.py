"""From a chapter page into the running notebook, in a real browser (headless Chromium driven by Playwright).

A one-chapter book (the GRAFT chapter, built from its committed notebook) must load without console errors and show
the "Turn it by hand" section's static view (its figure loads, its table is there, no widget view or widget
JavaScript) and an "Open in JupyterLab" button whose address is ``agentpost_lab_url`` + ``/lab/tree/graft.ipynb``. The test then starts JupyterLab as
``make lab`` does (on a free port, with a token, over a scratch copy of the notebook), logs in once with the token
as the README says, follows the button (its path, on the test server's port), runs the section's cell, moves the
rollouts slider one step and sees the table grow: 3 rollouts have 6 steps, 4 have 9.
Slow: a book build, a JupyterLab server and a kernel (about 1.5 minutes on 2 busy cores).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml

from agentpost.book import lab_link
from agentpost.project import project_root

REPO = project_root()
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
BIN = Path(sys.executable).parent
CHAPTER = "graft"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium on PATH (install the Debian package 'chromium')"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def one_chapter_book(tmp_path_factory) -> tuple[Path, str]:
    """(the built chapter page, the configured lab URL)."""
    project = tmp_path_factory.mktemp("lab-book")
    for name in ("pyproject.toml", "_config.yml"):
        shutil.copy(REPO / name, project / name)
    (project / "notebooks").mkdir()
    shutil.copy(REPO / "notebooks" / f"{CHAPTER}.ipynb", project / "notebooks")
    (project / "_toc.yml").write_text(yaml.safe_dump({"format": "jb-book", "root": f"notebooks/{CHAPTER}"}))
    jb = shutil.which("jupyter-book", path=str(BIN)) or "jupyter-book"
    build = subprocess.run(
        [jb, "build", str(project), "--path-output", str(project)],
        cwd=project,
        env={**os.environ, "AGENTPOST_ROOT": str(project)},
        capture_output=True,
        text=True,
    )
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    config = yaml.safe_load((REPO / "_config.yml").read_text())
    return project / "_build" / "html" / "notebooks" / f"{CHAPTER}.html", config["sphinx"]["config"][
        "agentpost_lab_url"
    ]


@pytest.fixture
def lab_server(tmp_path):
    """JupyterLab as `make lab` starts it (127.0.0.1, a fixed port, a token) over a scratch copy of the chapter."""
    root = tmp_path / "notebooks"
    root.mkdir()
    shutil.copy(REPO / "notebooks" / f"{CHAPTER}.ipynb", root)
    port, token = _free_port(), "walkthrough-test"
    env = {
        **os.environ,
        "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
    }
    lab = subprocess.Popen(
        [
            str(BIN / "jupyter-lab"),
            str(root),
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",
            *(["--allow-root"] if os.geteuid() == 0 else []),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5)
            break
        except OSError:
            assert lab.poll() is None and time.monotonic() < deadline, "JupyterLab did not start"
            time.sleep(1)
    yield base, token
    lab.terminate()
    try:
        lab.wait(timeout=30)
    except subprocess.TimeoutExpired:
        lab.kill()


def test_chapter_page_shows_the_static_view_and_its_button_opens_the_live_notebook(one_chapter_book, lab_server):
    from playwright.sync_api import sync_playwright

    page_path, lab_url = one_chapter_book
    html = page_path.read_text(encoding="utf-8")
    assert "embed-amd" not in html and "application/vnd.jupyter.widget-view+json" not in html  # no widget JS or view
    base, token = lab_server
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        context = browser.new_context(viewport={"width": 1400, "height": 900})
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(page_path.as_uri(), wait_until="load")
        assert not errors, errors[:3]
        static = page.locator(".agentpost-walkthrough")
        assert static.count() == 1
        assert static.locator("img").evaluate("i => i.complete && i.naturalWidth > 0")
        assert static.locator("tbody tr").count() == 6  # 3 rollouts, 2 steps each
        button = page.locator("a.btn-jupyterlab-button")
        href = button.get_attribute("href")
        assert href == lab_link(lab_url, f"notebooks/{CHAPTER}") == f"{lab_url}/lab/tree/{CHAPTER}.ipynb"

        # Log in once with the token (README), then follow the button on the test server's port.
        page.goto(f"{base}/lab?token={token}", wait_until="domcontentloaded")
        page.goto(page_path.as_uri(), wait_until="load")
        button.evaluate("(a, base) => { a.href = base + new URL(a.href).pathname; }", base)
        with context.expect_page() as opened:
            button.click()
        lab = opened.value
        lab.wait_for_url(f"**{urlparse(href).path}")
        cell = lab.locator(".jp-CodeCell", has_text="graft_by_hand.render,")  # the turn_by_hand call, however formatted
        cell.wait_for(timeout=120_000)
        cell.locator(".jp-InputArea-editor").click(position={"x": 30, "y": 8})
        lab.keyboard.press("Shift+Enter")  # queued until the kernel is up
        rows = cell.locator(".jp-OutputArea .widget-html-content tbody tr")
        rows.first.wait_for(timeout=120_000)
        assert rows.count() == 6
        cell.locator(".widget-slider .noUi-handle").first.focus()
        lab.keyboard.press("ArrowRight")  # rollouts 3 -> 4
        lab.wait_for_function(
            "(n) => document.querySelectorAll('.jp-OutputArea .widget-html-content tbody tr').length === n",
            arg=9,
            timeout=30_000,
        )
        browser.close()
