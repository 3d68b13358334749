"""Import layering of what import-linter cannot see (`make lint` runs both): the layers of ``agentpost`` are the
contracts under ``[tool.importlinter]`` in pyproject.toml, but ``kernels/`` is installed as ``agentpost.kernels``
through a symlink to a folder without ``__init__.py``, which import-linter's graph leaves out. Here: no paper's
kernels import another paper, the kernels' shared helpers import no paper, and no module of ``agentpost`` imports
another paper's kernels. Every ``import`` / ``from ... import`` counts, also inside functions.

A paper owns ``agentpost/<paper>/`` and ``kernels/<paper>/`` (installed as ``agentpost.kernels.<paper>``); everything
else is the shared core.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAPERS = ("actkv", "codeskills", "deltas", "graft", "kite", "madrl", "muser", "opsd", "protocol", "toolsearcher")


def owner(module: str) -> str:
    """The paper that owns ``module``, or ``"core"``."""
    parts = module.split(".")
    if parts[0] != "agentpost" or len(parts) < 2:
        return "core"
    name = parts[2] if parts[1] == "kernels" and len(parts) > 2 else parts[1]
    return name if name in PAPERS else "core"


def module_name(path: Path, root: Path) -> str:
    """Dotted name of ``path`` under ``root`` (``kernels/x.py`` installs as ``agentpost.kernels.x``)."""
    parts = path.relative_to(root).with_suffix("").parts
    if parts[0] == "kernels":
        parts = ("agentpost", *parts)
    return ".".join(parts).removesuffix(".__init__")


def imported_modules(path: Path, root: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in ``path``; relative imports are resolved against the file."""
    module = module_name(path, root)
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = ".".join([*base, node.module] if node.module else base)
            # `from agentpost import actkv` imports a subpackage: name it.
            out += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]
    return out


def layering_violations(files, root: Path = ROOT) -> list[str]:
    """Imports from or into ``kernels/`` that cross from one paper to another or from the shared core to a paper
    (the rest is import-linter's)."""
    bad = []
    for path in files:
        module = module_name(path, root)
        src = owner(module)
        for line, target in imported_modules(path, root):
            dst = owner(target)
            involves_kernels = module.startswith("agentpost.kernels.") or target.startswith("agentpost.kernels.")
            if involves_kernels and dst != "core" and dst != src:
                who = "the shared core" if src == "core" else f"paper {src!r}"
                bad.append(f"{path.relative_to(root)}:{line} ({who}) imports {target} (paper {dst!r})")
    return bad


def package_files():
    return sorted([*(ROOT / "agentpost").rglob("*.py"), *(ROOT / "kernels").rglob("*.py")])


def test_kernels_are_layered():
    assert layering_violations(package_files()) == []


def test_contracts_name_every_paper():
    """The import-linter contracts and this test name the same papers."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["importlinter"]
    layers = next(c for c in config["contracts"] if c.get("containers") == ["agentpost"])["layers"]
    papers_layer = next(layer for layer in layers if "actkv" in layer)
    assert sorted(p.strip() for p in papers_layer.split("|")) == sorted(PAPERS)


@pytest.mark.parametrize(
    ("where", "source", "culprit"),
    [
        ("agentpost/rl/x.py", "from agentpost.kernels.actkv.compaction import compact\n", "agentpost.kernels.actkv"),
        ("agentpost/madrl/x.py", "def f():\n    from agentpost.kernels import deltas\n", "agentpost.kernels.deltas"),
        ("kernels/deltas/x.py", "import agentpost.actkv.lrfu\n", "agentpost.actkv.lrfu"),
        ("kernels/x.py", "from .actkv import compaction\n", "agentpost.kernels.actkv.compaction"),
    ],
)
def test_checker_names_each_violation(tmp_path, where, source, culprit):
    path = tmp_path / where
    path.parent.mkdir(parents=True)
    path.write_text(source)
    (bad,) = layering_violations([path], tmp_path)
    assert culprit in bad and where in bad


@pytest.mark.parametrize(
    ("where", "source"),
    [
        ("kernels/deltas/k.py", "from agentpost.deltas.rule import chunk_gated_delta\n"),
        ("agentpost/opsd/l.py", "from agentpost.rl import aggregate\nfrom . import tasks\n"),
        ("agentpost/rl/d.py", "from agentpost.kernels._common import next_pow2\nimport torch\n"),
        # no kernels involved: import-linter's contracts judge it
        ("agentpost/madrl/x.py", "from agentpost import opsd\n"),
    ],
)
def test_same_paper_and_core_imports_are_allowed(tmp_path, where, source):
    path = tmp_path / where
    path.parent.mkdir(parents=True)
    path.write_text(source)
    assert layering_violations([path], tmp_path) == []
