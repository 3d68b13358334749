"""Builders shared by the ActKV kernel tests: random paged caches with scattered physical blocks."""
from __future__ import annotations

import math

import torch


def random_paged(lens, kv_heads, head_dim, block_size=16, spare_blocks=2, seed=0, dtype=torch.float32):
    """A one-layer paged cache holding ``lens[r]`` random entries per request, blocks shuffled across the pool."""
    g = torch.Generator().manual_seed(seed)
    max_blocks = max(1, max(math.ceil(n / block_size) for n in lens)) + 1
    num_blocks = sum(max(1, math.ceil(n / block_size)) for n in lens) + spare_blocks
    k = torch.randn(num_blocks, block_size, kv_heads, head_dim, generator=g).to(dtype)
    v = torch.randn(num_blocks, block_size, kv_heads, head_dim, generator=g).to(dtype)
    order = torch.randperm(num_blocks, generator=g).tolist()
    table = torch.full((len(lens), max_blocks), -1, dtype=torch.int32)
    for r, n in enumerate(lens):
        for j in range(math.ceil(n / block_size)):
            table[r, j] = order.pop()
    return k, v, table, torch.tensor(lens, dtype=torch.int32)


def dense_entries(k_cache, table, lens, r):
    """Entries of request ``r`` in logical order, [n, kv_heads, head_dim]."""
    bs = k_cache.shape[1]
    idx = torch.arange(int(lens[r]))
    return k_cache[table[r, idx // bs].long(), idx % bs]


def clone_all(*ts):
    return tuple(t.clone() for t in ts)
