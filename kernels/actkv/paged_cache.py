"""Paged KV cache: block pools, block tables, a free list per layer, and the append op.

One pool per layer (``k[l]``/``v[l]`` are ``[num_blocks, block_size, kv_heads, head_dim]``), one block table per
(layer, request) because ActKV chooses keep sets separately per layer (spec, Alg. 1), so layers hold different
entries after the first compaction. Appending writes each new token's K/V row into slot ``seq_len`` through the
block table, taking a block from the layer's free list when the last one is full.
"""

from __future__ import annotations

import math

import torch

from agentpost.kv_retention import select_top_b

from ._common import check_cache, slot_index
from .compaction import compact_gather, compact_inplace
from .copy_rows import copy_rows
from .decode_attention import paged_decode_attention
from .recovery import recover_action_attention


def _check_append(k_new, v_new, k_cache, v_cache, slot_mapping):
    check_cache(k_cache, v_cache)
    if k_new.dim() != 3 or k_new.shape[1:] != k_cache.shape[2:] or v_new.shape != k_new.shape:
        raise ValueError(
            f"k_new/v_new must be [tokens, kv_heads, head_dim] = [N, {k_cache.shape[2]}, {k_cache.shape[3]}], "
            f"got {tuple(k_new.shape)} / {tuple(v_new.shape)}"
        )
    if slot_mapping.shape != (k_new.shape[0],):
        raise ValueError(f"slot_mapping must be [{k_new.shape[0]}], got {tuple(slot_mapping.shape)}")
    n_slots = k_cache.shape[0] * k_cache.shape[1]
    if slot_mapping.numel() and (int(slot_mapping.min()) < 0 or int(slot_mapping.max()) >= n_slots):
        raise ValueError(f"slot_mapping must lie in [0, {n_slots})")


def append_kv(k_new, v_new, k_cache, v_cache, slot_mapping):
    """Write token rows ``k_new[i]``/``v_new[i]`` ([N, kv_heads, head_dim]) into flat slots ``slot_mapping[i]``."""
    _check_append(k_new, v_new, k_cache, v_cache, slot_mapping)
    row = k_cache.shape[2] * k_cache.shape[3]
    src = torch.arange(k_new.shape[0], device=k_new.device)
    copy_rows(
        k_new.to(k_cache.dtype).reshape(-1, row).contiguous(),
        k_cache.view(-1, row),
        v_new.to(v_cache.dtype).reshape(-1, row).contiguous(),
        v_cache.view(-1, row),
        src,
        slot_mapping,
    )


