"""The environment facts a receipt records."""

import pytest

from agentpost.record.environment import _nvidia_driver


@pytest.mark.parametrize(
    "line, version",
    [
        ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 01:15:15 UTC 2023", "535.104.05"),
        (
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  Release Build  (dvs-builder@U16)  Tue Mar  5 "
            "22:18:33 UTC 2024",
            "550.54.15",
        ),  # the open modules: the 2026-12-04 H200 receipts recorded "for" here
        ("something else entirely", None),
    ],
)
def test_nvidia_driver_version_from_the_proc_file(tmp_path, line, version):
    (tmp_path / "version").write_text(line + "\nGCC version: gcc 12\n")
    assert _nvidia_driver(str(tmp_path / "version")) == version
    assert _nvidia_driver(str(tmp_path / "missing")) is None
