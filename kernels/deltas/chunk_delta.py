"""Chunked gated-delta forward that also returns each chunk's state drift (DeltaS, spec ``papers/deltas.md``).

One program per (batch, head) walks the chunks in order and keeps the state ``S`` ``[d_k, d_v]`` in registers.
Per chunk of ``C`` tokens (UT transform, as in :mod:`agentpost.deltas.rule`): ``A = beta e^{G_t-G_j} K K^T``
(strictly lower), ``(I + A)^{-1}`` by repeated squaring of the nilpotent ``A``
(``(I+A)^{-1} = (I-A)(I+A^2)(I+A^4)...``, ``log2 C - 1`` products), ``U = (I+A)^{-1} beta (V - e^G K S)``, the
outputs, the new state, and -- when ``WITH_DRIFT`` -- ``||S_new - S||_F / (||S||_F + eps)`` (or the absolute norm).
Tail tokens past ``T`` get ``k = 0``, ``beta = 0``, ``g = 0``, so they change nothing. Layout follows
flash-linear-attention's ``chunk_gated_delta_rule``: ``q, k [B, T, H, d_k]``, ``v [B, T, H, d_v]``,
``g, beta [B, T, H]``; the reference with the same signature is :func:`chunk_gated_delta_drift_reference`.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from agentpost.deltas.rule import DRIFT_NORMS, chunk_gated_delta

from .._common import next_pow2


@triton.jit
def _chunk_delta_kernel(q_ptr, k_ptr, v_ptr, g_ptr, b_ptr, s0_ptr, o_ptr, sT_ptr, drift_ptr,
                        T, H, DK, DV, NC, scale, eps,
                        C: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr, LOG2C: tl.constexpr,
                        HAS_S0: tl.constexpr, WITH_DRIFT: tl.constexpr, RELATIVE: tl.constexpr):
    bh = tl.program_id(0)
    b = bh // H
    h = bh % H
    offs_c = tl.arange(0, C)
    offs_k = tl.arange(0, BK)
    offs_v = tl.arange(0, BV)
    mk = offs_k < DK
    mv = offs_v < DV
    s_off = bh * DK * DV + offs_k[:, None] * DV + offs_v[None, :]
    s_mask = mk[:, None] & mv[None, :]
    if HAS_S0:
        S = tl.load(s0_ptr + s_off, mask=s_mask, other=0.0).to(tl.float32)
    else:
        S = tl.zeros([BK, BV], tl.float32)
    lower = offs_c[:, None] >= offs_c[None, :]
    strict = offs_c[:, None] > offs_c[None, :]
    eye = tl.where(offs_c[:, None] == offs_c[None, :], 1.0, 0.0)
    for c in range(0, NC):
        t = c * C + offs_c
        mt = t < T
        row = (b * T + t) * H + h                                   # index of (b, t, h) in [B, T, H]
        kq_mask = mt[:, None] & mk[None, :]
        kk = tl.load(k_ptr + row[:, None] * DK + offs_k[None, :], mask=kq_mask, other=0.0).to(tl.float32)
        qq = tl.load(q_ptr + row[:, None] * DK + offs_k[None, :], mask=kq_mask, other=0.0).to(tl.float32) * scale
        vv = tl.load(v_ptr + row[:, None] * DV + offs_v[None, :], mask=mt[:, None] & mv[None, :],
                     other=0.0).to(tl.float32)
        gg = tl.load(g_ptr + row, mask=mt, other=0.0).to(tl.float32)
        bb = tl.load(b_ptr + row, mask=mt, other=0.0).to(tl.float32)
        G = tl.cumsum(gg, 0)
        G_last = tl.sum(gg, 0)
        decay = tl.exp(tl.where(lower, G[:, None] - G[None, :], 0.0))
        decay = tl.where(lower, decay, 0.0)
        A = tl.where(strict, bb[:, None] * decay * tl.dot(kk, tl.trans(kk)), 0.0)
        inv = eye - A
        P = A
        for _ in tl.static_range(LOG2C - 1):
            P = tl.dot(P, P)
            inv = inv + tl.dot(inv, P)
        rhs = bb[:, None] * (vv - tl.exp(G)[:, None] * tl.dot(kk, S))
        U = tl.dot(inv, rhs)
        out = tl.exp(G)[:, None] * tl.dot(qq, S) + tl.dot(decay * tl.dot(qq, tl.trans(kk)), U)
        tl.store(o_ptr + row[:, None] * DV + offs_v[None, :], out.to(o_ptr.dtype.element_ty),
                 mask=mt[:, None] & mv[None, :])
        S_new = tl.exp(G_last) * S + tl.dot(tl.trans(kk), tl.exp(G_last - G)[:, None] * U)
        if WITH_DRIFT:
            diff = S_new - S
            change = tl.sqrt(tl.sum(tl.sum(diff * diff, 1), 0))
            if RELATIVE:
                change = change / (tl.sqrt(tl.sum(tl.sum(S * S, 1), 0)) + eps)
            tl.store(drift_ptr + bh * NC + c, change)
        S = S_new
    tl.store(sT_ptr + s_off, S, mask=s_mask)


def _validate(q, k, v, g, beta, initial_state, chunk_size, drift_norm):
    if q.dim() != 4 or k.shape != q.shape or v.shape[:3] != q.shape[:3] or g.shape != q.shape[:3] \
            or beta.shape != q.shape[:3]:
        raise ValueError("need q, k [B, T, H, d_k], v [B, T, H, d_v], g, beta [B, T, H]; got "
                         f"{[tuple(x.shape) for x in (q, k, v, g, beta)]}")
    B, T, H, dk = q.shape
    if initial_state is not None and tuple(initial_state.shape) != (B, H, dk, v.shape[-1]):
        raise ValueError(f"initial_state must be [B, H, d_k, d_v] = {(B, H, dk, v.shape[-1])}, "
                         f"got {tuple(initial_state.shape)}")
    if chunk_size < 16 or chunk_size & (chunk_size - 1):
        raise ValueError(f"chunk_size must be a power of two >= 16 (tensor-core tile), got {chunk_size}")
    if drift_norm not in DRIFT_NORMS:
        raise ValueError(f"drift_norm must be one of {DRIFT_NORMS}, got {drift_norm!r}")


def chunk_gated_delta_drift(q, k, v, g, beta, initial_state=None, *, scale: float | None = None,
                            chunk_size: int = 64, with_drift: bool = True, drift_norm: str = "relative",
                            eps: float = 1e-6):
    """Triton chunked gated delta rule. Returns ``(o [B,T,H,d_v], final_state [B,H,d_k,d_v] fp32, drift)``,
    ``drift`` ``[B, H, ceil(T/chunk_size)]`` fp32, or None when ``with_drift`` is False."""
    _validate(q, k, v, g, beta, initial_state, chunk_size, drift_norm)
    B, T, H, dk = q.shape
    dv = v.shape[-1]
    q, k, v, g, beta = (x.contiguous() for x in (q, k, v, g, beta))
    n_chunks = triton.cdiv(T, chunk_size)
    o = torch.empty_like(v)
    final = torch.empty(B, H, dk, dv, device=q.device, dtype=torch.float32)
    drift = torch.empty(B, H, n_chunks, device=q.device, dtype=torch.float32)
    s0 = initial_state.float().contiguous() if initial_state is not None else final
    _chunk_delta_kernel[(B * H,)](
        q, k, v, g, beta, s0, o, final, drift, T, H, dk, dv, n_chunks,
        1.0 / math.sqrt(dk) if scale is None else float(scale), float(eps),
        C=chunk_size, BK=max(16, next_pow2(dk)), BV=max(16, next_pow2(dv)), LOG2C=int(math.log2(chunk_size)),
        HAS_S0=initial_state is not None, WITH_DRIFT=with_drift, RELATIVE=drift_norm == "relative")
    return o, final, (drift if with_drift else None)


def chunk_gated_delta_drift_reference(q, k, v, g, beta, initial_state=None, *, scale: float | None = None,
                                      chunk_size: int = 64, with_drift: bool = True, drift_norm: str = "relative",
                                      eps: float = 1e-6):
    """Torch reference of :func:`chunk_gated_delta_drift` (same signature): :func:`agentpost.deltas.rule.chunk_gated_delta`."""
    _validate(q, k, v, g, beta, initial_state, chunk_size, drift_norm)
    o, final, drift = chunk_gated_delta(q, k, v, g, beta, initial_state=initial_state, scale=scale,
                                        chunk_size=chunk_size, with_drift=with_drift, drift_norm=drift_norm, eps=eps)
    return o.to(v.dtype), final, drift
