"""Untrusted text stays text on the generated pages: parsed by the book's own MyST parser, an escaped string is one
paragraph of plain text (no role, directive, fence, math, link, HTML or extra table cell), and it reads back as
the original."""

from __future__ import annotations

import html

import pytest

from agentpost.evidence.escape import code, escape_cell, escape_md

HOSTILE = [
    "{download}`x <../../../../../../../../etc/passwd>`",
    "better<script>alert(1)</script>",
    "```{raw} html\n<script>alert(1)</script>\n```",
    ":::{raw} html\n<img src=x onerror=alert(1)>\n:::",
    "a | b | c",
    "$\\int x$ and $$y$$",
    "[click](javascript:alert(1)) ![i](x.png) <https://x.example>",
    "# heading\n- item\n> quote\n1. one",
    "{{ substitution }} {eval-rst}`x` `code`",
    "&lt;script&gt; &amp; &#60;",
    "back\\slash at end\\",
    "**bold** _em_ ~~s~~ ^sup^",
    "line\r\nbreak\u2028sep\x00nul\x1b[31m",
    "\ud800 lone surrogate \u202e bidi",
    "<!-- comment --> <div onclick='x'>",
    "```",
    "`",
    "- item",
    "+ item",
    "1. one",
    "  2) two",
    "---",
    "===",
    "% comment",
    ":::",
    "(target)=",
    "#",
    "> quote",
]

# Only these token types may appear when an escaped string is parsed as a page.
PLAIN = {"paragraph_open", "paragraph_close", "inline", "text", "text_special", "softbreak"}


def _md():
    pytest.importorskip("myst_parser")  # part of the book toolchain (jupyter-book); present wherever the book builds
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser
    from myst_parser.mdit_to_docutils.base import DocutilsRenderer

    config = MdParserConfig(enable_extensions={"dollarmath", "amsmath", "colon_fence", "deflist", "substitution"})
    return create_md_parser(config, DocutilsRenderer)


def _types(tokens):
    for t in tokens:
        yield t.type
        yield from _types(t.children or [])


def _text(tokens) -> str:
    return "".join(t.content for tok in tokens if tok.type == "inline" for t in tok.children)


@pytest.mark.parametrize("text", HOSTILE)
def test_escaped_text_parses_as_plain_text_only(text):
    md = _md()
    tokens = md.parse(escape_md(text))
    assert set(_types(tokens)) <= PLAIN, escape_md(text)
    # It reads back as the original, up to line breaks and control characters (made spaces).
    shown = _text(tokens)
    assert "<script" not in shown or "<script" in text
    assert "\n" not in shown


@pytest.mark.parametrize("text", HOSTILE)
def test_escaped_cell_stays_one_cell(text):
    md = _md()
    page = f"| a | b |\n|---|---|\n| {escape_cell(text)} | end |\n"
    tokens = md.parse(page)
    cells = [t for t in tokens if t.type == "td_open"]
    assert len(cells) == 2
    inline = [t for t in tokens if t.type == "inline"]
    assert inline[-1].content == "end"
    assert set(_types(inline[-2:-1])) <= PLAIN | {"inline"}


def test_escape_round_trips_ordinary_text():
    md = _md()
    for text in ["accuracy 0.93 (paired, n=250)", "Ünïcødé ✓ 中文", "a|b", "x < y & z > w", "50% $5"]:
        assert _text(md.parse(escape_md(text))) == text


def test_escape_is_html_safe_without_markdown():
    """Pasted into raw HTML (no MyST pass), the text still has no tag, attribute quote or entity of its own."""
    for text in HOSTILE:
        out = escape_md(text)
        assert not set(out) & set("<>\"'")
        # every '&' starts one of the entities the escape wrote
        assert html.unescape(out.replace("\\", "")).count("<") == text.count("<")


def test_escape_caps_length_and_survives_non_strings():
    assert len(escape_md("x" * 10_000, limit=50)) == 50
    assert escape_md("x" * 10_000, limit=50).endswith("…")
    assert escape_cell("") == " "
    assert escape_md(7) == "7"
    assert escape_md(None) == "None"
    assert escape_md(["a", "<b>"]) == "\\[&#39;a&#39;, &#39;&lt;b&gt;&#39;\\]"
    assert escape_cell(-0.25) == "-0.25"  # a cell holds no block: numbers read as they are
    escape_md("\ud800").encode("utf-8")  # a lone surrogate no longer breaks writing the page


def test_a_cut_text_ends_after_a_whole_word():
    note = "re-certified on 2026-12-07 by seeds 42, 43"
    assert escape_cell(note, limit=20) == "re-certified on…"  # not "re-certified on 202…"
    assert escape_cell(note, limit=17) == "re-certified on…"  # the cut falls on the space after "on"
    assert escape_cell("one two three", limit=9) == "one two…"
    assert escape_cell("x" * 30, limit=10) == "x" * 9 + "…"  # one long word: cut where it must be
    assert escape_cell("short text", limit=10) == "short text"


@pytest.mark.parametrize("text", ["plain", "with `tick`", "``double``", "`", "a|b", "<script>"])
def test_code_span_holds_text_literally(text):
    md = _md()
    tokens = md.parse(code(text))
    spans = [t for tok in tokens if tok.type == "inline" for t in tok.children if t.type == "code_inline"]
    assert [s.content.strip() for s in spans] == [text.replace("|", "¦").strip()]
