"""Package discovery: `agentpost/` plus the top-level `kernels/` tree, installed as `agentpost.kernels`.

A bare top-level `kernels` module would clash with other distributions, so `kernels/<paper>/<op>.py`
becomes `agentpost.kernels.<paper>.<op>` (see DESIGN.md, Layout).
"""
from setuptools import find_packages, setup

kernel_packages = ["agentpost.kernels"] + [f"agentpost.kernels.{p}" for p in find_packages("kernels")]
setup(
    packages=find_packages(include=["agentpost", "agentpost.*"]) + kernel_packages,
    package_dir={"agentpost.kernels": "kernels"},
)
