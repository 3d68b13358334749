"""Slot copy, the one data-movement kernel behind append and both compactions.

``dst[dst_idx[p]] = src[src_idx[p]]`` for K and V at once, one program per (pair, row chunk). A row is one token
slot with all its KV heads (``kv_heads * head_dim`` contiguous elements). When ``src is dst`` the caller must
guarantee that no destination is also a source (Algorithm 4's conflict-free condition): then the pairs are
independent and run in one parallel pass with no scratch buffer.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .._common import next_pow2


@triton.jit
def _copy_rows_kernel(src_k, dst_k, src_v, dst_v, src_idx, dst_idx, ROW, BLOCK: tl.constexpr):
    p = tl.program_id(0)
    c = tl.program_id(1)
    s = tl.load(src_idx + p).to(tl.int64)
    d = tl.load(dst_idx + p).to(tl.int64)
    offs = c * BLOCK + tl.arange(0, BLOCK)
    m = offs < ROW
    tl.store(dst_k + d * ROW + offs, tl.load(src_k + s * ROW + offs, mask=m), mask=m)
    tl.store(dst_v + d * ROW + offs, tl.load(src_v + s * ROW + offs, mask=m), mask=m)


def _check(src_k, dst_k, src_v, dst_v, src_idx, dst_idx):
    for name, t in (("src_k", src_k), ("dst_k", dst_k), ("src_v", src_v), ("dst_v", dst_v)):
        if t.dim() != 2 or not t.is_contiguous():
            raise ValueError(f"{name} must be a contiguous [rows, row_len] tensor, got {tuple(t.shape)}")
    row = src_k.shape[1]
    if {t.shape[1] for t in (dst_k, src_v, dst_v)} != {row}:
        raise ValueError("all four row tensors must share the row length")
    if src_idx.shape != dst_idx.shape or src_idx.dim() != 1:
        raise ValueError(f"src_idx {tuple(src_idx.shape)} and dst_idx {tuple(dst_idx.shape)} must be equal 1-D")
    return row


def copy_rows(src_k, dst_k, src_v, dst_v, src_idx, dst_idx, *, num_warps: int = 4) -> None:
    """Launch the slot-copy kernel (in place on ``dst_k``/``dst_v``)."""
    row = _check(src_k, dst_k, src_v, dst_v, src_idx, dst_idx)
    n = src_idx.numel()
    if n == 0:
        return
    block = min(next_pow2(row), 2048)
    _copy_rows_kernel[(n, triton.cdiv(row, block))](
        src_k, dst_k, src_v, dst_v, src_idx.contiguous(), dst_idx.contiguous(), row, BLOCK=block, num_warps=num_warps
    )


def copy_rows_reference(src_k, dst_k, src_v, dst_v, src_idx, dst_idx, *, num_warps: int = 4) -> None:
    """Torch reference of :func:`copy_rows` (``num_warps`` is ignored)."""
    _check(src_k, dst_k, src_v, dst_v, src_idx, dst_idx)
    dst_k[dst_idx.long()] = src_k[src_idx.long()]
    dst_v[dst_idx.long()] = src_v[src_idx.long()]
