"""Remove machine identity from receipts and output notebooks: paths, host and user names, environment values."""

from __future__ import annotations

import getpass
import os
import re
import socket
import sys

from agentpost.project import project_root


def _replacements() -> list[tuple[str, str]]:
    pairs = [
        (sys.prefix, "<venv>"),
        (str(project_root()), "<repo>"),
        (str(project_root().parent), "<workspace>"),
        (os.path.expanduser("~"), "~"),
    ]
    import site

    for p in [*site.getsitepackages(), site.getusersitepackages(), sys.base_prefix]:
        pairs.append((p, "<python>"))
    # Longest first so a path is replaced by its most specific placeholder.
    return sorted({(a, b) for a, b in pairs if a and len(a) > 1}, key=lambda ab: -len(ab[0]))


_WORDS = None


def _identity_words() -> list[str]:
    global _WORDS
    if _WORDS is None:
        words = {socket.gethostname()}
        try:
            words.add(getpass.getuser())
        except Exception:  # noqa: BLE001 - no user database in some containers
            pass
        _WORDS = [w for w in words if w and len(w) >= 3]
    return _WORDS


_ABS_PATH = re.compile(r"(?<![\w<>~.])/(?:root|home|Users|tmp|work|mnt|scratch|private|var/folders)(?:/[\w.@+-]+)+")


def desensitize_text(text: str) -> str:
    """Replace known machine paths with placeholders, then any remaining absolute home/tmp paths and identities."""
    for old, new in _replacements():
        text = text.replace(old, new)
    text = _ABS_PATH.sub("<path>", text)
    for word in _identity_words():
        if word == "root":  # the user name 'root' is also an English word; its paths are already gone
            continue
        text = re.sub(rf"\b{re.escape(word)}\b", "<host-or-user>", text)
    return text
