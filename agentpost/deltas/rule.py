"""The gated delta rule and its state drift (spec ``papers/deltas.md``, "Gated delta rule" and "Drift score").

Layout and conventions follow flash-linear-attention's ``chunk_gated_delta_rule`` and transformers'
``models/qwen3_5/modeling_qwen3_5.py::torch_recurrent_gated_delta_rule`` (the layers of the hybrid model this
chapter runs): ``q, k`` ``[B, T, H, d_k]``, ``v`` ``[B, T, H, d_v]``, log-decay ``g = log(alpha)`` and write
strength ``beta`` ``[B, T, H]``, state ``S`` ``[B, H, d_k, d_v]`` (the transpose of the spec's ``d_v x d_k``, so
``S^T k ~ v``). Per token (spec form, transposed):

    S_t = alpha_t S_{t-1} + k_t (beta_t (v_t - alpha_t S_{t-1}^T k_t))^T,        o_t = S_t^T (scale * q_t)

Keys are expected L2-normalised (the model does it). The chunked form is the WY / UT-transform one: within a chunk
of ``C`` tokens with cumulative log-decay ``G_t = sum_{i<=t} g_i`` the written pseudo-values ``U`` solve the unit
lower-triangular system ``(I + A) U = diag(beta) (V - diag(e^G) K S_0)`` with
``A_tj = beta_t e^{G_t - G_j} k_t.k_j`` for ``j < t``; then ``O = diag(e^G) Q S_0 + (e^{G_t-G_j} q_t.k_j)_{j<=t} U``
and ``S_C = e^{G_C} S_0 + K^T diag(e^{G_C - G}) U``.

Drift of a chunk (third-party reading of Eq. 3), per head: ``||S_after - S_before||_F / (||S_before||_F + eps)``
(``drift_norm="relative"``, the spec default) or the numerator alone (``"absolute"``). The change is the raw one
(``drift_source="raw"``, the spec default: it includes the decay ``(e^{G_C} - 1) S_before``) or the write term
alone (``"write"``: ``S_after - e^{G_C} S_before``, a reading the paper leaves open, given the chunk's cumulative
log-decay ``G_C``), so that a head whose gate forgets fast does not drift by decay alone.
"""

from __future__ import annotations

import math

import torch

DRIFT_NORMS = ("relative", "absolute")
DRIFT_SOURCES = ("raw", "write")


def _check(q, k, v, g, beta):
    if q.dim() != 4 or k.shape != q.shape or v.shape[:3] != q.shape[:3]:
        raise ValueError(
            f"q, k must be [B, T, H, d_k] and v [B, T, H, d_v]; got {tuple(q.shape)}, {tuple(k.shape)}, "
            f"{tuple(v.shape)}"
        )
    if g.shape != q.shape[:3] or beta.shape != q.shape[:3]:
        raise ValueError(
            f"g and beta must be [B, T, H] = {tuple(q.shape[:3])}; got {tuple(g.shape)}, {tuple(beta.shape)}"
        )


def state_drift(
    before: torch.Tensor,
    after: torch.Tensor,
    *,
    drift_norm: str = "relative",
    eps: float = 1e-6,
    drift_source: str = "raw",
    log_decay: torch.Tensor | None = None,
) -> torch.Tensor:
    """Per-head drift ``||after - before||_F / (||before||_F + eps)`` over the last two dims (relative, the default; the
    paper leaves relative or absolute open); with ``drift_source="write"`` the change is ``after - e^{log_decay}
    before`` (the write term only), ``log_decay`` the chunk's cumulative log-decay ``G_C`` per head (the shape of
    ``before`` without its last two dims)."""
    if drift_norm not in DRIFT_NORMS:
        raise ValueError(f"drift_norm must be one of {DRIFT_NORMS}, got {drift_norm!r}")
    if drift_source not in DRIFT_SOURCES:
        raise ValueError(f"drift_source must be one of {DRIFT_SOURCES}, got {drift_source!r}")
    dtype = torch.promote_types(torch.promote_types(before.dtype, after.dtype), torch.float32)  # fp32 or fp64
    if drift_source == "write":
        if log_decay is None:
            raise ValueError("drift_source='write' needs the chunk's cumulative log-decay (log_decay)")
        before_decayed = log_decay.to(before.device, dtype).exp()[..., None, None] * before.to(dtype)
        change = torch.linalg.matrix_norm(after.to(dtype) - before_decayed)
    else:
        change = torch.linalg.matrix_norm((after - before).to(dtype))
    if drift_norm == "absolute":
        return change
    return change / (torch.linalg.matrix_norm(before.to(dtype)) + eps)


