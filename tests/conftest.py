"""Test-session setup shared by every test folder."""

import os

# Triton kernels run in the interpreter on CPU; it must be set before any kernel module is imported.
# On a GPU machine, AGENTPOST_TRITON_GPU=1 runs the same kernel tests on the device.
if os.environ.get("AGENTPOST_TRITON_GPU") != "1":
    os.environ.setdefault("TRITON_INTERPRET", "1")

pytest_plugins = ["agentpost.evidence.claims_plugin"]
