"""Builders shared by the ActKV kernel tests: random paged caches with scattered physical blocks."""

from __future__ import annotations

import math
import os

import torch

from agentpost.kernels.actkv import compact_gather, compact_gather_reference, compact_inplace, compact_inplace_reference
from tests.kernels._precision import tolerance

# AGENTPOST_TRITON_GPU=1 (benchmarks/gpu_all.sh, item kernel-tests) runs the same tests on the GPU; conftest.py then makes
# it the default device. Random draws come from a seeded CPU generator and are moved to DEVICE.
DEVICE = torch.device("cuda" if os.environ.get("AGENTPOST_TRITON_GPU") == "1" and torch.cuda.is_available() else "cpu")
# The ActKV kernels are element-wise fp32 (no tl.dot): the same tolerance on every device (tests/kernels/_precision.py);
# probabilities and attention weights (at most 1) are compared at a tenth of that absolute scale.
TOL = tolerance(DEVICE, uses_dot=False)
TOL_PROB = tolerance(DEVICE, uses_dot=False, scale=0.1)
OPS = {"inplace": (compact_inplace, compact_inplace_reference), "gather": (compact_gather, compact_gather_reference)}


def randn(g, *shape):
    return torch.randn(*shape, generator=g, device="cpu").to(DEVICE)


def randperm(g, n):
    return torch.randperm(n, generator=g, device="cpu").to(DEVICE)


def random_paged(lens, kv_heads, head_dim, block_size=16, spare_blocks=2, seed=0, dtype=torch.float32):
    """A one-layer paged cache holding ``lens[r]`` random entries per request, blocks shuffled across the pool."""
    g = torch.Generator().manual_seed(seed)
    max_blocks = max(1, max(math.ceil(n / block_size) for n in lens)) + 1
    num_blocks = sum(max(1, math.ceil(n / block_size)) for n in lens) + spare_blocks
    k = randn(g, num_blocks, block_size, kv_heads, head_dim).to(dtype)
    v = randn(g, num_blocks, block_size, kv_heads, head_dim).to(dtype)
    order = randperm(g, num_blocks).tolist()
    table = torch.full((len(lens), max_blocks), -1, dtype=torch.int32, device=DEVICE)
    for r, n in enumerate(lens):
        for j in range(math.ceil(n / block_size)):
            table[r, j] = order.pop()
    return k, v, table, torch.tensor(lens, dtype=torch.int32, device=DEVICE)


def dense_entries(k_cache, table, lens, r):
    """Entries of request ``r`` in logical order, [n, kv_heads, head_dim]."""
    bs = k_cache.shape[1]
    idx = torch.arange(int(lens[r]), device=k_cache.device)
    return k_cache[table[r, idx // bs].long(), idx % bs]


def clone_all(*ts):
    return tuple(t.clone() for t in ts)


def check_compaction(before_k, before_v, table0, lens0, k, v, table, lens, keep, freed, perm, bs, ordered):
    """Every invariant of a compaction: survivors, permutation, freed blocks, no leaked or duplicated block."""
    for r in range(len(lens0)):
        n, B = int(lens0[r]), int(keep[r].sum())
        kept = keep[r].nonzero().flatten()
        assert int(lens[r]) == B
        p = perm[r, :B]
        assert sorted(p.tolist()) == kept.tolist()  # exactly the keep set survives, each once
        if ordered:
            assert p.tolist() == kept.tolist()
        old_k = dense_entries(before_k, table0, lens0, r)
        old_v = dense_entries(before_v, table0, lens0, r)
        assert torch.equal(dense_entries(k, table, lens, r), old_k[p])  # metadata permuted by perm matches keys
        assert torch.equal(dense_entries(v, table, lens, r), old_v[p])
        n_freed = math.ceil(n / bs) - math.ceil(B / bs)
        got_freed = [b for b in freed[r].tolist() if b >= 0]
        assert len(got_freed) == n_freed
        used_before = [b for b in table0[r].tolist() if b >= 0]
        used_after = [b for b in table[r].tolist() if b >= 0]
        assert sorted(got_freed + used_after) == sorted(used_before)
        assert len(used_after) == len(used_before) - n_freed and set(got_freed).isdisjoint(used_after)
