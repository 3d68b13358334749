"""Every name the benchmark scripts and chapter notebooks import from ``agentpost`` exists.

These files run outside ``make test`` (``make bench``, the GPU entry point, papermill), so a renamed or removed
function would otherwise surface only there: CI once failed in the GPU plan (then ``benchmarks/gpu_plan.py``) on a
name the evidence package had renamed, and ``benchmarks/toolsearcher_variants.py`` imported a function its chapter
had removed.
"""

from __future__ import annotations

import ast
import importlib
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def notebook_code(path: Path) -> str:
    """The code cells of a notebook, IPython magics and shell lines left out."""
    cells = json.loads(path.read_text())["cells"]
    lines = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code").splitlines()
    return "\n".join(line for line in lines if not line.lstrip().startswith(("%", "!")))


def unresolved_imports(source: str) -> list[str]:
    """``module.name`` for each ``from agentpost... import name`` in ``source`` that does not resolve."""
    missing = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("agentpost")):
            continue
        module = importlib.import_module(node.module)
        for alias in node.names:
            if hasattr(module, alias.name):
                continue
            try:
                importlib.import_module(f"{node.module}.{alias.name}")
            except ModuleNotFoundError:
                missing.append(f"{node.module}.{alias.name}")
    return missing


SOURCES = sorted((ROOT / "benchmarks").glob("*.py")) + sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.name)
def test_every_agentpost_import_resolves(path):
    source = notebook_code(path) if path.suffix == ".ipynb" else path.read_text()
    assert unresolved_imports(source) == []


def test_the_check_names_a_missing_function():
    assert unresolved_imports("from agentpost.evidence.levels import counted_configuration, gone_name\n") == [
        "agentpost.evidence.levels.gone_name"
    ]
