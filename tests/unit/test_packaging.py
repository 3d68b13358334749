"""The explicit package list in pyproject.toml: every package folder is installed, kernels/ as agentpost.kernels."""

import tomllib

from agentpost.project import project_root


def _package_folders(root, top, dotted):
    """Dotted names of the folders under ``root/top`` that hold an ``__init__.py``."""
    return {".".join([dotted, *p.parent.relative_to(root / top).parts])
            for p in (root / top).rglob("__init__.py") if "__pycache__" not in p.parts}


def test_every_package_folder_is_listed_and_kernels_map_to_agentpost_kernels():
    root = project_root()
    cfg = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert cfg["package-dir"] == {"agentpost.kernels": "kernels"}
    found = _package_folders(root, "agentpost", "agentpost") | _package_folders(root, "kernels", "agentpost.kernels")
    missing = sorted(found - set(cfg["packages"]))
    assert not missing, f"add these packages to [tool.setuptools] packages in pyproject.toml: {missing}"
    assert not sorted(set(cfg["packages"]) - found)


def test_installed_kernels_import_from_the_kernels_folder():
    import agentpost.kernels.actkv.compaction as k

    assert k.__file__.startswith(str(project_root() / "kernels" / "actkv"))
