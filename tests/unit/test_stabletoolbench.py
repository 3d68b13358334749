"""The StableToolBench loader and the retrievers (real data; MiniLM only on a few texts, never the whole corpus)."""

import numpy as np
import pytest

from agentpost.data.stabletoolbench import GROUPS, load_apis, load_queries, split_by_group
from agentpost.models import minilm
from agentpost.record.hashing import sha256_file
from agentpost.toolsearcher import retrieval


def test_loader_counts_and_targets():
    apis, queries = load_apis(), load_queries()
    assert len(apis) == 2490 and len(queries) == 765
    assert len({a.category for a in apis}) == 47
    names = {a.name for a in apis}
    assert all(t in names for q in queries for t in q.targets)
    assert np.mean([len(q.targets) for q in queries]) == pytest.approx(2.35, abs=0.01)
    assert {q.group for q in queries} == set(GROUPS)


def test_split_is_stratified_disjoint_and_deterministic():
    qs = load_queries()
    s = split_by_group(qs)
    uids = [set(q.uid for q in s[k]) for k in ("train", "validation", "test")]
    assert sum(map(len, uids)) == 765 and not (uids[0] & uids[1] or uids[0] & uids[2] or uids[1] & uids[2])
    for g in GROUPS:
        assert all(any(q.group == g for q in s[k]) for k in s)
    assert split_by_group(qs) == s
    with pytest.raises(ValueError, match="fractions"):
        split_by_group(qs, (0.5, 0.5, 0.5))


def test_minilm_weights_are_pinned_and_embeddings_normalised():
    folder = minilm.minilm_dir()
    assert sha256_file(folder / "model.safetensors") == minilm.MINILM_WEIGHTS_SHA256
    e = minilm.embed_texts(["weather forecast for a city", "current weather in a town", "stock prices"], cache=False)
    assert e.shape == (3, 384)
    assert np.allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-5)
    assert e[0] @ e[1] > e[0] @ e[2]


def test_weights_mismatch_is_refused(monkeypatch, tmp_path):
    minilm.minilm_dir.cache_clear()
    monkeypatch.setattr(minilm, "MINILM_WEIGHTS_SHA256", "0" * 64)
    with pytest.raises(minilm.WeightsMismatch, match="expected 0000"):
        minilm.minilm_dir()
    minilm.minilm_dir.cache_clear()


def test_bm25_retrieval_and_category_filter():
    apis = load_apis()
    bm = retrieval.build_retriever("bm25", apis)
    assert bm.search(apis[100].doc(), 1) == [100]  # a document is its own best match
    q = load_queries()[0]
    filt = bm.search(q.text, 5, category="Finance")
    assert all(bm.categories[i] == "Finance" for i in filt)
    with pytest.raises(ValueError, match="unknown category"):
        bm.search(q.text, 5, category="Nope")
    m = retrieval.retrieval_metrics(bm, [q], 5)
    assert 0.0 <= m["recall"][0] <= 1.0
    with pytest.raises(ValueError, match="unknown retriever"):
        retrieval.build_retriever("faiss", apis)
