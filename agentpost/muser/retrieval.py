"""Retrieval as it is served: per-interest approximate nearest neighbours, then an exact rerank (muser.md, serving).

The paper serves with "HNSW coarse retrieval then a multi-objective DNN rerank" (spec, digest-A); with several
interests per user, the field's reading (ComiRec's aggregation module, Cen et al., KDD 2020) is one nearest-neighbour
search per interest vector and a merge of the candidates. Here each of the M interests ``u_m`` fetches ``candidates`` items by
inner product from one index over the unit item vectors (inner product = cosine), the union is rescored with the
model's own adaptive score :func:`agentpost.muser.interests.adaptive_score` (the "rerank"; the paper's DNN ranker is
not public), and the top ``k`` are returned. The score of an item depends on that item alone, so the served top-k
equals the exact top-k whenever the union contains it: the only loss is the candidates the index misses.

Two indexes (faiss, ``faiss-cpu`` on PyPI): ``exact`` (``IndexFlatIP``, brute force) and ``hnsw``
(``IndexHNSWFlat`` with inner-product metric; ``hnsw_m`` links per node, ``ef_construction``, ``ef_search``).
Positions are rows of the item matrix (the model's item ``i`` is row ``i - 1`` of ``all_items()``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from agentpost.muser.interests import adaptive_score, interest_cosines

INDEXES = ("exact", "hnsw")


@dataclass(frozen=True)
class IndexConfig:
    """The index and its search breadth (the HNSW defaults are this module's choice; the benchmark sweeps
    ``ef_search`` and ``candidates``)."""

    kind: str = "hnsw"
    hnsw_m: int = 32
    ef_construction: int = 200
    ef_search: int = 64
    candidates: int = 50  # items fetched per interest before the rerank

    def __post_init__(self):
        if self.kind not in INDEXES:
            raise ValueError(f"index kind must be one of {INDEXES}, got {self.kind!r}")
        if min(self.hnsw_m, self.ef_construction, self.ef_search, self.candidates) < 1:
            raise ValueError("hnsw_m, ef_construction, ef_search and candidates must be >= 1")


def unit_rows(x) -> np.ndarray:
    """Rows scaled to unit length, float32 C-contiguous (what faiss reads); zero rows stay zero."""
    x = np.asarray(x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else x, dtype=np.float32)
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return np.ascontiguousarray(x / np.maximum(norms, 1e-12))


class InterestRetriever:
    """Per-interest candidates from one faiss index over ``items`` (N, d), reranked by the adaptive score."""

    def __init__(self, items, cfg: IndexConfig = IndexConfig(), *, tau: float = 0.07, interest_agg: str = "softmax"):
        import faiss

        self.cfg, self.tau, self.interest_agg = cfg, tau, interest_agg
        self.items = unit_rows(items)
        n, d = self.items.shape
        if cfg.kind == "exact":
            self.index = faiss.IndexFlatIP(d)
        else:
            self.index = faiss.IndexHNSWFlat(d, cfg.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            self.index.hnsw.efConstruction = cfg.ef_construction
            self.index.hnsw.efSearch = cfg.ef_search
        self.index.add(self.items)
        self.n_items = n

    def set_search(self, *, ef_search: int | None = None, candidates: int | None = None) -> None:
        """Change the search breadth without rebuilding the index (both are search-time settings)."""
        self.cfg = replace(
            self.cfg, ef_search=ef_search or self.cfg.ef_search, candidates=candidates or self.cfg.candidates
        )
        if self.cfg.kind == "hnsw":
            self.index.hnsw.efSearch = self.cfg.ef_search

    def candidates(self, interests) -> np.ndarray:
        """Item positions (M, c) each interest fetches, ``c = min(candidates, N)``; -1 where the index found fewer."""
        _, ids = self.index.search(unit_rows(interests), min(self.cfg.candidates, self.n_items))
        return ids

    def topk(self, interests, k: int, exclude=()) -> np.ndarray:
        """The served top-``k`` positions of one request (``interests`` (M, d)), best first, ``exclude`` left out
        (e.g. the user's seen items); fewer than ``k`` when the candidates run out."""
        pool = np.unique(self.candidates(interests))
        pool = pool[pool >= 0]
        if len(exclude):
            pool = np.setdiff1d(pool, np.asarray(exclude), assume_unique=False)
        scores = rerank_scores(interests, self.items[pool], self.tau, self.interest_agg)
        return pool[np.argsort(-scores, kind="stable")[:k]]


def rerank_scores(interests, items, tau: float, interest_agg: str) -> np.ndarray:
    """The model's adaptive score (paper's multi-interest score, :func:`adaptive_score`) of each row of ``items``."""
    u = torch.from_numpy(unit_rows(interests))[None]
    return adaptive_score(interest_cosines(u, torch.from_numpy(unit_rows(items))), tau, interest_agg)[0].numpy()


def exact_topk(interests, items, k: int, *, tau: float = 0.07, interest_agg: str = "softmax", exclude=()) -> np.ndarray:
    """The top-``k`` positions of one request by the adaptive score over the whole catalogue (the offline number)."""
    scores = rerank_scores(interests, items, tau, interest_agg)
    if len(exclude):
        scores[np.asarray(exclude)] = -np.inf
    return np.argsort(-scores, kind="stable")[:k]


def overlap_at_k(served: np.ndarray, exact: np.ndarray) -> float:
    """|served ∩ exact| / |exact|: the share of the exact top-k that the served list also returns."""
    return len(np.intersect1d(served, exact)) / max(len(exact), 1)
