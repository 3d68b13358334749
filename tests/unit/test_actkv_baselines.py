"""Baseline scores on hand-built attention matrices (kv-baselines.md mechanism tests 1-6) and the registry."""

import math

import pytest
import torch

from agentpost.actkv.lrfu import select_top_b
from agentpost.actkv.policies import (
    POLICIES,
    RKV,
    ActKV,
    H2O,
    SnapKV,
    StreamingLLM,
    make_policy,
    rkv_redundancy,
    rkv_scores,
    snapkv_scores,
    streaming_scores,
)


def test_snapkv_worked_example():
    rows = torch.tensor([[[0.1, 0.4, 0.1, 0.1, 0.3, 0.0], [0.2, 0.1, 0.1, 0.3, 0.1, 0.2]]], dtype=torch.float64)
    s = snapkv_scores(rows, window=2, kernel=3, pool="avg")
    assert s[0, :4].tolist() == pytest.approx([0.4 / 3, 0.5 / 3, 0.55 / 3, 0.3 / 3])
    assert select_top_b(s, 4).tolist() == [[1, 2, 4, 5]]
    # sum instead of mean doubles the scores and keeps the same set
    s2 = snapkv_scores(rows * 2, window=2, kernel=3)
    assert select_top_b(s2, 4).tolist() == [[1, 2, 4, 5]]
    with pytest.raises(ValueError, match="pool"):
        snapkv_scores(rows, 2, pool="median")


def test_streamingllm_worked_example():
    # T = 10, ratio 0.4 -> n_pruned = 10 - floor(10 * 0.6) = 4 -> keep 6: the 4 sinks and the last 2
    assert select_top_b(streaming_scores(10, 4), 6).tolist() == [[0, 1, 2, 3, 8, 9]]
    # kvpress keep count n = max(1, floor(T (1 - ratio))): ratio 0.25 -> 7 entries -> sinks + last 3
    assert select_top_b(streaming_scores(10, 4), 7).tolist() == [[0, 1, 2, 3, 7, 8, 9]]


def test_streamingllm_sinks_are_the_first_tokens_of_the_sequence():
    # a 4-token protected prefix already holds the 4 sinks: 15 evictable entries at B = 6 keep the last 6;
    # the "evictable" reading makes the first 4 evictable entries sinks too, shrinking the recent window to 2
    keys = torch.zeros(1, 4 + 15, 2)
    published, evictable = StreamingLLM(), StreamingLLM(sinks="evictable")
    for pol in (published, evictable):
        pol.reset(n_layers=1, n_kv_heads=1, prefix_len=4)
    assert published.select(published.score(0, keys), 6).tolist() == [[9, 10, 11, 12, 13, 14]]
    assert evictable.select(evictable.score(0, keys), 6).tolist() == [[0, 1, 2, 3, 13, 14]]
    # a budget below the sinks keeps the first sinks (the selector's rule: sinks first, then the newest)
    assert evictable.select(evictable.score(0, keys), 3).tolist() == [[0, 1, 2]]
    short = StreamingLLM()
    short.reset(n_layers=1, n_kv_heads=1, prefix_len=1)  # a 1-token prefix holds 1 sink; 3 remain evictable
    assert short.select(short.score(0, torch.zeros(1, 1 + 15, 2)), 6).tolist() == [[0, 1, 2, 12, 13, 14]]
    with pytest.raises(ValueError, match="sinks"):
        StreamingLLM(sinks="prefix")


