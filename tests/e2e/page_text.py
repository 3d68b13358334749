"""What a reader of a built page sees as plain text, read from the HTML without a browser.

:func:`tex_as_text` finds TeX that the page shows as text instead of typesetting it: a TeX command (``\\sum``,
``\\mathrm``) or a ``$$`` outside the maths containers MathJax typesets (``class="math"``) and outside code, which
shows text as written (``<code>``, ``<pre>``, a cell's source: ``div.highlight``), and outside a cell's outputs
(``div.cell_output``: data, such as a table of a model's replies, not prose). Display maths opened mid-paragraph or
inside a list item is what leaves it there.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

#: A TeX command as it would leak into text: a backslash and letters.
TEX = re.compile(r"\\[A-Za-z]+|\$\$")
#: Elements whose text is shown as written, or is not shown at all.
LITERAL = {"code", "pre", "script", "style", "mjx-container", "title", "textarea"}
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[bool] = []  # per open element: whether its text is exempt (maths or literal)
        self.found: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in VOID:
            return
        classes = (dict(attrs).get("class") or "").split()
        exempt = tag in LITERAL or not {"math", "highlight", "cell_output"}.isdisjoint(classes)
        self.stack.append(exempt or bool(self.stack and self.stack[-1]))

    def handle_endtag(self, tag):
        if tag not in VOID and self.stack:
            self.stack.pop()

    def handle_data(self, data):
        if self.stack and self.stack[-1]:
            return
        for m in TEX.finditer(data):
            self.found.append(data[max(0, m.start() - 30) : m.end() + 30].strip())


def tex_as_text(html: str) -> list[str]:
    """Each TeX command or ``$$`` shown as plain text in ``html``, with up to 30 characters either side."""
    parser = _Text()
    parser.feed(html)
    parser.close()
    return parser.found
