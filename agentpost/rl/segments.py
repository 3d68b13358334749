"""Masks and segments: map per-turn / per-event values onto tokens (rl-primitives.md, section 5;
toolsearcher.md eq. 6). Each maximal run of 1s in a row of the loss mask is one assistant segment; tool-response
and prompt tokens carry mask 0 and therefore advantage 0.

Reference (semantics only): ToolSearcher ``adv_compute.py::create_turns_and_cumulative_tensors``.
"""

from __future__ import annotations

from typing import Sequence

import torch


class SegmentMismatch(ValueError):
    """A row has a different number of assistant segments than values to place on them."""


def segment_ids(mask: torch.Tensor) -> torch.Tensor:
    """Per-token segment index: 0 where mask = 0, else 1, 2, ... for the row's consecutive runs of 1s."""
    if mask.ndim != 2:
        raise ValueError(f"mask must be 2-D [rows, tokens], got shape {tuple(mask.shape)}")
    m = mask.bool().to(torch.int64)
    starts = m.clone()
    starts[:, 1:] = m[:, 1:] * (1 - m[:, :-1])
    return torch.cumsum(starts, dim=1) * m


def broadcast_segment_values(mask: torch.Tensor, values: Sequence[Sequence[float]]) -> torch.Tensor:
    """Token tensor where segment t of row i holds ``values[i][t]`` and masked tokens hold 0.

    Raises :class:`SegmentMismatch` (naming the row) when a row's segment count differs from ``len(values[i])``.
    """
    ids = segment_ids(mask)
    if len(values) != mask.shape[0]:
        raise ValueError(f"values has {len(values)} rows, mask has {mask.shape[0]}")
    out = torch.zeros(mask.shape, dtype=torch.float64)
    for i, row in enumerate(values):
        n_seg = int(ids[i].max())
        if n_seg != len(row):
            raise SegmentMismatch(f"row {i}: {n_seg} assistant segments but {len(row)} values")
        if n_seg:
            table = torch.cat([torch.zeros(1, dtype=torch.float64), torch.as_tensor(list(row), dtype=torch.float64)])
            out[i] = table[ids[i]]
    return out


def broadcast_sequence_values(mask: torch.Tensor, values: Sequence[float] | torch.Tensor) -> torch.Tensor:
    """Outcome credit: the row's scalar on every masked-in token, 0 elsewhere."""
    v = torch.as_tensor(values, dtype=torch.float64)
    if v.shape != (mask.shape[0],):
        raise ValueError(f"values must have shape ({mask.shape[0]},), got {tuple(v.shape)}")
    return v[:, None] * mask.to(torch.float64)
