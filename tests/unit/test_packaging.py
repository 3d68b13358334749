"""The explicit package list in pyproject.toml: every package folder is installed, kernels/ as agentpost.kernels."""

import subprocess
import sys
import tomllib
from pathlib import Path

from agentpost.project import project_root


def _package_folders(root, top, dotted):
    """Dotted names of the folders under ``root/top`` that hold an ``__init__.py``."""
    return {
        ".".join([dotted, *p.parent.relative_to(root / top).parts])
        for p in (root / top).rglob("__init__.py")
        if "__pycache__" not in p.parts
    }


def test_every_package_folder_is_listed_and_kernels_map_to_agentpost_kernels():
    root = project_root()
    cfg = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert (root / "agentpost" / "kernels").is_symlink()
    assert (root / "agentpost" / "kernels").resolve() == (root / "kernels").resolve()
    found = (
        _package_folders(root, "agentpost", "agentpost")
        | _package_folders(root, "kernels", "agentpost.kernels")
        | {"agentpost.kernels"}
    )
    missing = sorted(found - set(cfg["packages"]))
    assert not missing, f"add these packages to [tool.setuptools] packages in pyproject.toml: {missing}"
    assert not sorted(set(cfg["packages"]) - found)


def test_installed_kernels_import_from_the_kernels_folder():
    import agentpost.kernels.actkv.compaction as k

    assert Path(k.__file__).resolve().parent == (project_root() / "kernels" / "actkv").resolve()


def test_the_kernels_folder_does_not_shadow_a_bare_kernels_import_from_the_repository_root():
    """transformers >= 5.25 imports the Hugging Face `kernels` package; the repository's folder must not answer."""
    root = project_root()
    assert not (root / "kernels" / "__init__.py").exists()
    code = (
        "import importlib.util as u; s = u.find_spec('kernels'); "
        "print('' if s is None or s.origin is None else s.origin)"
    )
    origin = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert not origin.startswith(str(root / "kernels")), origin
    subprocess.run([sys.executable, "-c", "import transformers.modeling_utils"], cwd=root, check=True)