def test_snapkv_pooling_over_the_sequence_or_the_evictable_part():
    rows = torch.tensor([[[0.1, 0.4, 0.1, 0.1, 0.3, 0.0], [0.2, 0.1, 0.1, 0.3, 0.1, 0.2]]], dtype=torch.float64)
    # prefix = keys 0, 1. Published: pool over the sequence (s = [0.1333, 0.1667, 0.1833, 0.1000]), keep 2..5
    s = snapkv_scores(rows, window=2, kernel=3, protected=2)
    assert s[0, :2].tolist() == pytest.approx([0.55 / 3, 0.3 / 3]) and s.shape == (1, 4)
    # evictable only: v = [0.10, 0.20], zero padding at the prefix boundary -> [(0 + .1 + .2)/3, (.1 + .2 + 0)/3]
    e = snapkv_scores(rows, window=2, kernel=3, protected=2, pool_over="evictable")
    assert e[0, :2].tolist() == pytest.approx([0.1, 0.1])
    assert s[0, 2:].tolist() == e[0, 2:].tolist() == [math.inf, math.inf]


def test_snapkv_query_head_selection_on_a_hand_built_matrix():
    # two query heads of one KV group, window w = 1 over N = 4 one-hot keys: logits = log of each head's row
    rows = torch.tensor([[0.1, 0.5, 0.2, 0.2], [0.4, 0.1, 0.3, 0.2]], dtype=torch.float64)
    q = torch.log(rows).unsqueeze(1)  # (H_q = 2, w = 1, d = 4)
    keys = torch.eye(4, dtype=torch.float64).unsqueeze(0)  # one KV head
    per_query = SnapKV(window=1, kernel=1, head_mode="query_head")
    assert per_query.expand_kv_heads
    per_query.reset(n_layers=1, n_kv_heads=2, prefix_len=0)  # the engine expands the cache: one head per query head
    per_query.observe(0, torch.zeros(2, 1, 4), q, torch.tensor([False]), False, 1.0)
    s = per_query.score(0, keys.expand(2, -1, -1))
    assert s[0, :3].tolist() == pytest.approx([0.1, 0.5, 0.2]) and s[1, :3].tolist() == pytest.approx([0.4, 0.1, 0.3])
    assert select_top_b(s, 2).tolist() == [[1, 3], [0, 3]]  # each query head keeps its own entry
    group = SnapKV(window=1, kernel=1)  # kv_group_mean: [0.25, 0.30, 0.25] shared by the group
    group.reset(n_layers=1, n_kv_heads=1, prefix_len=0)
    group.observe(0, torch.zeros(2, 1, 4), q, torch.tensor([False]), False, 1.0)
    g = group.score(0, keys)
    assert g[0, :3].tolist() == pytest.approx([0.25, 0.30, 0.25]) and select_top_b(g, 2).tolist() == [[1, 3]]


def test_h2o_accumulation_worked_example():
    pol = H2O(recent_fraction=0.5, group="mean")
    pol.reset(n_layers=1, n_kv_heads=1, prefix_len=0)
    for row in ([0.5, 0.5], [0.2, 0.3, 0.5], [0.1, 0.6, 0.1, 0.2]):
        attn = torch.tensor(row, dtype=torch.float64).view(1, 1, -1)
        pol.observe(0, attn, torch.zeros(1, 1, 2), torch.tensor([False]), False, 1.0)
    assert pol._hh[0][0].tolist() == pytest.approx([0.8, 1.4, 0.6, 0.2])
    assert pol.protect(4, 2) == (0, 1)  # B = 2: hh_size = 1, recent_size = 1
    s = pol.score(0, torch.zeros(1, 4, 2))
    assert s[0].tolist() == pytest.approx([0.8, 1.4, 0.6, 0.2])  # the recent window is the selector's, not a score
    assert pol.select(s, 2).tolist() == [[1, 3]]


