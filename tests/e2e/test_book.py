"""End to end: the ledger derives levels from tests and receipts, and the book builds with warnings as errors."""

import json

from tests.e2e.conftest import agentpost


def test_ledger_and_book_build(tiny_runs, tmp_path):
    project, runs = tiny_runs
    assert runs.returncode == 0, runs.stderr[-2000:]
    report = tmp_path / "claims.json"
    report.write_text(json.dumps({"paired-protocol/C1": {"passed": 3, "failed": 0, "skipped": 0, "tests": []},
                                  "paired-protocol/C2": {"passed": 1, "failed": 1, "skipped": 0, "tests": []}}))
    ledger = agentpost(project, "ledger", "--claims-report", str(report))
    assert ledger.returncode == 0, ledger.stderr
    page = (project / "book" / "generated" / "ledger.md").read_text()
    section = page.split("## The paired public comparison protocol")[1].split("\n## ")[0]
    level = {line.split("**")[1]: line.split("|")[2].strip() for line in section.splitlines() if line.startswith("| **C")}
    assert level["C1"] == "**mechanism**"  # tests passed, no metric tied
    assert level["C2"] == "**none**"  # a failing test withholds the level
    assert level["C3"] == "**diagnostic**"  # three valid seeds record its metrics
    assert "trigram\\_vs\\_bigram: " in section and "3 seeds;" in section  # the level comes with the declared verdict
    assert "conclusive)" in section  # with whether the verdict settles the question
    assert "| [opsd](#opsd) | not started |" in page
    evidence = (project / "book" / "generated" / "evidence" / "paired-protocol.md").read_text()
    assert "## Profile `tiny`" in evidence and "| 42 | ok | yes" in evidence and "`trigram_vs_bigram` ★" in evidence
    assert "paired-protocol-tiny-forest.png" in evidence

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
    assert "tiny_trigram_vs_bigram_verdict" in verdicts
    assert (html / "book" / "generated" / "ledger.html").is_file()
    assert "diagnostic" in (html / "book" / "generated" / "ledger.html").read_text()
