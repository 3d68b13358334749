"""Shape checks shared by the ActKV ops (one home for the paged-cache layout contract).

Layout of one layer's paged cache: ``k_cache``/``v_cache`` are ``[num_blocks, block_size, kv_heads, head_dim]``
(a token slot, all heads, is one contiguous row, so a slot move is one contiguous copy); ``block_table`` is
``[requests, max_blocks]`` int32/int64 physical block ids, ``-1`` where unused; ``seq_lens`` is ``[requests]``.
"""

from __future__ import annotations

import torch


def check_cache(k_cache: torch.Tensor, v_cache: torch.Tensor) -> int:
    """Validate a paged K/V pair and return its block size."""
    if k_cache.dim() != 4:
        raise ValueError(
            f"k_cache must be [num_blocks, block_size, kv_heads, head_dim], got shape {tuple(k_cache.shape)}"
        )
    if v_cache.shape != k_cache.shape or v_cache.dtype != k_cache.dtype or v_cache.device != k_cache.device:
        raise ValueError(
            f"v_cache {tuple(v_cache.shape)}/{v_cache.dtype} must match k_cache {tuple(k_cache.shape)}/{k_cache.dtype}"
        )
    check_k_cache(k_cache)
    if not v_cache.is_contiguous():
        raise ValueError("v_cache must be contiguous")
    return k_cache.shape[1]


def check_k_cache(k_cache: torch.Tensor) -> int:
    if k_cache.dim() != 4:
        raise ValueError(
            f"k_cache must be [num_blocks, block_size, kv_heads, head_dim], got shape {tuple(k_cache.shape)}"
        )
    bs = k_cache.shape[1]
    if bs < 1 or bs & (bs - 1):
        raise ValueError(f"block_size must be a power of two, got {bs}")
    if not k_cache.is_contiguous():
        raise ValueError("k_cache must be contiguous")
    return bs


def check_table(block_table: torch.Tensor, seq_lens: torch.Tensor, block_size: int) -> None:
    if block_table.dim() != 2 or block_table.dtype not in (torch.int32, torch.int64):
        raise ValueError(
            f"block_table must be a 2-D int32/int64 tensor, got {tuple(block_table.shape)} {block_table.dtype}"
        )
    if not block_table.is_contiguous():
        raise ValueError("block_table must be contiguous")
    if seq_lens.shape != (block_table.shape[0],):
        raise ValueError(f"seq_lens must have shape ({block_table.shape[0]},), got {tuple(seq_lens.shape)}")
    if seq_lens.numel() and (int(seq_lens.min()) < 0 or int(seq_lens.max()) > block_table.shape[1] * block_size):
        raise ValueError(
            f"seq_lens must lie in [0, max_blocks*block_size={block_table.shape[1] * block_size}], got {seq_lens.tolist()}"
        )


def slot_index(block_table: torch.Tensor, rows: torch.Tensor, logical: torch.Tensor, block_size: int) -> torch.Tensor:
    """Flat physical slot (``block * block_size + offset``) of logical entry ``logical`` of request ``rows``."""
    blocks = block_table[rows, torch.div(logical, block_size, rounding_mode="floor")].long()
    if blocks.numel() and int(blocks.min()) < 0:
        raise ValueError("a live cache entry maps to an unallocated block (-1) in block_table")
    return blocks * block_size + logical % block_size