def test_h2o_normalised_accumulator_on_hand_built_attention():
    # the spec's three decoding steps: hh = [0.8, 1.4, 0.6, 0.2], seen by [3, 3, 2, 1] queries
    raw, norm = H2O(recent_fraction=1 / 3), H2O(recent_fraction=1 / 3, normalise=True)
    for pol in (raw, norm):
        pol.reset(n_layers=1, n_kv_heads=1, prefix_len=0)
        for row in ([0.5, 0.5], [0.2, 0.3, 0.5], [0.1, 0.6, 0.1, 0.2]):
            pol.observe(
                0,
                torch.tensor(row, dtype=torch.float64).view(1, 1, -1),
                torch.zeros(1, 1, 2),
                torch.tensor([False]),
                False,
                1.0,
            )
    s = norm.score(0, torch.zeros(1, 4, 2))
    assert s[0, :3].tolist() == pytest.approx([0.8 / 3, 1.4 / 3, 0.6 / 2])
    assert raw.protect(4, 3) == norm.protect(4, 3) == (0, 1)  # B = 3: recent 1, two heavy hitters
    assert raw.select(raw.score(0, torch.zeros(1, 4, 2)), 3).tolist() == [[0, 1, 3]]
    assert norm.select(s, 3).tolist() == [[1, 2, 3]]
    # one prefill chunk: kvpress ObservedAttentionPress s_i = sum_{t >= i} A_ti / (T - i), T = 3
    attn = torch.tensor([[[1.0, 0, 0], [0.5, 0.5, 0], [0.2, 0.3, 0.5]]], dtype=torch.float64)
    pre = H2O(recent_fraction=0.0, normalise=True)
    pre.reset(n_layers=1, n_kv_heads=1, prefix_len=0)
    pre.observe(0, attn, torch.zeros(1, 3, 2), torch.tensor([False] * 3), False, 1.0)
    assert pre.score(0, torch.zeros(1, 3, 2))[0].tolist() == pytest.approx([1.7 / 3, 0.8 / 2, 0.5 / 1])


def test_rkv_redundancy_older_duplicate_evicted_first():
    e = torch.eye(4, dtype=torch.float64)
    # entries 1, 3, 4 share one key; 0 and 2 are orthogonal to everything
    keys = torch.stack([e[0], e[1], e[2], e[1], e[1]]).unsqueeze(0)
    red = rkv_redundancy(keys)[0]
    # column sums after zeroing each row's most recent similar entry: [0, 2, 0, 1, 0] / 5, then softmax
    expect = torch.softmax(torch.tensor([0, 2, 0, 1, 0], dtype=torch.float64) / 5, dim=0)
    assert red.tolist() == pytest.approx(expect.tolist())
    assert red[1] > red[3] > red[4]  # the oldest duplicate is the most redundant
    # with exactly two identical keys the official masking zeroes both directions: a tie
    red2 = rkv_redundancy(torch.stack([e[0], e[1], e[1], e[2]]).unsqueeze(0))[0]
    assert red2[1] == pytest.approx(red2[2])


def test_rkv_score_mixes_attention_and_redundancy():
    e = torch.eye(4, dtype=torch.float64)
    keys = torch.stack([e[0], e[1], e[2], e[1], e[1]]).unsqueeze(0)  # N = 5, the last entry is the window
    logits = torch.log(torch.tensor([[[0.1, 0.2, 0.3, 0.4, 1.0]]], dtype=torch.float64))
    s = rkv_scores(logits, keys, window=1, kernel=1, mix_lambda=0.07)
    attn = [0.1, 0.2, 0.3, 0.4]  # softmax of the log-probs over the non-window part
    # redundancy by hand: column means [0, 2, 0, 1, 0] / 5, softmax -> exp([0, .4, 0, .2, 0]) / Z
    z = 3 + math.exp(0.4) + math.exp(0.2)
    red = [1 / z, math.exp(0.4) / z, 1 / z, math.exp(0.2) / z]
    assert s[0, :4].tolist() == pytest.approx(
        [0.07 * a - 0.93 * r for a, r in zip(attn, red)], abs=1e-8
    )  # 1e-8 norm eps
    assert s[0, 4] == math.inf


