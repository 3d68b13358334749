"""A myst-nb mime-render plugin that renders scrapbook scrap payloads as nothing.

myst-nb renders every mime type in an output bundle and warns on ``application/scrapbook.scrap.*``; the visible
rendering of a glued value is its ``text/plain``/``text/html`` sibling, so the scrap payload needs no node. Every
other mime type falls through to myst-nb's own renderers (``handle_mime`` returns ``None``).
Registered under the entry-point group ``myst_nb.mime_renderers`` in pyproject.toml.
"""

from __future__ import annotations

from typing import Any


class ScrapMimeRenderer:
    """Swallow scrapbook scrap payloads; leave everything else to myst-nb."""

    @staticmethod
    def handle_mime(renderer: Any, data: Any, inline: bool) -> list | None:
        if data.mime_type.startswith("application/scrapbook.scrap."):
            return []
        return None
