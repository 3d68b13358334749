"""What a receipt says about the software and the device a run used (no identities, no paths)."""

from __future__ import annotations

import importlib.metadata as md
import os
import platform

PACKAGES = ("agentpost", "torch", "triton", "transformers", "numpy", "scipy", "papermill", "scrapbook", "tokenizers")


def package_versions() -> dict[str, str | None]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = md.version(name)
        except md.PackageNotFoundError:
            versions[name] = None
    return versions


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_info() -> dict:
    """CUDA device when present, else the CPU; never host names or serial numbers."""
    info: dict = {"kind": "cpu", "name": _cpu_model(), "count": os.cpu_count(), "memory_bytes": None,
                  "driver": None, "cuda": None, "machine": platform.machine()}
    try:
        import torch

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            info.update(kind="cuda", name=props.name, count=torch.cuda.device_count(),
                        memory_bytes=int(props.total_memory), cuda=torch.version.cuda,
                        driver=_nvidia_driver())
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    return info


def _nvidia_driver() -> str | None:
    try:
        return open("/proc/driver/nvidia/version", encoding="utf-8").readline().split("Kernel Module")[1].split()[0]
    except (OSError, IndexError):
        return None
