"""agentpost.kv_retention: the one selector, scorer base and registry that ActKV (dense, paged) and DeltaS share."""

import math

import pytest
import torch

from agentpost import kv_retention
from agentpost.kv_retention import knorm_scores, select, select_top_b


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
    from agentpost.actkv import engine, lrfu
    from agentpost.deltas import retention
    from agentpost.kernels.actkv import keep_mask_from_scores

    assert lrfu.select_top_b is select_top_b
    assert engine.KVPolicy.select is retention.RetentionPolicy.select is kv_retention.Scorer.select
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


def test_the_selector_protects_sinks_and_window_then_fills_by_score():
    # N = 10, 2 sinks {0, 1}, window {8, 9}; the middle 2..7 scores 2, 5, 1, +inf, 5, 3.
    s = torch.tensor([9.0, 5.0, 2.0, 5.0, 1.0, math.inf, 5.0, 3.0, 0.0, 0.0])
    sel = lambda b, **kw: select(s, b, **{"n_sinks": 2, "n_recent": 2, **kw}).tolist()  # noqa: E731
    # B = 6: quota 2 -> +inf entry 5 is forced, the last slot goes to the later of the tied 5s (6, not 3).
    assert sel(6) == [0, 1, 5, 6, 8, 9]
    # B = 7: quota 3 -> 5, then both 5s (3 and 6); the sinks' 9 and 5 never compete with the middle.
    assert sel(7) == [0, 1, 3, 5, 6, 8, 9]
    # B = 4 = sinks + window keeps just those; B = 3 < 4: the sinks first, then the newest; B = 1: one sink.
    assert sel(4) == [0, 1, 8, 9]
    assert sel(3) == [0, 1, 9]
    assert sel(1) == [0]
    assert sel(0) == []
    assert sel(10) == sel(12) == list(range(10))
    # sinks 3 and window 3 overlap on N = 5: B = 4 keeps sinks 0, 1, 2 and the newest entry.
    assert select(torch.zeros(5), 4, n_sinks=3, n_recent=3).tolist() == [0, 1, 2, 4]
    # No sinks, no window: the plain top-B: +inf (5), 9 (0), then the latest of the three tied 5s (1, 3, 6).
    assert select(s, 3).tolist() == select_top_b(s, 3).tolist() == [0, 5, 6]
    # Rows (KV heads) share the protected entries and fill the middle on their own scores.
    rows = torch.stack([s, torch.tensor([0.0, 0.0, 7.0, 0.0, 0.0, 0.0, 0.0, 8.0, 0.0, 0.0])])
    assert select(rows, 6, n_sinks=2, n_recent=2).tolist() == [[0, 1, 5, 6, 8, 9], [0, 1, 2, 7, 8, 9]]
    with pytest.raises(ValueError, match="budget"):
        select(s, -1)
    with pytest.raises(ValueError, match="n_sinks"):
        select(s, 3, n_sinks=-1)
    with pytest.raises(ValueError, match="bucket_ids"):
        select(s, 3, buckets=2)


def test_every_policy_name_of_both_chapters_resolves_through_the_one_registry():
    from agentpost.actkv import diagnostic as actkv_diag
    from agentpost.actkv.policies import POLICIES, make_policy as actkv_policy
    from agentpost.deltas import diagnostic as deltas_diag
    from agentpost.deltas.retention import make_policy as deltas_policy

    actkv_names = set(actkv_diag.METHODS) | {m for m, _ in actkv_diag.VARIANTS.values()} | {"knorm"}
    deltas_names = set(deltas_diag.STREAMING_POLICIES + deltas_diag.REFERENCE_POLICIES)
    assert set(kv_retention.SCORERS) == actkv_names | deltas_names
    assert set(POLICIES) == set(kv_retention.scorers("actkv")) == actkv_names
    assert set(kv_retention.scorers("deltas")) == deltas_names
    for context, names, make in (("actkv", actkv_names, actkv_policy), ("deltas", deltas_names, deltas_policy)):
        for name in names:
            scorer = make(name)
            assert type(scorer) is kv_retention.SCORERS[name] and scorer.name == name and scorer.context == context
            assert isinstance(scorer, kv_retention.Scorer)
