"""Baseline scores on hand-built attention matrices (kv-baselines.md mechanism tests 1-6) and the registry."""

import math

import pytest
import torch

from agentpost.actkv.lrfu import select_top_b
from agentpost.actkv.policies import (
    POLICIES, ActKV, H2O, make_policy, rkv_redundancy, rkv_scores, snapkv_scores, streaming_scores,
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


def test_kvpress_keep_count_rule():
    # n = max(1, floor(T (1 - ratio))) : the budget a kvpress ratio corresponds to
    assert max(1, math.floor(10 * (1 - 0.25))) == 7
    assert max(1, math.floor(10 * (1 - 0.99))) == 1


def test_streamingllm_worked_example():
    n_keep = 10 - (10 - math.floor(10 * 0.6))  # T=10, ratio 0.4 -> prune 4
    assert select_top_b(streaming_scores(10, 4), n_keep).tolist() == [[0, 1, 2, 3, 8, 9]]


def test_h2o_accumulation_worked_example():
    pol = H2O(recent_fraction=0.5, group="mean")
    pol.reset(n_layers=1, n_kv_heads=1, prefix_len=0)
    for row in ([0.5, 0.5], [0.2, 0.3, 0.5], [0.1, 0.6, 0.1, 0.2]):
        attn = torch.tensor(row, dtype=torch.float64).view(1, 1, -1)
        pol.observe(0, attn, torch.zeros(1, 1, 2), torch.tensor([False]), False, 1.0)
    assert pol._hh[0][0].tolist() == pytest.approx([0.8, 1.4, 0.6, 0.2])
    pol.budget = 2  # hh_size = 1, recent_size = 1
    s = pol.score(0, torch.zeros(1, 4, 2))
    assert select_top_b(s, 2).tolist() == [[1, 3]]


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
    keys = torch.eye(4, dtype=torch.float64)[[0, 1, 2, 3, 0]].unsqueeze(0)  # N = 5, last entry = window
    logits = torch.log(torch.tensor([[[0.1, 0.2, 0.3, 0.4, 1.0]]], dtype=torch.float64))
    s = rkv_scores(logits, keys, window=1, kernel=1, mix_lambda=0.07)
    attn = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)  # softmax of log-probs over the non-window part
    red = rkv_redundancy(keys)[0, :4]
    assert s[0, :4].tolist() == pytest.approx((0.07 * attn - 0.93 * red).tolist())
    assert s[0, 4] == math.inf


@pytest.mark.parametrize("scores", [
    lambda: snapkv_scores(torch.rand(2, 3, 12, dtype=torch.float64), 3),
    lambda: rkv_scores(torch.randn(2, 3, 12, dtype=torch.float64), torch.randn(2, 12, 4, dtype=torch.float64), 3),
])
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
    assert set(POLICIES) == {"fullkv", "streamingllm", "h2o", "snapkv", "rkv", "actkv"}
    assert make_policy("snapkv", window=8).window == 8
    with pytest.raises(ValueError, match="unknown KV policy"):
        make_policy("quest")
