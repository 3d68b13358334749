"""``kv_backend="paged"``: ActKV's round-boundary step on a paged mirror of the KV cache (actkv.md, Alg. 3 and 4).

The model keeps running on the transformers ``DynamicCache`` (its attention needs dense tensors). A
:class:`PagedMirror` copies every layer's *evictable* entries into a :class:`PagedKVCache` (block size 16 by
default; the protected prefix goes to a second paged cache that is never compacted) and records the post-RoPE
queries of the current action region with the number of evictable entries each one attended to (its causal
context). At a round boundary, per layer:

1. the log-sum-exp of every recorded query over *all* entries it attended to: the paged decode kernel on the
   evictable entries (one kernel "request" per query, all sharing the layer's block table, ``seq_lens`` = its
   context) and on the prefix, combined with ``logaddexp`` — so ``exp(s - lse)`` is the softmax the model used;
2. :func:`recover_action_attention` (Alg. 3) and ``head_reduce("mean_of_max")`` -> the region's mean action
   attention ``a`` (the engine then runs Algorithm 1 with the same code as the dense path);
3. :func:`compact_inplace` (Alg. 4) on the paged cache, and the survivors are written back into the DynamicCache.

Order. Alg. 4 leaves the survivors permuted (``perm``). The DynamicCache, the keep scores and the positions stay
in position order (the dense path's order, whose index is the recency that Algorithm 1's tie-break reads);
``order[l][i]`` is the dense index of paged logical entry ``i``, the one per-token array permuted with ``perm``.
"""

from __future__ import annotations

import math
import time

import torch

from agentpost.kernels.actkv import PagedKVCache, head_reduce, paged_decode_attention