def _prepare(q, k, v, g, beta, initial_state, scale, dtype=torch.float32):
    """Check shapes; return ``(scaled q, k, v, g, beta)`` as ``dtype`` ``[B, H, T, ...]`` and the initial state."""
    _check(q, k, v, g, beta)
    B, T, H, dk = k.shape
    s = 1.0 / math.sqrt(dk) if scale is None else float(scale)
    q, k, v, g, beta = (x.transpose(1, 2).to(dtype) for x in (q, k, v, g, beta))
    S = (
        torch.zeros(B, H, dk, v.shape[-1], device=k.device, dtype=dtype)
        if initial_state is None
        else initial_state.to(dtype).clone()
    )
    return (s * q, k, v, g, beta), S


def recurrent_gated_delta(
    q,
    k,
    v,
    g,
    beta,
    *,
    initial_state=None,
    scale: float | None = None,
    chunk_size: int | None = None,
    drift_norm: str = "relative",
    eps: float = 1e-6,
    drift_source: str = "raw",
    dtype: torch.dtype = torch.float32,
):
    """Token-by-token gated delta rule (the reference), computed in ``dtype`` (float64 for the kernels' tests).
    Returns ``(o, final_state, drift)``.

    ``drift`` is ``[B, H, n_chunks]`` for chunks of ``chunk_size`` tokens (the last one may be shorter), or None.
    """
    (q, k, v, g, beta), S = _prepare(q, k, v, g, beta, initial_state, scale, dtype)
    T = q.shape[2]
    o = torch.zeros_like(v)
    drifts, before, log_decay = [], S.clone(), torch.zeros_like(g[:, :, 0])
    for t in range(T):
        log_decay = log_decay + g[:, :, t]
        S = S * g[:, :, t].exp()[..., None, None]
        delta = beta[:, :, t, None] * (v[:, :, t] - torch.einsum("bhkv,bhk->bhv", S, k[:, :, t]))
        S = S + k[:, :, t, :, None] * delta[:, :, None, :]
        o[:, :, t] = torch.einsum("bhkv,bhk->bhv", S, q[:, :, t])
        if chunk_size and ((t + 1) % chunk_size == 0 or t == T - 1):
            drifts.append(
                state_drift(before, S, drift_norm=drift_norm, eps=eps, drift_source=drift_source, log_decay=log_decay)
            )
            before, log_decay = S.clone(), torch.zeros_like(log_decay)
    drift = torch.stack(drifts, dim=-1) if chunk_size else None
    return o.transpose(1, 2), S, drift


def chunk_gated_delta(
    q,
    k,
    v,
    g,
    beta,
    *,
    initial_state=None,
    scale: float | None = None,
    chunk_size: int = 64,
    with_drift: bool = True,
    drift_norm: str = "relative",
    eps: float = 1e-6,
    drift_source: str = "raw",
):
    """Chunked (UT-transform) gated delta rule with the drift of every chunk. Returns ``(o, final_state, drift)``.

    Same results as :func:`recurrent_gated_delta` to float tolerance; ``drift`` is ``[B, H, ceil(T / chunk_size)]``
    (None when ``with_drift`` is False).
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    (q, k, v, g, beta), S = _prepare(q, k, v, g, beta, initial_state, scale)
    T = q.shape[2]
    o = torch.empty_like(v)
    drifts = []
    for c0 in range(0, T, chunk_size):
        sl = slice(c0, min(c0 + chunk_size, T))
        qc, kc, vc, bc = q[:, :, sl], k[:, :, sl], v[:, :, sl], beta[:, :, sl]
        G = g[:, :, sl].cumsum(-1)  # [B, H, C]
        C = G.shape[-1]
        lower = torch.ones(C, C, dtype=torch.bool, device=q.device).tril()
        strict = lower.clone().fill_diagonal_(False)
        decay = torch.where(lower, (G[..., :, None] - G[..., None, :]).masked_fill(~lower, 0.0).exp(), 0.0)
        A = torch.where(strict, bc[..., :, None] * decay * (kc @ kc.transpose(-1, -2)), 0.0)
        rhs = bc[..., None] * (vc - G.exp()[..., None] * (kc @ S))
        U = torch.linalg.solve_triangular(torch.eye(C, device=q.device) + A, rhs, upper=False, unitriangular=True)
        o[:, :, sl] = G.exp()[..., None] * (qc @ S) + (decay * (qc @ kc.transpose(-1, -2))) @ U
        S_new = G[..., -1:, None].exp() * S + kc.transpose(-1, -2) @ ((G[..., -1:] - G).exp()[..., None] * U)
        if with_drift:
            drifts.append(
                state_drift(S, S_new, drift_norm=drift_norm, eps=eps, drift_source=drift_source, log_decay=G[..., -1])
            )
        S = S_new
    return o.transpose(1, 2), S, (torch.stack(drifts, dim=-1) if with_drift else None)
