"""Retention policies on hand-built drift sequences (spec mechanism test 4)."""

import pytest
import torch

from agentpost.deltas.retention import CacheEntries, DriftRetention, make_policy
from agentpost.kv_retention import select


def _entries(drift_per_chunk, tokens_per_chunk=2, key_norm=None):
    n = len(drift_per_chunk) * tokens_per_chunk
    chunk_ids = torch.arange(n) // tokens_per_chunk
    drift = torch.tensor(drift_per_chunk, dtype=torch.float32)[chunk_ids]
    kn = torch.ones(n) if key_norm is None else torch.tensor(key_norm, dtype=torch.float32)
    return CacheEntries(positions=torch.arange(n), chunk_ids=chunk_ids, drift=drift, key_norm=kn)


def test_drift_keeps_sinks_recent_and_the_high_drift_chunks_globally():
    # 8 chunks x 2 tokens = 16 entries; sinks 2 (chunk 0), recent 2 (chunk 7); budget 8 leaves a quota of 4.
    e = _entries([0.0, 0.1, 0.9, 0.2, 0.8, 0.05, 0.3, 0.0])
    keep = DriftRetention(n_sinks=2, n_recent=2, retention="global").keep(e, 8)
    assert keep.tolist() == [0, 1, 4, 5, 8, 9, 14, 15]  # chunks 0 | 2 (0.9), 4 (0.8) | 7


def test_buckets_spread_the_quota_over_time_then_top_up():
    # middle chunks 1..6 in 2 buckets: {1,2,3} and {4,5,6}; quota 4 -> 2 per bucket (one chunk each).
    e = _entries([0.0, 0.9, 0.8, 0.7, 0.1, 0.05, 0.2, 0.0])
    keep = DriftRetention(n_sinks=2, n_recent=2, buckets=2).keep(e, 8)
    assert keep.tolist() == [0, 1, 2, 3, 12, 13, 14, 15]  # bucket 1 -> chunk 1, bucket 2 -> chunk 6
    glob = DriftRetention(n_sinks=2, n_recent=2, retention="global").keep(e, 8)
    assert glob.tolist() == [0, 1, 2, 3, 4, 5, 14, 15]  # global top-4: chunks 1 and 2


def test_the_quota_left_after_equal_bucket_shares_goes_to_the_global_top():
    # 3 buckets over middle chunk ids 1..3 (one chunk, 2 tokens each); quota 5 -> 1 per bucket, then 2 top-up.
    e = _entries([0.0, 0.9, 0.5, 0.1, 0.0])
    keep = select(e.drift, 9, n_sinks=2, n_recent=2, bucket_ids=e.chunk_ids, buckets=3)
    # per bucket the later token of each chunk wins the tie (positions 3, 5, 7); top-up: 2 (0.9), 4 (0.5)
    assert keep.tolist() == [0, 1, 2, 3, 4, 5, 7, 8, 9]


def test_kept_count_equals_budget_and_positions_survive_repeated_eviction():
    e = _entries([0.3, 0.9, 0.1, 0.7, 0.2, 0.6, 0.4, 0.8, 0.5, 0.0], tokens_per_chunk=3)
    policy = DriftRetention(n_sinks=3, n_recent=3, buckets=2)
    first = policy.keep(e, 15)
    assert first.numel() == 15 and {0, 1, 2, 27, 28, 29} <= set(first.tolist())
    kept = e.take(first)
    second = policy.keep(kept, 9)
    assert second.numel() == 9
    assert set(kept.positions[second].tolist()) <= set(first.tolist())  # original positions, never renumbered
    assert {0, 1, 2, 27, 28, 29} <= set(kept.positions[second].tolist())


def test_alternative_policies_on_the_same_entries():
    e = _entries([0.0, 0.9, 0.8, 0.7, 0.1, 0.05, 0.2, 0.0], key_norm=[5, 5, 1, 9, 2, 2, 9, 9, 3, 0.5, 9, 9, 9, 9, 5, 5])
    assert make_policy("recency", n_sinks=2, n_recent=2).keep(e, 8).tolist() == [0, 1, 10, 11, 12, 13, 14, 15]
    assert make_policy("key_norm", n_sinks=2, n_recent=2).keep(e, 8).tolist() == [0, 1, 2, 4, 5, 9, 14, 15]
    r1 = make_policy("random", n_sinks=2, n_recent=2, seed=3).keep(e, 8)
    r2 = make_policy("random", n_sinks=2, n_recent=2, seed=3).keep(e, 8)
    assert torch.equal(r1, r2) and r1.numel() == 8
    with pytest.raises(ValueError, match="attention"):
        make_policy("attention").keep(e, 8)
    import agentpost.actkv.policies  # noqa: F401  (registers h2o in its own context, as a full test run would)

    with pytest.raises(ValueError, match="not deltas"):
        make_policy("h2o")
    with pytest.raises(ValueError, match="unknown KV retention scorer"):
        make_policy("quest")


def test_a_stream_within_budget_keeps_everything():
    e = _entries([0.1, 0.2])
    assert make_policy("drift").keep(e, 10).tolist() == [0, 1, 2, 3]


def test_entries_extend_appends_a_chunks_arrivals():
    a = CacheEntries(torch.arange(3), torch.zeros(3, dtype=torch.long), torch.ones(3), torch.ones(3))
    b = CacheEntries(torch.arange(3, 5), torch.ones(2, dtype=torch.long), torch.full((2,), 2.0), torch.zeros(2))
    both = a.extend(b)
    assert both.positions.tolist() == [0, 1, 2, 3, 4] and both.chunk_ids.tolist() == [0, 0, 0, 1, 1]
    assert both.drift.tolist() == [1, 1, 1, 2, 2] and both.key_norm.tolist() == [1, 1, 1, 0, 0]
    with pytest.raises(ValueError, match="attention"):
        CacheEntries(
            torch.arange(1), torch.zeros(1, dtype=torch.long), torch.ones(1), torch.ones(1), attention=torch.ones(1)
        ).extend(b)
