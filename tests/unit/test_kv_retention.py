"""agentpost.kv_retention: the one top-B selector that ActKV (dense, paged) and DeltaS share."""

import math

import pytest
import torch

from agentpost.kv_retention import knorm_scores, select_top_b


def test_top_b_ties_go_to_the_later_entry_and_inf_forces():
    # scores 3, 1, 3, 1, 3: B = 2 keeps two of the three 3s, the later ones (2 and 4).
    assert select_top_b(torch.tensor([3.0, 1.0, 3.0, 1.0, 3.0]), 2).tolist() == [2, 4]
    # +inf on entry 1 forces it in ahead of every finite score; the other slot goes to the later 3.
    assert select_top_b(torch.tensor([3.0, math.inf, 3.0, 1.0]), 2).tolist() == [1, 2]
    # Rows are independent; a budget >= N keeps everything; a negative budget is refused.
    assert select_top_b(torch.tensor([[0.0, 1.0, 1.0], [2.0, 1.0, 1.0]]), 1).tolist() == [[2], [0]]
    assert select_top_b(torch.zeros(2, 3), 5).tolist() == [[0, 1, 2], [0, 1, 2]]
    with pytest.raises(ValueError, match="budget"):
        select_top_b(torch.zeros(3), -1)


def test_every_chapter_uses_the_shared_selector():
    from agentpost.actkv import lrfu
    from agentpost.deltas import retention
    from agentpost.kernels.actkv import keep_mask_from_scores

    assert lrfu.select_top_b is select_top_b
    # DeltaS's scored middle: candidates 1, 3, 4 with scores 5, 5, 2 -> k = 1 keeps the later 5 (entry 3).
    scores = torch.tensor([9.0, 5.0, 0.0, 5.0, 2.0])
    assert retention._top(scores, torch.tensor([1, 3, 4]), 1).tolist() == [3]
    # The paged kernels' mask: prefix 1 kept, then the top 2 of entries 1..3 (ties 7, 7 -> both; entry 4 not live).
    keep = keep_mask_from_scores(torch.tensor([[0.0, 7.0, 1.0, 7.0, 9.0]]), torch.tensor([4]), 2, prefix_len=1)
    assert keep.tolist() == [[True, True, False, True, False]]


def test_knorm_scores_keep_the_lowest_key_norms_in_both_chapters():
    from agentpost.actkv.policies import make_policy
    from agentpost.deltas.retention import CacheEntries, KeyNormRetention

    # Keys (3,4) -> 5, (0,1) -> 1, (6,8) -> 10, (0,2) -> 2: scores -5, -1, -10, -2; B = 2 keeps entries 1 and 3.
    keys = torch.tensor([[[3.0, 4.0], [0.0, 1.0], [6.0, 8.0], [0.0, 2.0]]])
    assert knorm_scores(keys).tolist() == [[-5.0, -1.0, -10.0, -2.0]]
    assert select_top_b(knorm_scores(keys), 2).tolist() == [[1, 3]]
    # ActKV's knorm baseline scores the evictable entries (after a 1-entry prefix) per KV head.
    pol = make_policy("knorm")
    pol.reset(n_layers=1, n_kv_heads=1, prefix_len=1)
    assert pol.score(0, keys).tolist() == [[-1.0, -10.0, -2.0]]
    # DeltaS's key_norm policy on the same norms, no sinks or window: the same two entries.
    n = 4
    entries = CacheEntries(torch.arange(n), torch.arange(n), torch.zeros(n), keys[0].norm(dim=-1))
    assert KeyNormRetention(n_sinks=0, n_recent=0).keep(entries, 2).tolist() == [1, 3]