class PagedMirror:
    """Paged copy of one sequence's KV cache (all layers) plus the action queries of the current region."""

    def __init__(self, n_layers: int, prefix_len: int, block_size: int = 16, initial_blocks: int = 4) -> None:
        if prefix_len < 1:
            raise ValueError(f"the paged path needs a protected prefix of >= 1 token, got {prefix_len}")
        self.n_layers, self.prefix_len, self.block_size = n_layers, prefix_len, block_size
        self.initial_blocks = initial_blocks
        self.prefix: PagedKVCache | None = None  # allocated on the first append (shape, dtype, device of the keys)
        self.cache: PagedKVCache | None = None
        self.order = [torch.zeros(0, dtype=torch.long) for _ in range(n_layers)]
        self._queries: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in range(n_layers)]
        self.scale = 1.0
        self.kernel_s = 0.0  # wall time in mirror ops (appends, decode LSE, recovery, compaction), device-synced

    # ------------------------------------------------------------------------------------------- bookkeeping
    def _new(self, like: torch.Tensor, blocks: int) -> PagedKVCache:
        return PagedKVCache(
            self.n_layers,
            1,
            like.shape[0],
            like.shape[-1],
            num_blocks=blocks,
            max_blocks_per_request=blocks,
            block_size=self.block_size,
            dtype=like.dtype,
            device=like.device,
        )

    def _grow(self, blocks: int) -> None:
        """Re-home every layer into a pool of ``blocks`` blocks, logical order unchanged."""
        old, self.cache = self.cache, self._new(self.cache.k[0, 0, 0], blocks)
        for layer in range(self.n_layers):
            k, v = old.to_dense(layer, 0)
            if k.shape[1]:
                self.cache.append(layer, k.transpose(0, 1)[None], v.transpose(0, 1)[None])

    def _timed(self, fn, *args):
        t0 = time.perf_counter()
        out = fn(*args)
        if self.cache is not None and self.cache.k.is_cuda:
            torch.cuda.synchronize(self.cache.k.device)
        self.kernel_s += time.perf_counter() - t0
        return out

    # ------------------------------------------------------------------------------------------- feeding
    def mirror(self, dense_cache) -> None:
        """Append the entries of ``dense_cache`` (a DynamicCache) that are not mirrored yet, layer by layer."""
        self._timed(self._mirror, dense_cache)

    def _mirror(self, dense_cache) -> None:
        p, bs = self.prefix_len, self.block_size
        for layer, dl in enumerate(dense_cache.layers):
            keys, values = dl.keys[0], dl.values[0]  # (H_kv, N, d)
            if self.prefix is None:
                self.prefix = self._new(keys[:, 0], math.ceil(p / bs))
                self.cache = self._new(keys[:, 0], self.initial_blocks)
            have_p = int(self.prefix.seq_lens[layer, 0])
            if have_p < min(p, keys.shape[1]):
                sl = slice(have_p, min(p, keys.shape[1]))
                self.prefix.append(layer, keys[:, sl].transpose(0, 1)[None], values[:, sl].transpose(0, 1)[None])
            have = int(self.cache.seq_lens[layer, 0])
            new = keys.shape[1] - p - have
            if new <= 0:
                continue
            need = math.ceil((have + new) / bs)
            if need > self.cache.block_tables.shape[2]:
                self._grow(max(need, 2 * self.cache.block_tables.shape[2]))
            sl = slice(p + have, keys.shape[1])
            self.cache.append(layer, keys[:, sl].transpose(0, 1)[None], values[:, sl].transpose(0, 1)[None])
            self.order[layer] = torch.cat([self.order[layer], torch.arange(have, have + new)])

    def observe(
        self,
        layer: int,
        queries: torch.Tensor,
        n_entries: int,
        action_rows: torch.Tensor,
        region_open: bool,
        scale: float,
    ) -> None:
        """Record the action rows of a chunk's queries ``(H_q, q, d)``; ``n_entries`` = cache length after the chunk.

        A new region drops the queries recorded so far (the dense accumulator's reset)."""
        self.scale = scale
        if region_open:
            self._queries[layer].clear()
        rows = action_rows.nonzero().flatten()
        if rows.numel():
            ctx = n_entries - queries.shape[1] + rows + 1 - self.prefix_len  # evictable entries each row saw
            self._queries[layer].append((queries[:, rows.to(queries.device)].transpose(0, 1), ctx))

    # ------------------------------------------------------------------------------------------- round boundary
    def action_attention(self, layer: int) -> torch.Tensor:
        """Alg. 3: the recorded region's mean action attention ``(1, N)`` (float64, dense order); consumes the
        recorded queries (the dense accumulator's reset after a compression)."""
        return self._timed(self._action_attention, layer)

    def _lse(self, cache: PagedKVCache, layer: int, q: torch.Tensor, ctx: torch.Tensor) -> torch.Tensor:
        k, v, table, _ = cache.layer(layer)
        tables = table.expand(q.shape[0], -1).contiguous()  # one decode "request" per query, same blocks
        return paged_decode_attention(q, k, v, tables, ctx.to(torch.int32), self.scale)[1]

    def _action_attention(self, layer: int) -> torch.Tensor:
        n = int(self.cache.seq_lens[layer, 0])
        a = torch.zeros(1, n, dtype=torch.float64)
        recorded, self._queries[layer] = self._queries[layer], []
        if not recorded:
            return a
        q = torch.cat([x for x, _ in recorded])  # (T, H_q, d)
        ctx = torch.cat([c for _, c in recorded]).to(q.device)  # (T,)
        lse = torch.logaddexp(
            self._lse(self.cache, layer, q, ctx),
            self._lse(self.prefix, layer, q, torch.full_like(ctx, self.prefix_len)),
        )
        acc, _ = self.cache.recover(layer, q[None], lse[None], ctx[None].to(torch.int32), self.scale)
        a[0, self.order[layer]] = head_reduce(acc[0], "mean_of_max")[:n].double().cpu()
        return a

    def compact(self, dense_cache, keep: list[torch.Tensor]) -> None:
        """Alg. 4 on every layer to ``keep[l]`` (``(1, B)`` ascending dense indices of evictable entries), then
        write the survivors back into ``dense_cache``'s layers in dense order."""
        self._timed(self._compact, dense_cache, keep)

    def _compact(self, dense_cache, keep: list[torch.Tensor]) -> None:
        for layer, (dl, idx) in enumerate(zip(dense_cache.layers, keep)):
            idx = idx[0].cpu()
            n = int(self.cache.seq_lens[layer, 0])
            mask = torch.zeros(n, dtype=torch.bool)
            mask[idx] = True
            perm = self.cache.compact(layer, mask[self.order[layer]][None].to(self.cache.k.device))[0].cpu()
            self.order[layer] = torch.searchsorted(idx, self.order[layer][perm])  # new dense index of each survivor
            k, v = self.cache.to_dense(layer, 0)  # (H_kv, B, d), paged order
            dense_k, dense_v = torch.empty_like(k), torch.empty_like(v)
            dense_k[:, self.order[layer].to(k.device)] = k
            dense_v[:, self.order[layer].to(k.device)] = v
            dl.keys = torch.cat([dl.keys[:, :, : self.prefix_len], dense_k[None]], dim=2)
            dl.values = torch.cat([dl.values[:, :, : self.prefix_len], dense_v[None]], dim=2)
