"""Hierarchical temporal compression (muser.md section 1; the paper's Eq. 6 per digest-B, form not confirmed).

A history window of ``L`` positions (oldest -> newest, left-padded) is split from the newest end into a recent
segment of ``recent_len`` raw positions, a mid segment of ``mid_len`` positions pooled with stride ``strides[1]``
and a far segment (the rest) pooled with stride ``strides[2]``:

    Z = [ z^F_1 .. z^F_ceil(|F|/s_F) ; z^Mi_1 .. z^Mi_ceil(|Mi|/s_Mi) ; e(R) ]

Choice (documented in the chapter): blocks are counted back from each segment's newer boundary, so the block layout
depends only on ``L`` and is the same for every user of a padded batch; the spec's formula counts far blocks from
``x_1``. The two give the same token count and differ only in which far block is the partial one. Padding
positions are excluded from every pool; a block with no real item is a padding token (``zmask`` False).
"""

from __future__ import annotations

import math

import torch

POOLS = ("mean", "attentive")
#: Segment ids of compressed tokens (for segment embeddings and for splitting long / short parts when serving).
FAR, MID, RECENT = 0, 1, 2


def segment_lengths(length: int, recent_len: int, mid_len: int) -> tuple[int, int, int]:
    """(far, mid, recent) raw lengths of a window of ``length`` positions; a short window is all recent."""
    if min(length, recent_len) < 1 or mid_len < 0:
        raise ValueError(f"need length >= 1, recent_len >= 1, mid_len >= 0; got {length}, {recent_len}, {mid_len}")
    r = min(recent_len, length)
    m = min(mid_len, length - r)
    return length - r - m, m, r


def _check_strides(strides) -> tuple[int, int, int]:
    strides = tuple(int(s) for s in strides)
    if len(strides) != 3 or min(strides) < 1:
        raise ValueError(f"strides must be three positive integers (recent, mid, far), got {strides}")
    return strides


def compressed_length(length: int, recent_len: int, mid_len: int, strides=(1, 16, 64)) -> int:
    """Number of tokens of ``Z``: ceil(|F|/s_F) + ceil(|Mi|/s_Mi) + ceil(|R|/s_R).

    Spec example: L = 10,000, L_r = 200, L_m = 3,200, strides 1/16/64 -> 104 + 200 + 200 = 504.
    """
    s_r, s_m, s_f = _check_strides(strides)
    f, m, r = segment_lengths(length, recent_len, mid_len)
    return math.ceil(f / s_f) + math.ceil(m / s_m) + math.ceil(r / s_r)


def segment_ids(length: int, recent_len: int, mid_len: int, strides=(1, 16, 64)) -> torch.Tensor:
    """Segment id (FAR, MID, RECENT) of each compressed token, oldest -> newest."""
    s_r, s_m, s_f = _check_strides(strides)
    f, m, r = segment_lengths(length, recent_len, mid_len)
    counts = (math.ceil(f / s_f), math.ceil(m / s_m), math.ceil(r / s_r))
    return torch.cat([torch.full((c,), seg, dtype=torch.long) for seg, c in zip((FAR, MID, RECENT), counts)])


def pool_blocks(
    x: torch.Tensor, mask: torch.Tensor, stride: int, *, pool: str = "mean", attn: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pool consecutive blocks of ``stride`` positions of ``x`` (B, n, d), blocks counted back from the newest end.

    ``mean``: z = sum_k m_k e_k / sum_k m_k. ``attentive``: z = sum_k softmax_k(w^T e_k) e_k over real positions
    (``attn`` = w, shape (d,)). Returns (B, ceil(n/stride), d) and the token mask (block has a real position).
    """
    if pool not in POOLS:
        raise ValueError(f"pool must be one of {POOLS}, got {pool!r}")
    b, n, d = x.shape
    if n == 0:
        return x.new_zeros(b, 0, d), mask.new_zeros(b, 0)
    n_blocks = math.ceil(n / stride)
    pad = n_blocks * stride - n
    if pad:
        x = torch.cat([x.new_zeros(b, pad, d), x], dim=1)
        mask = torch.cat([mask.new_zeros(b, pad), mask], dim=1)
    xb = x.view(b, n_blocks, stride, d)
    mb = mask.view(b, n_blocks, stride)
    any_real = mb.any(-1)
    if pool == "mean":
        w = mb.to(x.dtype)
        z = (xb * w.unsqueeze(-1)).sum(2) / w.sum(-1, keepdim=True).clamp_min(1.0)
    else:
        if attn is None:
            raise ValueError("attentive pooling needs the attention vector w")
        logits = (xb @ attn).masked_fill(~mb, float("-inf"))
        a = torch.softmax(logits.masked_fill(~any_real.unsqueeze(-1), 0.0), dim=-1) * mb
        z = (a.unsqueeze(-1) * xb).sum(2)
    return z, any_real


def compress(
    x: torch.Tensor,
    mask: torch.Tensor,
    recent_len: int,
    mid_len: int,
    strides=(1, 16, 64),
    *,
    pool: str = "mean",
    attn: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``Z`` and its token mask for a window ``x`` (B, L, d) with ``mask`` (B, L) True at real positions."""
    if x.dim() != 3 or mask.shape != x.shape[:2]:
        raise ValueError(f"x must be (B, L, d) and mask (B, L); got {tuple(x.shape)} and {tuple(mask.shape)}")
    s_r, s_m, s_f = _check_strides(strides)
    f, m, r = segment_lengths(x.shape[1], recent_len, mid_len)
    parts = [
        (x[:, :f], mask[:, :f], s_f),
        (x[:, f : f + m], mask[:, f : f + m], s_m),
        (x[:, f + m :], mask[:, f + m :], s_r),
    ]
    zs, ms = zip(*(pool_blocks(xx, mm, s, pool=pool, attn=attn) if s > 1 else (xx, mm) for xx, mm, s in parts))
    return torch.cat(zs, dim=1), torch.cat(ms, dim=1)