def append_kv_reference(k_new, v_new, k_cache, v_cache, slot_mapping):
    """Torch reference of :func:`append_kv`."""
    _check_append(k_new, v_new, k_cache, v_cache, slot_mapping)
    bs = k_cache.shape[1]
    s = slot_mapping.long()
    k_cache[s // bs, s % bs] = k_new.to(k_cache.dtype)
    v_cache[s // bs, s % bs] = v_new.to(v_cache.dtype)


class PagedKVCache:
    """Multi-layer paged KV cache for ``num_requests`` sequences (host-side allocator, device-side tensors).

    Attributes: ``k``, ``v`` [layers, num_blocks, block_size, kv_heads, head_dim]; ``block_tables``
    [layers, requests, max_blocks] int32 (-1 = unused); ``seq_lens`` [layers, requests] int32;
    ``free_blocks[l]`` the layer's free list.
    """

    def __init__(
        self,
        num_layers,
        num_requests,
        num_kv_heads,
        head_dim,
        *,
        num_blocks,
        max_blocks_per_request,
        block_size=16,
        dtype=torch.float32,
        device="cpu",
    ):
        if min(num_layers, num_requests, num_kv_heads, head_dim, num_blocks, max_blocks_per_request) < 1:
            raise ValueError("layers, requests, kv_heads, head_dim, num_blocks and max_blocks_per_request must be >= 1")
        if block_size < 1 or block_size & (block_size - 1):
            raise ValueError(f"block_size must be a power of two, got {block_size}")
        shape = (num_layers, num_blocks, block_size, num_kv_heads, head_dim)
        self.block_size = block_size
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.block_tables = torch.full(
            (num_layers, num_requests, max_blocks_per_request), -1, dtype=torch.int32, device=device
        )
        self.seq_lens = torch.zeros((num_layers, num_requests), dtype=torch.int32, device=device)
        self.free_blocks = [list(range(num_blocks - 1, -1, -1)) for _ in range(num_layers)]  # pop() -> lowest id

    @property
    def num_layers(self) -> int:
        return self.k.shape[0]

    def layer(self, layer: int):
        """``(k_cache, v_cache, block_table, seq_lens)`` views of one layer, the arguments of every op."""
        return self.k[layer], self.v[layer], self.block_tables[layer], self.seq_lens[layer]

    def _reserve(self, layer: int, requests: list[int], n_new: int) -> None:
        """Give each request enough blocks for ``n_new`` more entries; on failure nothing is allocated."""
        tables = self.block_tables[layer]
        plan = []
        for r in requests:
            need = math.ceil((int(self.seq_lens[layer, r]) + n_new) / self.block_size)
            if need > tables.shape[1]:
                raise ValueError(
                    f"request {r} needs {need} blocks on layer {layer}; max_blocks_per_request is {tables.shape[1]}"
                )
            have = int((tables[r] >= 0).sum())
            plan += [(r, j) for j in range(have, need)]
        if len(plan) > len(self.free_blocks[layer]):
            raise RuntimeError(
                f"layer {layer} is out of blocks ({len(self.free_blocks[layer])} free, {len(plan)} needed)"
            )
        for r, j in plan:
            tables[r, j] = self.free_blocks[layer].pop()

    def append(self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor, requests=None) -> None:
        """Append ``k_new``/``v_new`` [len(requests), n_tokens, kv_heads, head_dim] to ``requests`` (default: all)."""
        requests = list(range(self.block_tables.shape[1])) if requests is None else list(requests)
        if k_new.dim() != 4 or k_new.shape[0] != len(requests) or v_new.shape != k_new.shape:
            raise ValueError(
                f"k_new/v_new must be [{len(requests)}, n_tokens, kv_heads, head_dim], "
                f"got {tuple(k_new.shape)} / {tuple(v_new.shape)}"
            )
        n = k_new.shape[1]
        lens = self.seq_lens[layer]
        self._reserve(layer, requests, n)
        rows = torch.tensor(requests, device=self.k.device)
        pos = lens[rows].long()[:, None] + torch.arange(n, device=self.k.device)[None, :]
        slots = slot_index(self.block_tables[layer], rows[:, None].expand(-1, n), pos, self.block_size)
        append_kv(
            k_new.reshape(-1, *k_new.shape[2:]),
            v_new.reshape(-1, *v_new.shape[2:]),
            self.k[layer],
            self.v[layer],
            slots.reshape(-1),
        )
        lens[rows] += n

    def decode(self, layer: int, q: torch.Tensor, scale=None):
        """:func:`paged_decode_attention` on one layer -> ``(out, lse)``."""
        return paged_decode_attention(
            q, self.k[layer], self.v[layer], self.block_tables[layer], self.seq_lens[layer], scale
        )

    def recover(self, layer: int, q, lse, ctx_lens, scale=None, acc=None, count=None):
        """:func:`recover_action_attention` on one layer -> ``(acc, count)``."""
        return recover_action_attention(q, lse, self.k[layer], self.block_tables[layer], ctx_lens, scale, acc, count)

    def compact(self, layer: int, keep: torch.Tensor, method: str = "inplace") -> torch.Tensor:
        """Compact one layer to ``keep`` [requests, N] (``inplace`` = Alg. 4, or ``gather``); frees blocks; returns perm."""
        ops = {"inplace": compact_inplace, "gather": compact_gather}
        if method not in ops:
            raise ValueError(f"method must be one of {sorted(ops)}, got {method!r}")
        freed, perm = ops[method](self.k[layer], self.v[layer], self.block_tables[layer], self.seq_lens[layer], keep)
        self.free_blocks[layer].extend(int(b) for b in freed.flatten().tolist()[::-1] if b >= 0)
        return perm

    def to_dense(self, layer: int, request: int):
        """``(k, v)`` of one (layer, request) as dense [kv_heads, n, head_dim] tensors, in logical order."""
        n = int(self.seq_lens[layer, request])
        idx = torch.arange(n, device=self.k.device)
        rows = torch.full_like(idx, request)
        slots = slot_index(self.block_tables[layer], rows, idx, self.block_size)
        flat_k = self.k[layer].view(-1, *self.k.shape[3:])
        flat_v = self.v[layer].view(-1, *self.v.shape[3:])
        return flat_k[slots].transpose(0, 1), flat_v[slots].transpose(0, 1)

    @classmethod
    def from_dense(
        cls, k: torch.Tensor, v: torch.Tensor, *, block_size: int = 16, extra_tokens: int = 0, dtype=None
    ) -> "PagedKVCache":
        """Build a cache from dense K/V: [layers, kv_heads, T, head_dim] (one request) or [requests, layers, ...].

        ``extra_tokens`` reserves room per request for later appends. Entry ``i`` of the dense cache becomes
        logical entry ``i`` of every layer, so dense and paged keep sets index the same entries.
        """
        if k.dim() == 4:
            k, v = k[None], v[None]
        if k.dim() != 5 or v.shape != k.shape:
            raise ValueError(
                f"k/v must be [layers, kv_heads, T, head_dim] or [requests, layers, kv_heads, T, head_dim], "
                f"got {tuple(k.shape)} / {tuple(v.shape)}"
            )
        R, L, H, T, D = k.shape
        mb = max(1, math.ceil((T + extra_tokens) / block_size))
        cache = cls(
            L,
            R,
            H,
            D,
            num_blocks=R * mb,
            max_blocks_per_request=mb,
            block_size=block_size,
            dtype=dtype or k.dtype,
            device=k.device,
        )
        for layer in range(L):
            if T:
                cache.append(layer, k[:, layer].transpose(1, 2), v[:, layer].transpose(1, 2))
        return cache


def keep_mask_from_scores(scores: torch.Tensor, seq_lens: torch.Tensor, budget: int, prefix_len=0) -> torch.Tensor:
    """Keep mask for the compaction ops: protected prefix ∪ top-``budget`` of ``scores`` among the other live
    entries, by :func:`agentpost.kv_retention.select_top_b` (ties to the higher index, i.e. the more recent entry
    only while logical order is recency order; scores compared in float32).

    ``scores`` [R, N] (Alg. 1's keep scores KS, per layer), ``seq_lens`` [R], ``prefix_len`` int or [R]; returns a
    bool [R, N] mask. The engine's ``kv_backend="paged"`` selects on float64 keep scores held in position order
    (the dense path's rule) and builds its mask from those indices (:mod:`agentpost.actkv.paged`).
    """
    if scores.dim() != 2 or seq_lens.shape != (scores.shape[0],):
        raise ValueError(f"scores must be [R, N] and seq_lens [R], got {tuple(scores.shape)} / {tuple(seq_lens.shape)}")
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    R, N = scores.shape
    prefix = torch.as_tensor(prefix_len).expand(R).tolist()
    keep = torch.zeros(R, N, dtype=torch.bool, device=scores.device)
    for r, (lo, hi) in enumerate(zip(prefix, seq_lens.tolist())):
        keep[r, : min(lo, hi)] = True
        if hi > lo:
            keep[r, lo + select_top_b(scores[r, lo:hi].float(), budget)] = True
    return keep
