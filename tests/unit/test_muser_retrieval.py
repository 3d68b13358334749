"""Served multi-interest retrieval (agentpost.muser.retrieval): per-interest candidates, exact rerank."""

import numpy as np
import pytest

from agentpost.muser.retrieval import IndexConfig, InterestRetriever, exact_topk, overlap_at_k, rerank_scores

# Four unit items in the plane and two interests along the axes (worked by hand below).
ITEMS = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8], [-1.0, 0.0]], dtype=np.float32)
INTERESTS = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float32)


def test_rerank_score_is_the_adaptive_score_by_hand():
    # item (0.6, 0.8), tau 0.1: alpha = softmax((6, 8)) = (0.1192, 0.8808), s = (0.1192*0.6 + 0.8808*0.8)/0.1 = 7.7616;
    # item (1, 0): cosines (1, 0), alpha = softmax((10, 0)) = (0.99995, 4.54e-5), s = 9.9995
    s = rerank_scores(INTERESTS, ITEMS, 0.1, "softmax")
    assert s[2] == pytest.approx(7.7616, abs=1e-4)
    assert s[0] == pytest.approx(10 / (1 + np.exp(-10)), abs=1e-4)
    assert rerank_scores(INTERESTS, ITEMS, 0.1, "max").tolist() == pytest.approx([10, 10, 8, 0], abs=1e-5)


def test_exact_topk_order_ties_and_exclusion():
    # max aggregation: items 0 and 1 tie at 10 (stable order keeps 0 first), then item 2 (8), then item 3 (0)
    assert exact_topk(INTERESTS, ITEMS, 4, tau=0.1, interest_agg="max").tolist() == [0, 1, 2, 3]
    assert exact_topk(INTERESTS, ITEMS, 2, tau=0.1, interest_agg="max", exclude=[0]).tolist() == [1, 2]


@pytest.mark.parametrize("kind", ["exact", "hnsw"])
def test_one_candidate_per_interest_serves_each_interests_nearest_item(kind):
    r = InterestRetriever(ITEMS, IndexConfig(kind=kind, candidates=1), tau=0.1, interest_agg="max")
    assert r.candidates(INTERESTS).ravel().tolist() == [0, 1]
    # item 2 (0.6, 0.8) is second overall but neither interest's nearest: with one candidate each it is missed
    served = r.topk(INTERESTS, 3)
    assert served.tolist() == [0, 1]
    assert overlap_at_k(served, exact_topk(INTERESTS, ITEMS, 3, tau=0.1, interest_agg="max")) == pytest.approx(2 / 3)


def test_served_equals_exact_when_the_candidates_cover_the_top_k():
    rng = np.random.default_rng(0)
    items = rng.normal(size=(500, 16)).astype(np.float32)
    r = InterestRetriever(items, IndexConfig(kind="exact", candidates=500), tau=0.07)
    for _ in range(5):
        u = rng.normal(size=(4, 16)).astype(np.float32)
        seen = rng.choice(500, 20, replace=False)
        assert r.topk(u, 10, exclude=seen).tolist() == exact_topk(u, items, 10, tau=0.07, exclude=seen).tolist()


def test_hnsw_with_a_wide_search_finds_the_exact_neighbours():
    rng = np.random.default_rng(1)
    items = rng.normal(size=(2000, 16)).astype(np.float32)
    queries = rng.normal(size=(20, 16)).astype(np.float32)
    exact = InterestRetriever(items, IndexConfig(kind="exact", candidates=10)).candidates(queries)
    hnsw = InterestRetriever(items, IndexConfig(kind="hnsw", ef_search=512, candidates=10)).candidates(queries)
    assert np.mean([overlap_at_k(h, e) for h, e in zip(hnsw, exact)]) >= 0.99


def test_search_settings_change_without_a_rebuild():
    r = InterestRetriever(ITEMS, IndexConfig(kind="hnsw", ef_search=8, candidates=2))
    index = r.index
    r.set_search(ef_search=32, candidates=1)
    assert r.index is index and r.index.hnsw.efSearch == 32 and r.candidates(INTERESTS).shape == (2, 1)


def test_bad_index_settings_are_refused():
    with pytest.raises(ValueError, match="index kind"):
        IndexConfig(kind="ivf")
    with pytest.raises(ValueError, match="candidates"):
        IndexConfig(candidates=0)
