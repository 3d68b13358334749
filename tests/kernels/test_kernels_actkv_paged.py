"""Paged KV cache, append and decode attention with LSE vs their torch references (TRITON_INTERPRET on CPU)."""

import math

import pytest
import torch

from agentpost.kernels.actkv import (
    PagedKVCache,
    append_kv,
    append_kv_reference,
    paged_decode_attention,
    paged_decode_attention_reference,
)
from tests.kernels._actkv_helpers import DEVICE, TOL, TOL_PROB, dense_entries, randn, random_paged


@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("lens,head_dim,block_size", [([1, 17, 40], 24, 16), ([5, 33], 16, 8), ([16], 40, 4)])
def test_decode_matches_reference(group, lens, head_dim, block_size):
    kv_heads = 2
    k, v, table, seq = random_paged(lens, kv_heads, head_dim, block_size, seed=len(lens) + group)
    q = randn(torch.Generator().manual_seed(1), len(lens), kv_heads * group, head_dim)
    out, lse = paged_decode_attention(q, k, v, table, seq)
    ref_out, ref_lse = paged_decode_attention_reference(q, k, v, table, seq)
    torch.testing.assert_close(out, ref_out, **TOL)
    torch.testing.assert_close(lse, ref_lse, **TOL)


@pytest.mark.claim("actkv", "C4")
def test_decode_lse_normalises_attention_exactly():
    """Spec mechanism test 4: sum_i exp(scale q.k_i - LSE) = 1 and the terms are the softmax row (TOL_PROB: absolute 1e-6)."""
    k, v, table, seq = random_paged([29], kv_heads=1, head_dim=8, block_size=8, seed=3)
    q = randn(torch.Generator().manual_seed(4), 1, 2, 8)
    scale = 0.3
    _, lse = paged_decode_attention(q, k, v, table, seq, scale=scale)
    keys = dense_entries(k, table, seq, 0)[:, 0]  # [29, 8]
    s = scale * q[0] @ keys.T
    a = torch.exp(s - lse[0][:, None])
    torch.testing.assert_close(a.sum(1), torch.ones(2), **TOL_PROB)
    torch.testing.assert_close(a, torch.softmax(s, dim=1), **TOL_PROB)


def test_append_matches_reference_and_dense_roundtrip():
    k_pool = torch.zeros(6, 4, 2, 3)
    v_pool = torch.zeros(6, 4, 2, 3)
    k_new, v_new = torch.randn(5, 2, 3), torch.randn(5, 2, 3)
    slots = torch.tensor([0, 7, 8, 23, 13])
    ref_k, ref_v = k_pool.clone(), v_pool.clone()
    append_kv(k_new, v_new, k_pool, v_pool, slots)
    append_kv_reference(k_new, v_new, ref_k, ref_v, slots)
    assert torch.equal(k_pool, ref_k) and torch.equal(v_pool, ref_v)
    assert torch.equal(k_pool[5, 3], k_new[3])  # slot 23 = block 5, offset 3


def test_cache_append_decode_follow_dense_attention():
    """Build from dense [layers, kv_heads, T, d], append a token, decode: equals dense attention over T+1 entries."""
    g = torch.Generator().manual_seed(5)
    L, H, T, D, G = 2, 2, 21, 16, 4
    k, v = randn(g, L, H, T, D), randn(g, L, H, T, D)
    cache = PagedKVCache.from_dense(k, v, block_size=8, extra_tokens=3)
    assert cache.seq_lens.tolist() == [[T], [T]]
    for layer in range(L):
        kd, vd = cache.to_dense(layer, 0)
        assert torch.equal(kd, k[layer]) and torch.equal(vd, v[layer])
    k1, v1 = randn(g, 1, 1, H, D), randn(g, 1, 1, H, D)
    cache.append(1, k1, v1)
    assert cache.seq_lens[1].tolist() == [T + 1] and cache.seq_lens[0].tolist() == [T]
    q = randn(g, 1, H * G, D)
    out, lse = cache.decode(1, q)
    kf = torch.cat([k[1], k1[0].transpose(0, 1)], dim=1).repeat_interleave(G, 0)  # [Hq, T+1, D]
    vf = torch.cat([v[1], v1[0].transpose(0, 1)], dim=1).repeat_interleave(G, 0)
    s = torch.einsum("hd,htd->ht", q[0], kf) / math.sqrt(D)
    torch.testing.assert_close(out[0], torch.einsum("ht,htd->hd", torch.softmax(s, 1), vf), **TOL)
    torch.testing.assert_close(lse[0], torch.logsumexp(s, 1), **TOL)


def test_cache_allocator_limits_leave_state_unchanged():
    cache = PagedKVCache(1, 2, 1, 4, num_blocks=3, max_blocks_per_request=3, block_size=4, device=DEVICE)
    with pytest.raises(RuntimeError, match="out of blocks"):  # 2 requests x 2 blocks > 3
        cache.append(0, torch.randn(2, 5, 1, 4), torch.randn(2, 5, 1, 4))
    with pytest.raises(ValueError, match="max_blocks_per_request"):
        cache.append(0, torch.randn(1, 13, 1, 4), torch.randn(1, 13, 1, 4), requests=[1])
    assert len(cache.free_blocks[0]) == 3 and int((cache.block_tables >= 0).sum()) == 0
    cache.append(0, torch.randn(1, 5, 1, 4), torch.randn(1, 5, 1, 4), requests=[1])
    assert cache.block_tables[0, 1].tolist() == [0, 1, -1] and cache.seq_lens[0].tolist() == [0, 5]


def test_bad_inputs_raise_clear_errors():
    k, v, table, seq = random_paged([5], 2, 8, 4)
    with pytest.raises(ValueError, match="multiple of kv_heads"):
        paged_decode_attention(torch.randn(1, 3, 8), k, v, table, seq)
    with pytest.raises(ValueError, match="power of two"):
        paged_decode_attention(torch.randn(1, 2, 8), k[:, :3].contiguous(), v[:, :3].contiguous(), table, seq)
    with pytest.raises(ValueError, match="seq_lens >= 1"):
        paged_decode_attention(torch.randn(1, 2, 8), k, v, table, torch.tensor([0], dtype=torch.int32))
