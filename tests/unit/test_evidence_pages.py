"""The generated evidence pages from hostile runs: every string a receipt carries (device name, string metrics,
paired comparisons, problem fields, an invalid receipt's chapter and profile) arrives as text. The pages are parsed
with the book's MyST parser; no role but the page's own download links, no HTML, fence, directive or math survives,
and no table row gains a cell."""

from __future__ import annotations

import pytest

from agentpost.catalogue import chapter
from agentpost.evidence.ledger import evidence_page, ledger_page
from agentpost.evidence.levels import Run, UNKNOWN, group_runs, ledger_rows
from agentpost.evidence.validate import Problem, Report
from agentpost.evidence import receipt as rc

SCRIPT = "better<script>alert(1)</script>"
DOWNLOAD = "{download}`x <../../../../../../../../../../etc/passwd>`"
RAW = "x\n```{raw} html\n<script>alert(2)</script>\n```\n:::{raw} html\n<img src=x onerror=alert(3)>\n:::"
PIPE = "a | b | c"
HOSTILE = [SCRIPT, DOWNLOAD, RAW, PIPE, "$\\mathrm{x}$", "<!-- x -->", "[l](javascript:alert(4))"]
PAIRED = {
    "name_a": SCRIPT,
    "name_b": DOWNLOAD,
    "estimate": RAW,
    "ci_low": -0.1,
    "ci_high": PIPE,
    "mde": 0.1,
    "min_effect": 0.05,
    "verdict": "<b>supported</b>",
    "variance_components": {"seed": RAW, "item": 1, "residual": 1},
    "n_seeds": 3,
    "n_items": DOWNLOAD,
    "design": "crossed",
}


def _receipt(seed: int, **over) -> dict:
    return {
        "chapter": "kite",
        "profile": "smoke",
        "kind": "profile",
        "seed": seed,
        "status": "ok",
        "hashes": {"source_notebook": "s", "parameters": "p", "code_tree": "c", "data": {}, "output_notebook": "o"},
        "timing": {"start": "2026-01-01T00:00:00+00:00", "end": "2026-01-01T00:00:10+00:00", "wall_s": 10.0},
        "peak_memory": {"host_rss_bytes": 2**20},
        "device": {"kind": "cpu", "name": DOWNLOAD + RAW},
        "metrics": {
            "outcomes_test_nll": RAW,
            "test_nll_sst_nats": SCRIPT,
            "test_nll_dense_flops_nats": DOWNLOAD + PIPE,
            "paired_sst_vs_dense_flops": PAIRED,
            SCRIPT: RAW,
            "loss": seed / 100,
        },
        **over,
    }


def _runs():
    base = rc.runs_root() / "kite" / "smoke"
    valid = [Report(base / f"seed-{s}-abc", _receipt(s), stale=["hashes.code_tree"]) for s in (42, 43, 44)]
    bad_receipt = _receipt(45, profile=RAW, chapter=["a"])
    invalid = Report(base / "seed-45-abc", bad_receipt, [Problem("x", RAW, SCRIPT)])
    elsewhere = Report(
        rc.runs_root() / SCRIPT / "p" / "seed-1-a", _receipt(1, profile=DOWNLOAD), [Problem("x", "f", "m")]
    )
    return group_runs([*valid, invalid, elsewhere])


def _md():
    pytest.importorskip("myst_parser")
    from myst_parser.config.main import MdParserConfig
    from myst_parser.mdit_to_docutils.base import DocutilsRenderer
    from myst_parser.parsers.mdit import create_md_parser

    return create_md_parser(
        MdParserConfig(enable_extensions={"dollarmath", "amsmath", "colon_fence", "deflist"}), DocutilsRenderer
    )


def _walk(tokens):
    for t in tokens:
        yield t
        yield from _walk(t.children or [])


def _assert_inert(page: str) -> None:
    tokens = list(_walk(_md().parse(page)))
    kinds = {t.type for t in tokens}
    assert not kinds & {"html_block", "fence", "code_block", "colon_fence", "math_inline", "math_block", "amsmath"}, (
        kinds
    )
    for t in tokens:
        if t.type == "html_inline":  # the ledger's own line breaks between notes
            assert t.content == "<br>"
        if t.type == "link_open":  # the page's own links: arXiv, anchors, evidence pages, the levels page
            assert t.attrs["href"].startswith(("https://arxiv.org/abs/", "#", "evidence/", "../evidence-levels")), (
                t.attrs
            )
        if t.type == "myst_role":  # only the page's own links into the runs root
            assert t.meta["name"] == "download", t.meta
            assert t.content.startswith(
                ("receipt.json <../../runs/kite/smoke/seed-", "notebook.ipynb <../../runs/kite/")
            )
            assert "passwd" not in t.content
        if t.type == "image":
            assert t.attrs["src"] == "kite-smoke-metrics.png"
    # every table row has as many cells as its header
    rows, header = [], None
    for t in tokens:
        if t.type == "tr_open":
            rows.append(0)
        elif t.type in ("th_open", "td_open"):
            rows[-1] += 1
        elif t.type == "table_close":
            header, rows = rows[0], rows
            assert all(n == header for n in rows), rows
            rows = []
    texts = " ".join(t.content for t in tokens if t.type == "text")
    assert "<script>" in texts  # the text is shown, as text


def test_evidence_page_from_hostile_runs_is_inert(tmp_path):
    runs, _ = _runs()
    assert set(runs) == {("kite", "smoke"), UNKNOWN}  # an invalid receipt's text never becomes a key
    rows = ledger_rows({}, runs)
    page = evidence_page(chapter("kite"), runs, rows, tmp_path)
    _assert_inert(page)
    assert "STALE" in page  # stale evidence is never silent


def test_ledger_page_from_hostile_runs_is_inert():
    runs, _ = _runs()
    rows = ledger_rows({}, runs)
    c4 = next(r for r in rows if r.chapter.id == "kite" and r.claim.id == "C4")
    assert c4.levels["diagnostic"] and "STALE: made with older code_tree" in c4.notes["diagnostic"]
    _assert_inert(ledger_page(rows))


def test_a_run_outside_the_runs_root_gets_no_link(tmp_path):
    from agentpost.evidence.ledger import _download

    assert _download(Run(tmp_path / "seed-1-a", {}), "receipt.json") == "receipt.json"
    assert _download(Run(rc.runs_root() / "kite" / "smoke" / "se`ed", {}), "receipt.json") == "receipt.json"


def test_an_unwritable_checkout_is_named_not_an_unexpected_error(tmp_path, monkeypatch):
    from agentpost.errors import UsageError
    from agentpost.evidence import ledger

    def refuse(path, text):
        raise PermissionError(13, "Permission denied", str(path))

    report = tmp_path / "claims.json"
    report.write_text("{}")
    monkeypatch.setattr(ledger.rc, "write_atomic", refuse)
    with pytest.raises(UsageError, match=r"cannot write the ledger to .*ledger.md: Permission denied"):
        ledger.write_ledger(report, runs={})
    assert not list((rc.runs_root().parent).glob(".generated.tmp-*"))  # its temporary folder is gone
