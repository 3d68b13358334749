"""The one home of the facts a run records about its software and device (no identities, no paths).

The runner puts :func:`package_versions` and :func:`device_info` into every receipt; each chapter notebook calls
:func:`show_device` in its set-up cell, so the executed notebook itself records what it ran on, and
``agentpost validate`` compares the two. Benchmarks use :func:`device_info` for their own receipts.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import platform
import re

PACKAGES = ("agentpost", "torch", "triton", "transformers", "numpy", "scipy", "papermill", "scrapbook", "tokenizers")

#: Name under which :func:`show_device` glues the environment facts into the notebook.
GLUE_NAME = "run_environment"


def package_versions() -> dict[str, str | None]:
    """Versions of Python and the main packages; ``torch_cuda`` is the CUDA version torch was built with (or None)."""
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = md.version(name)
        except md.PackageNotFoundError:
            versions[name] = None  # type: ignore[assignment]
    import torch

    versions["torch_cuda"] = torch.version.cuda  # type: ignore[assignment]
    return versions  # type: ignore[return-value]


def _cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo", encoding="utf-8"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_info(device=None) -> dict:
    """Facts about ``device`` (a torch device or name; default: CUDA device 0 when present, else the CPU).

    Never host names or serial numbers.
    """
    import torch

    kind = torch.device(device).type if device is not None else ("cuda" if torch.cuda.is_available() else "cpu")
    info: dict = {
        "kind": "cpu",
        "name": _cpu_model(),
        "count": os.cpu_count(),
        "memory_bytes": None,
        "driver": None,
        "cuda": None,
        "capability": None,
        "machine": platform.machine(),
    }
    if kind == "cuda":
        index = torch.device(device).index if device is not None and torch.device(device).index is not None else 0
        props = torch.cuda.get_device_properties(index)
        info.update(
            kind="cuda",
            name=props.name,
            count=torch.cuda.device_count(),
            memory_bytes=int(props.total_memory),
            cuda=torch.version.cuda,
            driver=_nvidia_driver(),
            capability=f"{props.major}.{props.minor}",
        )
    return info


def _nvidia_driver(version_file: str = "/proc/driver/nvidia/version") -> str | None:
    """The NVIDIA kernel driver's version from the first line of ``version_file``, e.g. ``NVRM version: NVIDIA UNIX
    x86_64 Kernel Module  535.104.05  ...`` or, for the open modules, ``... UNIX Open Kernel Module for x86_64
    550.54.15  ...``: the first dotted number after "Kernel Module"; None without a driver."""
    try:
        line = open(version_file, encoding="utf-8").readline()
    except OSError:
        return None
    found = re.search(r"Kernel Module.*?\b(\d+(?:\.\d+)+)\b", line)
    return found.group(1) if found else None


def cuda_event_ms(size: int = 1024) -> float | None:
    """Milliseconds of one ``size``x``size`` float32 matmul timed with CUDA events; None without CUDA.

    A fact only a CUDA run can produce: GPU evidence must carry it (see book/receipts.md).
    """
    import torch

    if not torch.cuda.is_available():
        return None
    a = torch.randn(size, size, device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    a @ a  # warm-up
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    a @ a
    end.record()
    torch.cuda.synchronize()
    return float(start.elapsed_time(end))


def environment_facts() -> dict:
    """What :func:`show_device` records: the device, the package versions and a CUDA event timing."""
    return {"device": device_info(), "packages": package_versions(), "cuda_event_ms": cuda_event_ms()}


def show_device() -> None:
    """Record this notebook's device and packages (call it once in the set-up cell).

    The glued value is what ``agentpost validate`` compares with the receipt's ``device`` and ``packages``.
    """
    from agentpost.record.recording import glue

    glue(GLUE_NAME, environment_facts(), kind="machine")
