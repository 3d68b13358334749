"""Helpers shared by every paper's kernels (the kernels' part of the shared core: no paper imports here)."""

from __future__ import annotations

import triton


def next_pow2(n: int) -> int:
    """The smallest power of two >= max(n, 1): a ``tl.arange`` / block extent covering ``n`` elements."""
    return triton.next_power_of_2(max(int(n), 1))
