"""Paged decode attention that also returns the log-sum-exp (the input of Algorithm 3).

For request ``r`` and query head ``h`` (KV head ``g = h // G``, ``G = q_heads / kv_heads``):
``out[r,h] = softmax(scale * q[r,h] K_g^T) V_g`` over the ``seq_lens[r]`` entries reached through
``block_table[r]``, and ``lse[r,h] = log sum_j exp(scale * q[r,h] . k_j)`` (natural log, spec Alg. 3).
One program per (request, KV head) serves the whole GQA group and streams the blocks with an online softmax.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .._common import next_pow2
from ._common import check_cache, check_table


@triton.jit
def _paged_decode_kernel(
    q_ptr,
    k_ptr,
    v_ptr,
    bt_ptr,
    lens_ptr,
    out_ptr,
    lse_ptr,
    scale,
    stride_qr,
    stride_qh,
    stride_kb,
    stride_ks,
    stride_kh,
    stride_btr,
    stride_or,
    stride_oh,
    stride_lr,
    G,
    D,
    BS: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    r = tl.program_id(0)
    g = tl.program_id(1)
    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    offs_s = tl.arange(0, BS)
    mg = offs_g < G
    md = offs_d < D
    heads = g * G + offs_g
    q = tl.load(
        q_ptr + r * stride_qr + heads[:, None] * stride_qh + offs_d[None, :], mask=mg[:, None] & md[None, :], other=0.0
    ).to(tl.float32)
    n = tl.load(lens_ptr + r)
    m_i = tl.full([BLOCK_G], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_G], tl.float32)
    acc = tl.zeros([BLOCK_G, BLOCK_D], tl.float32)
    for b in range(0, tl.cdiv(n, BS)):
        pb = tl.load(bt_ptr + r * stride_btr + b).to(tl.int64)
        ms = (b * BS + offs_s) < n
        kv_off = pb * stride_kb + offs_s[:, None] * stride_ks + g * stride_kh + offs_d[None, :]
        kv_mask = ms[:, None] & md[None, :]
        k = tl.load(k_ptr + kv_off, mask=kv_mask, other=0.0).to(tl.float32)
        s = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * scale
        s = tl.where(ms[None, :], s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        v = tl.load(v_ptr + kv_off, mask=kv_mask, other=0.0).to(tl.float32)
        acc = acc * alpha[:, None] + tl.sum(p[:, :, None] * v[None, :, :], axis=1)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(
        out_ptr + r * stride_or + heads[:, None] * stride_oh + offs_d[None, :],
        out.to(out_ptr.dtype.element_ty),
        mask=mg[:, None] & md[None, :],
    )
    tl.store(lse_ptr + r * stride_lr + heads, m_i + tl.log(l_i), mask=mg)


def _check(q, k_cache, v_cache, block_table, seq_lens):
    bs = check_cache(k_cache, v_cache)
    check_table(block_table, seq_lens, bs)
    if q.dim() != 3 or q.shape[0] != block_table.shape[0] or q.shape[2] != k_cache.shape[3]:
        raise ValueError(
            f"q must be [requests={block_table.shape[0]}, q_heads, head_dim={k_cache.shape[3]}], got {tuple(q.shape)}"
        )
    if q.shape[1] % k_cache.shape[2]:
        raise ValueError(f"q_heads={q.shape[1]} must be a multiple of kv_heads={k_cache.shape[2]} (GQA)")
    if seq_lens.numel() and int(seq_lens.min()) < 1:
        raise ValueError("decode attention needs at least one cached entry per request (seq_lens >= 1)")
    return bs


def paged_decode_attention(q, k_cache, v_cache, block_table, seq_lens, scale=None):
    """Decode attention over a paged cache; returns ``(out [R, Hq, D] in q.dtype, lse [R, Hq] float32)``."""
    bs = _check(q, k_cache, v_cache, block_table, seq_lens)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    q = q.contiguous()
    R, Hq, D = q.shape
    H = k_cache.shape[2]
    G = Hq // H
    out = torch.empty_like(q)
    lse = torch.empty((R, Hq), dtype=torch.float32, device=q.device)
    if R == 0:
        return out, lse
    _paged_decode_kernel[(R, H)](
        q,
        k_cache,
        v_cache,
        block_table,
        seq_lens,
        out,
        lse,
        scale,
        q.stride(0),
        q.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        block_table.stride(0),
        out.stride(0),
        out.stride(1),
        lse.stride(0),
        G,
        D,
        BS=bs,
        BLOCK_G=next_pow2(G),
        BLOCK_D=next_pow2(D),
        num_warps=4,
    )
    return out, lse


def paged_decode_attention_reference(q, k_cache, v_cache, block_table, seq_lens, scale=None):
    """Torch reference of :func:`paged_decode_attention` (gathers each request's entries, fp32 softmax)."""
    bs = _check(q, k_cache, v_cache, block_table, seq_lens)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    R, Hq, D = q.shape
    G = Hq // k_cache.shape[2]
    out = torch.empty_like(q)
    lse = torch.empty((R, Hq), dtype=torch.float32, device=q.device)
    for r in range(R):
        n = int(seq_lens[r])
        idx = torch.arange(n, device=q.device)
        blocks = block_table[r, idx // bs].long()
        k = k_cache[blocks, idx % bs].float().repeat_interleave(G, dim=1)  # [n, Hq, D]
        v = v_cache[blocks, idx % bs].float().repeat_interleave(G, dim=1)
        s = torch.einsum("hd,nhd->hn", q[r].float(), k) * scale
        lse[r] = torch.logsumexp(s, dim=1)
        out[r] = torch.einsum("hn,nhd->hd", torch.softmax(s, dim=1), v).to(q.dtype)
    return out, lse
