"""WikiText-2 (tokenized wikitext-2-v1, CC BY-SA): splits as text and as articles.

Articles are delimited by title lines `` = Title = `` (one ``=`` per side) with a blank line before and after,
which gives 600/60/60 articles as in SOURCE.md.
"""

from __future__ import annotations

import functools
import re

from agentpost.data.hf import local_rows
from agentpost.data.registry import data_file

SPLITS = {"train": "train.txt", "validation": "valid.txt", "test": "test.txt"}
_TITLE = re.compile(r"^ = [^=].* = $")


def _file(split: str) -> str:
    if split not in SPLITS:
        raise ValueError(f"unknown WikiText-2 split {split!r}; use one of {sorted(SPLITS)}")
    return SPLITS[split]


@functools.lru_cache(maxsize=None)
def read_split(split: str) -> str:
    """The whole split as one string (its lines are read through ``datasets``, line breaks kept)."""
    lines = local_rows(data_file("wikitext-2", _file(split)), "text", keep_linebreaks=True)
    return "".join(lines.data.column("text").to_pylist())  # the Arrow column at once (row access is 20x slower)


@functools.lru_cache(maxsize=None)
def articles(split: str) -> tuple[str, ...]:
    """The split's articles, each the text from its title line up to the next article's title."""
    lines = read_split(split).split("\n")
    starts = [
        i
        for i, line in enumerate(lines)
        if _TITLE.match(line)
        and i > 0
        and lines[i - 1].strip() == ""
        and i + 1 < len(lines)
        and lines[i + 1].strip() == ""
    ]
    bounds = starts + [len(lines)]
    return tuple("\n".join(lines[a:b]).strip("\n") for a, b in zip(bounds[:-1], bounds[1:]))


def words(text: str) -> list[str]:
    """Whitespace tokens of a text with one ``<eos>`` per non-empty line (the standard WikiText-2 count)."""
    out: list[str] = []
    for line in text.split("\n"):
        toks = line.split()
        if toks:
            out.extend(toks)
            out.append("<eos>")
    return out
