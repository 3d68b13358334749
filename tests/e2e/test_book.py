"""End to end: the ledger derives levels from tests and receipts, and the book builds with warnings as errors."""

import json
import shutil
from pathlib import Path

from agentpost.record.environment import GLUE_NAME
from agentpost.record.recording import SCRAP_MIME, format_value, value_html
from tests.e2e.conftest import load_run, reseal_run, agentpost


def test_ledger_and_book_build(tiny_runs, tmp_path):
    project, runs = tiny_runs
    assert runs.returncode == 0, runs.stderr[-2000:]
    report = tmp_path / "claims.json"
    report.write_text(
        json.dumps(
            {
                "paired-protocol/C1": {"passed": 3, "failed": 0, "skipped": 0, "tests": []},
                "paired-protocol/C2": {"passed": 1, "failed": 1, "skipped": 0, "tests": []},
            }
        )
    )
    ledger = agentpost(project, "ledger", "--claims-report", str(report))
    assert ledger.returncode == 0, ledger.stderr
    page = (project / "book" / "generated" / "ledger.md").read_text()
    section = page.split("## The paired public comparison protocol")[1].split("\n## ")[0]
    level = {
        line.split("**")[1]: line.split("|")[2].strip() for line in section.splitlines() if line.startswith("| **C")
    }
    assert level["C1"] == "**mechanism**"  # tests passed, no metric tied
    assert level["C2"] == "**none**"  # a failing test withholds the level
    assert level["C3"] == "**diagnostic**"  # three valid seeds record its metrics
    assert "trigram\\_vs\\_bigram: " in section and "3 seeds;" in section  # the level comes with the declared verdict
    assert "conclusive)" in section  # with whether the verdict settles the question
    assert "| [opsd](#opsd) | not started |" in page
    evidence = (project / "book" / "generated" / "evidence" / "paired-protocol.md").read_text()
    assert "## Profile `tiny`" in evidence and "| 42 | ok | yes" in evidence and "`trigram_vs_bigram` ★" in evidence
    assert "paired-protocol-tiny-forest.png" in evidence

    # what ordinary tools leave in a checkout (pytest, ruff, mypy, Jupyter) and stray Markdown the book does not list
    for folder in (".pytest_cache", ".ruff_cache", ".mypy_cache", "notebooks/.ipynb_checkpoints", ".hidden/deep"):
        (project / folder).mkdir(parents=True, exist_ok=True)
        (project / folder / "README.md").write_text("# a tool's cache\n\nNot a page of the book.\n")
    (project / "NOTES.md").write_text("# scratch notes\n")
    (project / "book" / "draft.md").write_text("# a draft not in the table of contents\n")
    book = agentpost(project, "book", "--skip-runs", "--claims-report", str(report))
    assert book.returncode == 0, book.stdout[-3000:] + book.stderr[-3000:]
    html = project / "_build" / "html"
    chapter = (html / "notebooks" / "paired-protocol.html").read_text()
    assert "interpolated trigram" in chapter and "Verdicts say how big" in chapter
    # the page's "Open in JupyterLab" button: the same notebook in the JupyterLab of `make lab` (agentpost_lab_url)
    assert 'href="http://localhost:8888/lab/tree/paired-protocol.ipynb"' in chapter
    # the chapter prose cites the across-seed verdict glued in the generated verdicts notebook (smoke: no runs here)
    assert "not computed" in chapter
    verdicts = (html / "book" / "generated" / "verdicts" / "paired-protocol.html").read_text()
    # the profile with runs is shown (its table), the smoke profile without runs is one line; the glued values the
    # prose cites are in a cell the page does not show
    assert "Profile <code" in verdicts and "trigram_vs_bigram" in verdicts and "Not run yet:" in verdicts
    assert "tiny_trigram_vs_bigram_verdict" not in verdicts
    assert (html / "book" / "generated" / "ledger.html").is_file()
    assert "diagnostic" in (html / "book" / "generated" / "ledger.html").read_text()


