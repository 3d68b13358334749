"""One call that seeds every random source a chapter uses (CHAPTER.md, "Conventions")."""

from __future__ import annotations

import os
import random

import numpy as np


def seed_everything(seed: int) -> np.random.Generator:
    """Seed python, numpy and torch (CPU and CUDA) from ``seed``; returns a numpy Generator for local use."""
    if not isinstance(seed, int) or isinstance(seed, bool):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")
    random.seed(seed)
    np.random.seed(seed % 2**32)
    os.environ["PYTHONHASHSEED"] = str(seed)
    try:
        import torch

        torch.manual_seed(seed)
    except ImportError:  # pragma: no cover - torch is a dependency
        pass
    return np.random.default_rng(seed)
