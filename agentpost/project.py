"""The project checkout: its root and its configuration (``[tool.agentpost]`` in pyproject.toml)."""

from __future__ import annotations

import functools
import os
import sys
import tomllib
from pathlib import Path


def skip_slow_optional_imports() -> None:
    """Mark ``rfc3987_syntax`` absent in this process, before anything imports nbformat.

    nbformat imports jsonschema, which imports rfc3987-syntax when it is installed (jupyter-book's dependencies
    install it) only to check the ``iri`` string format, which no notebook or receipt schema uses; it compiles an
    Earley grammar at import, about 4 s on a laptop core. jsonschema then simply skips that one format checker.
    Called by the command line and by each run's process; a library import of agentpost changes nothing."""
    sys.modules.setdefault("rfc3987_syntax", None)


@functools.lru_cache(maxsize=None)
def project_root() -> Path:
    """The checkout root: ``$AGENTPOST_ROOT``, else the nearest folder above the package or cwd with our pyproject."""
    if os.environ.get("AGENTPOST_ROOT"):
        return Path(os.environ["AGENTPOST_ROOT"]).resolve()
    for start in (Path(__file__).resolve().parent, Path.cwd().resolve()):
        for folder in (start, *start.parents):
            pyproject = folder / "pyproject.toml"
            if pyproject.is_file() and 'name = "agentpost"' in pyproject.read_text():
                return folder
    raise RuntimeError("cannot find the agentpost checkout; set AGENTPOST_ROOT")


@functools.lru_cache(maxsize=None)
def config() -> dict:
    """``[tool.agentpost]`` from pyproject.toml."""
    with open(project_root() / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["agentpost"]


def cache_root() -> Path:
    """Where the project keeps files it can re-create (never committed): ``$AGENTPOST_CACHE``, else
    ``~/.cache/agentpost``. Data folders stay read-only; caches of data live here."""
    return Path(os.environ.get("AGENTPOST_CACHE") or Path.home() / ".cache" / "agentpost")


def hub_offline() -> bool:
    """True where ``HF_HUB_OFFLINE`` asks the hub clients (models and data sets) to use their local cache only."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
