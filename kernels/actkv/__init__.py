"""ActKV page-aware primitives (spec `papers/actkv.md`, Algorithms 3 and 4) as Triton kernels.

Every op has a Triton kernel, a host launcher and a ``*_reference`` torch function with the same signature.
Layout of one layer: ``k_cache``/``v_cache`` ``[num_blocks, block_size, kv_heads, head_dim]`` (block size 16 by
default, any power of two), ``block_table`` ``[requests, max_blocks]`` (-1 = unused), ``seq_lens`` ``[requests]``.

- :class:`PagedKVCache` — per-layer pools, block tables and free lists; ``append``, ``decode``, ``recover``,
  ``compact``; ``PagedKVCache.from_dense(k, v)`` from dense ``[layers, kv_heads, T, head_dim]`` tensors.
- :func:`paged_decode_attention` ``(q, k_cache, v_cache, block_table, seq_lens, scale) -> (out, lse)``.
- :func:`recover_action_attention` ``(q, lse, k_cache, block_table, ctx_lens, scale, acc, count) -> (acc, count)``:
  Alg. 3, running mean over action tokens of the max over each GQA group, per KV head; :func:`head_reduce`
  (``mean_of_max`` default) gives Alg. 1's per-entry ``a``.
- :func:`keep_mask_from_scores` — protected prefix ∪ top-B keep mask from Alg. 1's keep scores.
- :func:`compact_inplace` (Alg. 4) / :func:`compact_gather` (workspace baseline)
  ``(k_cache, v_cache, block_table, seq_lens, keep) -> (freed_blocks, perm)``; permute per-token metadata with
  ``perm`` (``meta[r, :B] = meta[r, perm[r, :B]]``).

From a dense cache (one request): ``c = PagedKVCache.from_dense(k, v)``; per layer ``l`` with keep scores ``ks``
``[T]``: ``keep = keep_mask_from_scores(ks[None], c.seq_lens[l], B, prefix_len)``; ``perm = c.compact(l, keep)``;
``c.to_dense(l, 0)`` then holds the entries ``perm[0]`` of the dense cache (for ``compact(..., "gather")`` in
ascending order, i.e. the dense path's ``k[:, keep]``).

Set ``TRITON_INTERPRET=1`` before importing to run the kernels on a CPU (tests/conftest.py does).
"""

from agentpost.actkv.lrfu import HEAD_REDUCE, head_reduce  # the one home of the KV-head combination

from .compaction import (
    CompactionPlan,
    compact_gather,
    compact_gather_reference,
    compact_inplace,
    compact_inplace_reference,
    compaction_plan,
)
from .copy_rows import copy_rows, copy_rows_reference
from .decode_attention import paged_decode_attention, paged_decode_attention_reference
from .paged_cache import PagedKVCache, append_kv, append_kv_reference, keep_mask_from_scores
from .recovery import recover_action_attention, recover_action_attention_reference

__all__ = [
    "CompactionPlan",
    "HEAD_REDUCE",
    "PagedKVCache",
    "append_kv",
    "append_kv_reference",
    "compact_gather",
    "compact_gather_reference",
    "compact_inplace",
    "compact_inplace_reference",
    "compaction_plan",
    "copy_rows",
    "copy_rows_reference",
    "head_reduce",
    "keep_mask_from_scores",
    "paged_decode_attention",
    "paged_decode_attention_reference",
    "recover_action_attention",
    "recover_action_attention_reference",
]
