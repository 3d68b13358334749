"""Untrusted text as data, never markup, on the generated MyST pages (and in any HTML they embed).

Every string that comes from a run — a receipt field, a recorded metric, a notebook output, a data set, a model's
completion — goes through :func:`escape_md` (running text, headings) or :func:`escape_cell` (a table cell) before
it is pasted into a page. The result is plain text to CommonMark, MyST and HTML alike:

* ``& < > " '`` become HTML entities, so the text is also safe pasted into raw HTML or an attribute value;
* the punctuation that means something inside a line is backslash-escaped (CommonMark allows it for any ASCII
  punctuation), which disarms roles ``{download}`...``` and substitutions ``{{ }}``, code spans and fences
  (backticks), ``$`` math, links and images, emphasis and table pipes ``|``; :func:`escape_md` also escapes what
  would start a block at the start of a line (a heading ``#``, a comment ``%``, a list marker ``-``/``+``/``1.``,
  a colon fence ``:::``, a target ``(x)=``); a table cell holds no block, so :func:`escape_cell` leaves ``-0.1`` be;
* line breaks and other control characters become spaces, so nothing starts a new block (a fence, a directive,
  a heading); lone surrogates and bidirectional overrides become U+FFFD (they would break the page's encoding or
  make the page read differently from what it says);
* the text is cut to at most ``limit`` characters, after a whole word (an ellipsis says so), so one field cannot
  flood a page.

Never wrap the result in backticks: inside a code span a backslash is literal. Use :func:`code` for that.
"""

from __future__ import annotations

import re
import string
import unicodedata

#: Characters HTML gives a meaning: replaced by entities (safe in MyST text and in raw HTML).
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}
#: Punctuation with a meaning inside a line of MyST (roles, code, math, links, emphasis, cells, substitutions).
_INLINE = set("\\`*_{}[]!|$~^")
_LEADING_NUMBER = re.compile(r"(\s*\d+)([.)])")
_BREAKS = {"\u2028", "\u2029", "\u0085"}
_BIDI = {chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x200E, 0x200F, 0x061C)}
#: Longest untrusted text on a page, in characters (a cell gets less).
LIMIT = 2000
CELL_LIMIT = 200


def _plain(text: object, limit: int) -> str:
    """``text`` as a one-line string of at most ``limit`` characters, without control or bidi characters."""
    s = text if isinstance(text, str) else str(text)
    if len(s) > limit:
        cut = s[: max(limit - 1, 0)]
        if not (s[len(cut)].isspace() or cut[-1:].isspace()) and len(cut.split()) > 1:
            cut = cut.rsplit(None, 1)[0]  # the last word would be cut: leave it out (one long word is cut)
        s = cut.rstrip() + "…"
    out = []
    for ch in s:
        cat = unicodedata.category(ch)
        if ch in _BREAKS or cat == "Cc":
            out.append(" ")
        elif cat == "Cs" or ch in _BIDI:
            out.append("\ufffd")
        else:
            out.append(ch)
    return "".join(out)


def _inline(s: str) -> str:
    return "".join(_ENTITIES[ch] if ch in _ENTITIES else "\\" + ch if ch in _INLINE else ch for ch in s)


def escape_md(text: object, limit: int = LIMIT) -> str:
    """``text`` (anything; non-strings through ``str``) as inert one-line MyST/HTML text, safe at a line's start."""
    s = _plain(text, limit)
    body = s.lstrip(" ")
    lead = s[: len(s) - len(body)]
    if m := _LEADING_NUMBER.match(body):  # "1. x" would start an ordered list
        return lead + m.group(1) + "\\" + m.group(2) + _inline(body[m.end() :])
    if body and body[0] in string.punctuation and body[0] not in _ENTITIES and body[0] not in _INLINE:
        return lead + "\\" + body[0] + _inline(body[1:])
    return lead + _inline(body)


def escape_cell(text: object, limit: int = CELL_LIMIT) -> str:
    """``text`` as inert content of one table cell (``|`` cannot split it; at most ``limit`` characters)."""
    return _inline(_plain(text, limit)) or " "


def code(text: object, limit: int = CELL_LIMIT) -> str:
    """``text`` as an inline code span that holds it literally (fenced by more backticks than it contains).

    For a table cell the text must not contain ``|`` (the table splits cells before code spans are read): a
    ``|`` is replaced by ``¦``.
    """
    s = _plain(text, limit).replace("|", "¦")
    longest = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or not s.strip() else ""
    return f"{fence}{pad}{s}{pad}{fence}"


#: What a line of terminal output may hold besides printable text (a progress bar redraws its line with ``\r``).
_TERMINAL_KEEP = {"\n", "\t", "\r"}


def terminal(text: str) -> str:
    """``text`` safe to print: every control, bidi, line-separator and surrogate character (an ANSI escape, a
    backspace, a right-to-left override in a folder or file name) shown as its Python escape (``\\x1b``), except
    line feed, tab and carriage return."""
    return "".join(
        ch
        if ch in _TERMINAL_KEEP or not (unicodedata.category(ch) in ("Cc", "Cs") or ch in _BIDI or ch in _BREAKS)
        else ascii(ch)[1:-1]
        for ch in text
    )


def one_line(text: object) -> str:
    """``text`` for one line of terminal output: :func:`terminal`, and line breaks and tabs escaped too (a name
    holding a newline is still one name on one line)."""
    return terminal(str(text)).translate({10: "\\n", 9: "\\t", 13: "\\r"})
