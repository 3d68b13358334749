"""Attention recovery from the LSE (Algorithm 3) vs the torch reference and vs dense softmax attention."""

import pytest
import torch

from agentpost.kernels.actkv import (
    PagedKVCache,
    head_reduce,
    keep_mask_from_scores,
    paged_decode_attention,
    recover_action_attention,
    recover_action_attention_reference,
)
from tests.kernels._actkv_helpers import TOL_PROB, dense_entries, randn, random_paged


def _queries(table, seq, kv_heads, group, head_dim, T, k, v, seed, ctx=None):
    """Action queries with the LSE the decode kernel returned when each was decoded (ctx entries visible)."""
    g = torch.Generator().manual_seed(seed)
    R = table.shape[0]
    q = randn(g, R, T, kv_heads * group, head_dim)
    if ctx is None:
        ctx = seq[:, None].repeat(1, T)
    lse = torch.zeros(R, T, kv_heads * group)
    for t in range(T):
        vis = ctx[:, t].clamp(min=1).to(torch.int32)
        lse[:, t] = paged_decode_attention(q[:, t], k, v, table, vis)[1]
    return q, lse, ctx


@pytest.mark.claim("actkv", "C4")
@pytest.mark.parametrize("group", [1, 4, 8])
@pytest.mark.parametrize("lens,head_dim,block_size", [([3, 19, 40], 24, 16), ([9], 16, 4)])
def test_recovery_matches_reference(group, lens, head_dim, block_size):
    k, v, table, seq = random_paged(lens, 2, head_dim, block_size, seed=group)
    T = 3
    ctx = torch.stack([(seq - 2).clamp(min=1), seq, torch.zeros_like(seq)], 1)  # a padding query last
    q, lse, ctx = _queries(table, seq, 2, group, head_dim, T, k, v, seed=7, ctx=ctx)
    acc, cnt = recover_action_attention(q, lse, k, table, ctx)
    ref, ref_cnt = recover_action_attention_reference(q, lse, k, table, ctx)
    torch.testing.assert_close(acc, ref, **TOL_PROB)
    assert cnt.tolist() == ref_cnt.tolist() == [2.0] * len(lens)


@pytest.mark.claim("actkv", "C4")
def test_recovery_equals_dense_softmax_max_over_group_mean_over_tokens():
    """Alg. 3 output = mean_t max_{h in g} softmax(scale q_t K^T)_i computed densely (entries beyond ctx: 0)."""
    k, v, table, seq = random_paged([37], 2, 8, 8, seed=11)
    G, T = 4, 3
    ctx = torch.tensor([[30, 36, 37]])
    q, lse, _ = _queries(table, seq, 2, G, 8, T, k, v, seed=12, ctx=ctx)
    acc, _ = recover_action_attention(q, lse, k, table, ctx)
    keys = dense_entries(k, table, seq, 0)  # [37, 2, 8]
    want = torch.zeros(2, 37)
    for t in range(T):
        c = int(ctx[0, t])
        for g in range(2):
            s = q[0, t, g * G : (g + 1) * G] @ keys[:c, g].T / 8**0.5
            want[g, :c] += torch.softmax(s, 1).amax(0) / T
    torch.testing.assert_close(acc[0, :, :37], want, **TOL_PROB)
    assert torch.all(acc[0, :, 37:] == 0)
    # group size 1 and one token: each KV head's row is a softmax row, summing to 1
    acc1, _ = recover_action_attention(q[:, :1, ::G].contiguous(), lse[:, :1, ::G].contiguous(), k, table, ctx[:, :1])
    torch.testing.assert_close(acc1[0].sum(-1), torch.ones(2), **TOL_PROB)


@pytest.mark.claim("actkv", "C4")
def test_running_mean_over_calls_equals_one_call():
    k, v, table, seq = random_paged([5, 21], 2, 16, 8, seed=2)
    q, lse, ctx = _queries(table, seq, 2, 4, 16, 4, k, v, seed=3)
    whole, n_whole = recover_action_attention(q, lse, k, table, ctx)
    acc, cnt = recover_action_attention(q[:, :1], lse[:, :1], k, table, ctx[:, :1])
    acc, cnt = recover_action_attention(q[:, 1:], lse[:, 1:], k, table, ctx[:, 1:], acc=acc, count=cnt)
    torch.testing.assert_close(acc, whole, **TOL_PROB)
    assert cnt.tolist() == n_whole.tolist() == [4.0, 4.0]


def test_head_reduce_modes_hand_example():
    acc = torch.tensor([[[0.2, 0.8], [0.6, 0.0]]])  # [R=1, kv_heads=2, N=2]
    assert torch.allclose(head_reduce(acc), torch.tensor([[0.4, 0.4]]))
    assert torch.allclose(head_reduce(acc, "max"), torch.tensor([[0.6, 0.8]]))
    assert torch.equal(head_reduce(acc, "per_head"), acc)
    with pytest.raises(ValueError, match="head_reduce mode"):
        head_reduce(acc, "sum")


def test_keep_mask_protects_prefix_and_prefers_recent_ties():
    scores = torch.tensor([[0.0, 1.0, 1.0, 0.0, 2.0, 9.0], [5.0, 0.0, 0.0, 0.0, 0.0, 0.0]])
    keep = keep_mask_from_scores(scores, torch.tensor([5, 4]), budget=2, prefix_len=1)
    # request 0: prefix {0} + top-2 of {1..4} = {4, 2} (tie 1 vs 2 -> recent); entry 5 is dead
    # request 1: prefix {0} + ties at 0 -> the two most recent live entries {2, 3}
    assert keep.tolist() == [[True, False, True, False, True, False], [True, False, True, True, False, False]]


def test_paged_path_gives_dense_path_keep_set():
    """From dense [layers, kv_heads, T, d]: paged recovery + selection = dense softmax scoring + the same top-B."""
    g = torch.Generator().manual_seed(21)
    L, H, T, D, G, n_act, budget, prefix = 2, 2, 45, 16, 4, 3, 12, 5
    k, v = randn(g, L, H, T, D), randn(g, L, H, T, D)
    q = randn(g, L, n_act, H * G, D)
    cache = PagedKVCache.from_dense(k, v, block_size=8)
    for layer in range(L):
        lse = torch.stack([cache.decode(layer, q[layer, t][None])[1][0] for t in range(n_act)])[None]
        acc, _ = cache.recover(layer, q[layer][None], lse, torch.full((1, n_act), T))
        paged = keep_mask_from_scores(head_reduce(acc)[:, :T], cache.seq_lens[layer], budget, prefix)
        s = torch.einsum("ahd,hkd->ahk", q[layer], k[layer].repeat_interleave(G, 0)) / D**0.5
        dense_a = torch.softmax(s, -1).view(n_act, H, G, T).amax(2).mean(1).mean(0)  # mean_t mean_g max_h
        dense = keep_mask_from_scores(dense_a[None], torch.tensor([T]), budget, prefix)
        assert torch.equal(paged, dense) and int(paged.sum()) == prefix + budget
