"""Kernel tests run on the CPU interpreter, or on the GPU when AGENTPOST_TRITON_GPU=1 (see tests/conftest.py)."""

import torch

from tests.kernels._actkv_helpers import DEVICE

if DEVICE.type == "cuda":
    torch.set_default_device(DEVICE)
