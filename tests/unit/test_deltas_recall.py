"""The synthetic recall stream (labelled synthetic): repeated chunks have near-zero drift, novel facts do not, so
drift retention keeps the facts at a budget that fits them."""

import pytest
import torch

from agentpost.deltas.diagnostic import drift_separation, per_item, recall_grid
from agentpost.deltas.recall import RecallStreamSpec, make_stream, recall_after_retention

SPEC = RecallStreamSpec(n_facts=4, n_distractor_chunks=12, n_distractor_kinds=2, chunk_size=8)


@pytest.mark.claim("deltas", "C4")
def test_repeated_chunks_drift_far_less_than_novel_facts():
    sep = drift_separation(SPEC, seeds=range(5))
    assert (sep.fact_drift_median > 2.5 * sep.distractor_drift_median).all()  # measured 2.8-6.6x, seeds 0-4


@pytest.mark.claim("deltas", "C4")
def test_drift_keeps_every_fact_when_the_budget_fits_them_and_recency_keeps_only_recent_ones():
    stream = make_stream(SPEC, seed=1)
    n = len(stream.keys)
    # 4 sinks + 8 recent + 5 chunks of 8 (the 4 facts and the zero-state first chunk, whose drift is ||dS||/eps)
    budget = 4 + 8 + 5 * 8
    hits = recall_after_retention(stream, SPEC, "drift", budget, seed=1, retention="global")
    assert hits.tolist() == [1.0, 1.0, 1.0, 1.0]
    recency = recall_after_retention(stream, SPEC, "recency", budget, seed=1)
    in_window = (stream.fact_query_token >= n - (budget - 4)) | (stream.fact_query_token < 4)
    assert recency.tolist() == in_window.float().tolist()
    assert recall_after_retention(stream, SPEC, "attention", budget, seed=1).tolist() == [1.0] * 4


def test_stream_is_deterministic_under_its_seed_and_changes_with_it():
    a, b, c = make_stream(SPEC, 3), make_stream(SPEC, 3), make_stream(SPEC, 4)
    assert torch.equal(a.keys, b.keys) and torch.equal(a.drift, b.drift)
    assert not torch.equal(a.keys, c.keys)


def test_grid_and_per_item_outcomes():
    grid = recall_grid(
        SPEC,
        seeds=[0, 1, 2],
        budget_fractions=[0.5],
        policies=["drift", "recency", "random", "key_norm"],
        progress=False,
    )
    assert len(grid) == 3 * 1 * 4 * SPEC.n_facts
    out = per_item(grid, "recalled", ["seed", "fact"])
    assert set(out) == {"drift", "recency", "random", "key_norm"}
    assert sorted(out["drift"]) == sorted(f"{s}:{f}" for s in range(3) for f in range(SPEC.n_facts))
    row = grid[(grid.policy == "random") & (grid.seed == 2) & (grid.fact == 1)].recalled.item()
    assert out["random"]["2:1"] == row


def test_two_run_seeds_draw_different_streams_and_random_keeps():
    # the notebook's streams of run seed s are 1000 s + i: two run seeds must give different per-fact outcomes
    a = recall_grid(SPEC, seeds=[42000, 42001], budget_fractions=[0.25], policies=["drift", "random"], progress=False)
    b = recall_grid(SPEC, seeds=[43000, 43001], budget_fractions=[0.25], policies=["drift", "random"], progress=False)
    assert not torch.equal(make_stream(SPEC, 42000).keys, make_stream(SPEC, 43000).keys)
    assert a.recalled.tolist() != b.recalled.tolist()


def test_bad_spec_is_refused_by_field():
    with pytest.raises(ValueError, match="n_facts"):
        RecallStreamSpec(n_facts=0)
    with pytest.raises(ValueError, match="alpha and beta"):
        RecallStreamSpec(beta=1.5)
