"""Real retrievers over the StableToolBench API docs: all-MiniLM-L6-v2 sentence embeddings (dense, cosine, with an
optional category filter, as the official ``retriever/retrieval_server.py`` filters its FAISS index by category)
and BM25 (bm25s) as the lexical baseline.

The MiniLM weights, their sha256 check and the embedding cache live in :mod:`agentpost.models.minilm`.
"""

from __future__ import annotations

import functools
import re
from typing import Sequence

import numpy as np

from agentpost.models.minilm import embed_texts

__all__ = [
    "BM25Retriever",
    "MiniLMRetriever",
    "Retriever",
    "build_retriever",
    "embed_texts",
    "lexical_tokens",
    "retrieval_metrics",
]


class Retriever:
    """Top-k search over a fixed list of documents with an optional category filter."""

    name = "retriever"

    def __init__(self, names: Sequence[str], categories: Sequence[str]):
        if len(names) != len(categories):
            raise ValueError("names and categories must have equal length")
        self.names = list(names)
        self.categories = np.asarray(categories)
        self.category_set = tuple(sorted(set(categories)))

    def scores(self, query: str) -> np.ndarray:
        raise NotImplementedError

    def search(self, query: str, k: int, category: str | None = None) -> list[int]:
        """Indices of the top-``k`` documents (ties broken by index); ``category`` None or "all" searches all."""
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        s = np.asarray(self.scores(query), dtype=np.float64).copy()
        if category not in (None, "all"):
            if category not in self.category_set:
                raise ValueError(f"unknown category {category!r}")
            s[self.categories != category] = -np.inf
        order = np.lexsort((np.arange(s.size), -s))
        return [int(i) for i in order[:k] if np.isfinite(s[i])]


class MiniLMRetriever(Retriever):
    """Cosine similarity of MiniLM embeddings; query embeddings are memoised in memory."""

    name = "minilm"

    def __init__(self, names, categories, docs: Sequence[str]):
        super().__init__(names, categories)
        self.doc_emb = embed_texts(docs)
        self._doc_t = None
        self._memo: dict[str, np.ndarray] = {}

    def remember(self, queries: Sequence[str], embeddings: np.ndarray) -> None:
        """Register query embeddings computed in one batch (e.g. every clause of every request)."""
        if len(queries) != len(embeddings):
            raise ValueError("queries and embeddings must have equal length")
        self._memo.update(zip(queries, embeddings))

    def embed(self, query: str) -> np.ndarray:
        if query not in self._memo:
            self._memo[query] = embed_texts([query], cache=False)[0]
        return self._memo[query]

    def scores(self, query: str) -> np.ndarray:
        import torch  # torch's matvec honours torch.set_num_threads (numpy's BLAS threads contend on shared CPUs)

        if self._doc_t is None:
            self._doc_t = torch.from_numpy(self.doc_emb)
        return (self._doc_t @ torch.from_numpy(np.asarray(self.embed(query), dtype=np.float32))).numpy()


_WORD = re.compile(r"[a-z0-9]+")


@functools.lru_cache(maxsize=1)
def _stopwords() -> frozenset[str]:
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


def lexical_tokens(text: str) -> list[str]:
    """Lower-cased alphanumeric words minus bm25s's English stop words (the BM25 analyser; no stemming)."""
    stop = _stopwords()
    return [w for w in _WORD.findall(text.lower()) if w not in stop]


class BM25Retriever(Retriever):
    """BM25 (bm25s, Lucene variant, k1 = 1.5, b = 0.75) over the same document texts."""

    name = "bm25"

    def __init__(self, names, categories, docs: Sequence[str]):
        import bm25s

        super().__init__(names, categories)
        self._vocab: dict[str, int] = {}
        corpus = [[self._vocab.setdefault(w, len(self._vocab)) for w in lexical_tokens(d)] for d in docs]
        self._index = bm25s.BM25()
        self._index.index(bm25s.tokenization.Tokenized(ids=corpus, vocab=self._vocab), show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        ids = [self._vocab[w] for w in lexical_tokens(query) if w in self._vocab]
        if not ids:
            return np.zeros(len(self.names))
        return self._index.get_scores(ids)


def build_retriever(kind: str, apis) -> Retriever:
    """``minilm`` or ``bm25`` over ``apis`` (``agentpost.data.stabletoolbench.Api`` objects)."""
    names, cats, docs = [a.name for a in apis], [a.category for a in apis], [a.doc() for a in apis]
    if kind == "minilm":
        return MiniLMRetriever(names, cats, docs)
    if kind == "bm25":
        return BM25Retriever(names, cats, docs)
    raise ValueError(f"unknown retriever {kind!r}; use 'minilm' or 'bm25'")


def retrieval_metrics(retriever: Retriever, queries, k: int, *, gold_category: bool = False) -> dict[str, np.ndarray]:
    """Retrieval-only baseline: the top-``k`` documents for the full request, scored per query as recall@k and
    F1 (top-k as the predicted set) against the ground-truth APIs. ``gold_category`` filters to the first target's
    category (an oracle, for reference only)."""
    recall, f1 = [], []
    for q in queries:
        cat = q.targets[0].split(".", 1)[0] if gold_category else None
        got = {retriever.names[i] for i in retriever.search(q.text, k, category=cat)}
        hit = len(got & set(q.targets))
        r = hit / len(q.targets)
        p = hit / len(got) if got else 0.0
        recall.append(r)
        f1.append(0.0 if hit == 0 else 2 * p * r / (p + r))
    return {"recall": np.asarray(recall), "f1": np.asarray(f1)}
