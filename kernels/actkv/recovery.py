"""Attention recovery from the log-sum-exp (Algorithm 3) and the head reduction that feeds Algorithm 1.

For each action-region query ``t`` of request ``r`` (recorded at decode time with its ``lse[r,t,:]``):
``A[t,h,i] = exp(scale * q[t,h] . k_i - lse[t,h])`` for the ``ctx_lens[r,t]`` entries it saw, 0 beyond them;
reduced by the max over each GQA group and accumulated as a running mean over action tokens, per KV head:
``acc[r,g,i] <- (count[r] * acc[r,g,i] + sum_t max_{h in g} A[t,h,i]) / (count[r] + T_r)``.
K is read through the block table, one program per (request, logical block, KV head), without gathering the cache.
Padding queries carry ``ctx_lens == 0`` and are not counted. ``agentpost.actkv.lrfu.head_reduce`` then combines the KV heads
(the paper leaves the pooling over a group's query heads open: ``mean_of_max`` by default).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from .._common import next_pow2
from ._common import check_k_cache


@triton.jit
def _recover_kernel(
    q_ptr,
    lse_ptr,
    k_ptr,
    bt_ptr,
    ctx_ptr,
    acc_ptr,
    cnt_ptr,
    new_ptr,
    scale,
    T,
    stride_qr,
    stride_qt,
    stride_qh,
    stride_lr,
    stride_lt,
    stride_kb,
    stride_ks,
    stride_kh,
    stride_btr,
    stride_cr,
    stride_ar,
    stride_ag,
    G,
    D,
    BS: tl.constexpr,
    BLOCK_G: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    r = tl.program_id(0)
    lb = tl.program_id(1)
    g = tl.program_id(2)
    offs_g = tl.arange(0, BLOCK_G)
    offs_d = tl.arange(0, BLOCK_D)
    offs_s = tl.arange(0, BS)
    mg = offs_g < G
    md = offs_d < D
    heads = g * G + offs_g
    slot = lb * BS + offs_s
    pb = tl.load(bt_ptr + r * stride_btr + lb)
    live = (offs_s * 0 + pb) >= 0  # [BS]: the logical block is allocated
    k = tl.load(
        k_ptr
        + tl.maximum(pb, 0).to(tl.int64) * stride_kb
        + offs_s[:, None] * stride_ks
        + g * stride_kh
        + offs_d[None, :],
        mask=live[:, None] & md[None, :],
        other=0.0,
    ).to(tl.float32)
    total = tl.zeros([BS], tl.float32)
    for t in range(0, T):
        c = tl.load(ctx_ptr + r * stride_cr + t)
        q = tl.load(
            q_ptr + r * stride_qr + t * stride_qt + heads[:, None] * stride_qh + offs_d[None, :],
            mask=mg[:, None] & md[None, :],
            other=0.0,
        ).to(tl.float32)
        lse = tl.load(lse_ptr + r * stride_lr + t * stride_lt + heads, mask=mg, other=0.0)
        s = tl.sum(q[:, None, :] * k[None, :, :], axis=2) * scale
        vis = (slot < c) & live
        a = tl.where(mg[:, None] & vis[None, :], tl.exp(s - lse[:, None]), 0.0)
        total += tl.max(a, axis=0)
    cnt = tl.load(cnt_ptr + r)
    n_new = tl.load(new_ptr + r)
    acc_off = acc_ptr + r * stride_ar + g * stride_ag + slot
    old = tl.load(acc_off)
    tl.store(acc_off, (old * cnt + total) / tl.maximum(cnt + n_new, 1.0))


def _check(q, lse, k_cache, block_table, ctx_lens, acc, count):
    bs = check_k_cache(k_cache)
    if q.dim() != 4 or q.shape[3] != k_cache.shape[3]:
        raise ValueError(
            f"q must be [requests, action_tokens, q_heads, head_dim={k_cache.shape[3]}], got {tuple(q.shape)}"
        )
    R, T, Hq, _ = q.shape
    H = k_cache.shape[2]
    if Hq % H:
        raise ValueError(f"q_heads={Hq} must be a multiple of kv_heads={H} (GQA)")
    if lse.shape != (R, T, Hq):
        raise ValueError(f"lse must be [{R}, {T}, {Hq}] (one per action query and head), got {tuple(lse.shape)}")
    if ctx_lens.shape != (R, T):
        raise ValueError(
            f"ctx_lens must be [{R}, {T}] (entries visible to each action query), got {tuple(ctx_lens.shape)}"
        )
    if block_table.dim() != 2 or block_table.shape[0] != R or not block_table.is_contiguous():
        raise ValueError(f"block_table must be a contiguous [{R}, max_blocks] tensor, got {tuple(block_table.shape)}")
    N = block_table.shape[1] * bs
    if ctx_lens.numel() and (int(ctx_lens.min()) < 0 or int(ctx_lens.max()) > N):
        raise ValueError(f"ctx_lens must lie in [0, {N}]")
    if acc is not None and (acc.shape != (R, H, N) or acc.dtype != torch.float32 or not acc.is_contiguous()):
        raise ValueError(f"acc must be a contiguous float32 [{R}, {H}, {N}] tensor, got {tuple(acc.shape)} {acc.dtype}")
    if (acc is None) != (count is None):
        raise ValueError("pass acc and count together (the running mean and its number of action tokens)")
    if count is not None and (count.shape != (R,) or count.dtype != torch.float32):
        raise ValueError(f"count must be a float32 [{R}] tensor, got {tuple(count.shape)} {count.dtype}")
    return bs, N


def _init(q, k_cache, N, acc, count):
    if acc is None:
        acc = torch.zeros((q.shape[0], k_cache.shape[2], N), dtype=torch.float32, device=q.device)
        count = torch.zeros(q.shape[0], dtype=torch.float32, device=q.device)
    return acc, count


def recover_action_attention(q, lse, k_cache, block_table, ctx_lens, scale=None, acc=None, count=None):
    """Algorithm 3: update (in place) and return the running mean ``(acc [R, kv_heads, max_blocks*bs], count [R])``.

    ``q``: [R, T, Hq, D] action queries; ``lse``: [R, T, Hq] from :func:`paged_decode_attention`;
    ``ctx_lens``: [R, T] entries visible to each query (0 = padding). ``acc``/``count`` start at zeros when omitted;
    pass them back in for the next action tokens of the same round (reset them when a new action region opens).
    """
    bs, N = _check(q, lse, k_cache, block_table, ctx_lens, acc, count)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    acc, count = _init(q, k_cache, N, acc, count)
    R, T, Hq, D = q.shape
    H = k_cache.shape[2]
    G = Hq // H
    if R == 0 or N == 0:
        return acc, count
    q = q.contiguous()
    lse = lse.float().contiguous()
    ctx_lens = ctx_lens.contiguous()
    n_new = (ctx_lens > 0).sum(1).float()
    _recover_kernel[(R, block_table.shape[1], H)](
        q,
        lse,
        k_cache,
        block_table,
        ctx_lens,
        acc,
        count,
        n_new,
        scale,
        T,
        q.stride(0),
        q.stride(1),
        q.stride(2),
        lse.stride(0),
        lse.stride(1),
        k_cache.stride(0),
        k_cache.stride(1),
        k_cache.stride(2),
        block_table.stride(0),
        ctx_lens.stride(0),
        acc.stride(0),
        acc.stride(1),
        G,
        D,
        BS=bs,
        BLOCK_G=next_pow2(G),
        BLOCK_D=next_pow2(D),
        num_warps=4,
    )
    count += n_new
    return acc, count


def recover_action_attention_reference(q, lse, k_cache, block_table, ctx_lens, scale=None, acc=None, count=None):
    """Torch reference of :func:`recover_action_attention` (gathers K per request)."""
    bs, N = _check(q, lse, k_cache, block_table, ctx_lens, acc, count)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    acc, count = _init(q, k_cache, N, acc, count)
    R, T, Hq, D = q.shape
    H = k_cache.shape[2]
    G = Hq // H
    for r in range(R):
        total = torch.zeros((H, N), dtype=torch.float32, device=q.device)
        n_new = 0
        for t in range(T):
            c = int(ctx_lens[r, t])
            if c == 0:
                continue
            n_new += 1
            idx = torch.arange(c, device=q.device)
            k = k_cache[block_table[r, idx // bs].long(), idx % bs].float()  # [c, H, D]
            s = torch.einsum("hd,chd->hc", q[r, t].float(), k.repeat_interleave(G, dim=1)) * scale
            a = torch.exp(s - lse[r, t].float()[:, None])  # [Hq, c]
            total[:, :c] += a.view(H, G, c).amax(dim=1)
        acc[r] = (acc[r] * count[r] + total) / max(float(count[r]) + n_new, 1.0)
        count[r] += n_new
    return acc, count