def test_rkv_scored_over_the_whole_cache_or_the_evictable_part():
    # prefix = entry 0 (key e0); evictable entries 1..3 with keys e0, e1, e2; window = the last entry
    keys = torch.eye(3, dtype=torch.float64)[[0, 0, 1, 2]].unsqueeze(0)
    q = torch.tensor([[[0.0, math.log(2.0), 0.0]]], dtype=torch.float64)  # logits over the keys: [0, 0, ln 2, 0]
    pols = {over: RKV(window=1, kernel=1, score_over=over) for over in ("cache", "evictable")}
    for pol in pols.values():
        pol.reset(n_layers=1, n_kv_heads=1, prefix_len=1)
        pol.observe(0, torch.zeros(1, 1, 4), q, torch.tensor([False]), False, 1.0)
    # whole cache: attention softmax([0, 0, ln 2]) = [1, 1, 2] / 4; keys 0 and 1 are duplicates, each row's most
    # recent similar entry is zeroed, so the similarity matrix is all zero and the redundancy is uniform 1/4
    cache = pols["cache"].score(0, keys)
    assert cache[0, :2].tolist() == pytest.approx([0.07 * 0.25 - 0.93 / 4, 0.07 * 0.5 - 0.93 / 4])
    # evictable only: attention softmax([0, ln 2]) = [1/3, 2/3]; three distinct keys: redundancy 1/3 each
    ev = pols["evictable"].score(0, keys)
    assert ev[0, :2].tolist() == pytest.approx([0.07 / 3 - 0.93 / 3, 0.07 * 2 / 3 - 0.93 / 3])
    assert cache.shape == ev.shape == (1, 3) and cache[0, 2] == ev[0, 2] == math.inf


@pytest.mark.parametrize(
    "scores",
    [
        lambda: snapkv_scores(torch.rand(2, 3, 12, dtype=torch.float64), 3),
        lambda: rkv_scores(torch.randn(2, 3, 12, dtype=torch.float64), torch.randn(2, 12, 4, dtype=torch.float64), 3),
    ],
)
def test_window_always_kept(scores):
    torch.manual_seed(0)
    keep = select_top_b(scores(), 5)
    assert all({9, 10, 11} <= set(row) for row in keep.tolist())


def test_sinks_always_kept():
    keep = select_top_b(streaming_scores(20, 4), 6)
    assert keep.tolist() == [[0, 1, 2, 3, 18, 19]]


@pytest.mark.claim("actkv", "C1")
def test_actkv_policy_only_action_rows_score():
    pol = ActKV()
    pol.reset(n_layers=1, n_kv_heads=1, prefix_len=1)
    attn = torch.tensor([[[0.1, 0.9, 0.0, 0.0], [0.1, 0.0, 0.0, 0.9]]], dtype=torch.float64)  # 2 rows, 4 entries
    pol.observe(0, attn, torch.zeros(1, 2, 2), torch.tensor([False, False]), False, 1.0)  # reasoning tokens
    assert pol.score(0, torch.zeros(1, 4, 2)).tolist() == [[0, 0, 0]]
    pol.observe(0, attn, torch.zeros(1, 2, 2), torch.tensor([True, False]), True, 1.0)  # first row is an action
    assert pol.score(0, torch.zeros(1, 4, 2))[0].tolist() == pytest.approx([0.9, 0, 0])
    # a new region resets the accumulator: only the second region's rows count
    pol.observe(0, attn, torch.zeros(1, 2, 2), torch.tensor([True, False]), True, 1.0)
    pol.observe(0, attn, torch.zeros(1, 2, 2), torch.tensor([False, True]), True, 1.0)
    assert pol.score(0, torch.zeros(1, 4, 2))[0].tolist() == pytest.approx([0.45, 0, 0.9])


def test_registry():
    assert set(POLICIES) == {"fullkv", "streamingllm", "h2o", "snapkv", "rkv", "knorm", "actkv"}
    assert make_policy("snapkv", window=8).window == 8
    with pytest.raises(ValueError, match="unknown KV retention scorer"):
        make_policy("quest")
    with pytest.raises(ValueError, match="not actkv"):
        make_policy("drift")