# Strings a hostile run folder can carry: a MyST download of the host's password file, live HTML, a raw
# HTML directive in a fence and in a colon fence, and a table pipe.
DOWNLOAD = "{download}`x <../../../../../../../../../../etc/passwd>`"
SCRIPT = "better<script>alert(1)</script>"
RAW = "x\n```{raw} html\n<script>alert(2)</script>\n```\n:::{raw} html\n<img src=x onerror=alert(3)>\n:::"


def _plant_hostile_runs(runs: Path) -> None:
    """The tiny seeds edited and resealed as a forger would: seeds 43 and 44 carry a hostile device name in receipt
    and notebook alike (so they still validate and their device is shown); an invalid copy of seed 42 whose profile
    is hostile; a malformed receipt."""
    tiny = runs / "paired-protocol" / "tiny"
    for seed in (43, 44):
        run = next(tiny.glob(f"seed-{seed}-*"))
        receipt, nb = load_run(run)
        receipt["device"]["name"] = DOWNLOAD + RAW + SCRIPT
        for out in (o for c in nb["cells"] for o in c.get("outputs", [])):
            scrap = (out.get("data") or {}).get(SCRAP_MIME)
            if scrap and scrap["name"] == GLUE_NAME:
                scrap["data"]["device"]["name"] = receipt["device"]["name"]
                out["data"]["text/plain"] = format_value(scrap["data"])
                out["data"]["text/html"] = value_html(GLUE_NAME, out["data"]["text/plain"])
                receipt["metrics"][GLUE_NAME] = scrap["data"]
        reseal_run(run, receipt, nb)
    invalid = tiny / "seed-47-x"
    shutil.copytree(next(tiny.glob("seed-42-*")), invalid)
    receipt, _ = load_run(invalid)
    receipt["profile"] = RAW
    reseal_run(invalid, receipt)
    (tiny / "seed-48-y").mkdir()
    (tiny / "seed-48-y" / "receipt.json").write_text('{"chapter": ["a"], "profile": 7}')


def test_a_book_built_from_hostile_runs_shows_their_text_and_runs_none_of_it(tiny_runs, tmp_path):
    """The real Jupyter Book build over hostile runs: no script, no download of a host file, no raw directive
    survives; the strings are shown as text."""
    project, runs = tiny_runs
    assert runs.returncode == 0, runs.stderr[-2000:]
    hostile = tmp_path / "project"
    shutil.copytree(project, hostile, ignore=shutil.ignore_patterns("_build", "generated", "__pycache__"))
    _plant_hostile_runs(hostile / "book" / "runs")
    report = tmp_path / "claims.json"
    report.write_text(json.dumps({"paired-protocol/C1": {"passed": 1, "failed": 0, "skipped": 0, "tests": []}}))
    validate = agentpost(hostile, "validate").stdout
    assert "seed-48-y" in validate and "seed-47-x" in validate  # the malformed and the invalid run are named
    assert not [
        line for line in validate.splitlines() if "INVALID" in line and ("seed-43-" in line or "seed-44-" in line)
    ], validate
    book = agentpost(hostile, "book", "--skip-runs", "--claims-report", str(report))
    # the book is built, and the command still reports the malformed receipt as a problem (exit 2, named)
    assert book.returncode == 2 and "1 malformed receipt(s)" in book.stderr, book.stdout[-3000:] + book.stderr[-3000:]
    assert "seed-47-x" in book.stderr and "build succeeded" in book.stdout, book.stdout[-3000:]
    html = hostile / "_build" / "html"
    pages = {p: p.read_text(errors="replace") for p in html.rglob("*.html")}
    shown = "".join(pages.values())
    assert "&lt;/script&gt;" in shown and "passwd" in shown  # the hostile text is there, as text
    for page, text in pages.items():
        assert "<script>alert" not in text and "<img src=x" not in text, page
    downloads = [p for p in html.rglob("*") if p.is_file() and "_downloads" in p.parts]
    assert not any(p.name == "passwd" for p in downloads), downloads
    assert not any("root:x:0:0" in p.read_text(errors="replace") for p in downloads if p.stat().st_size < 1e6)
