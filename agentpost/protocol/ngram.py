"""Word-level n-gram language models for the paired-protocol chapter.

Two arms, both estimated from counts on a WikiText-2 training subsample:

* **add-k bigram** — :math:`P(w\\mid v) = \\frac{c(v,w)+k}{c(v)+k|V|}` (Jurafsky & Martin, SLP3 eq. 3.25);
* **interpolated trigram** — :math:`P(w\\mid u,v) = \\lambda_3 P_{ML}(w\\mid u,v) + \\lambda_2 P_{ML}(w\\mid v)
  + \\lambda_1 P_{+1}(w)` with :math:`\\sum\\lambda=1` (SLP3 eq. 3.27), the unigram add-one smoothed so no
  probability is zero. An ML term with an unseen history contributes 0.

``k`` and the λ are chosen on validation only (:func:`agentpost.stats.paired.select_on_validation`).
Sequences are whitespace tokens with one ``<eos>`` per non-empty line; every article starts from two ``<eos>``
of history.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from agentpost.data import wikitext2

BOS = "<eos>"


def training_subsample(seed: int, fraction: float) -> list[str]:
    """A seeded subsample of whole WikiText-2 training articles (the chapter's notion of a 'seed')."""
    if not 0 < fraction <= 1:
        raise ValueError(f"fraction must be in (0, 1], got {fraction}")
    arts = wikitext2.articles("train")
    rng = np.random.default_rng(seed)
    n = max(1, round(fraction * len(arts)))
    return [arts[i] for i in sorted(rng.choice(len(arts), size=n, replace=False))]


@dataclass
class NgramCounts:
    """Unigram, bigram and trigram counts plus the vocabulary (the full WikiText-2 training vocabulary)."""

    vocab: dict[str, int]
    uni: Counter
    bi: Counter
    tri: Counter
    bi_hist: Counter  # c(v) as a bigram history
    tri_hist: Counter  # c(u, v) as a trigram history
    total: int

    @classmethod
    def fit(cls, texts: list[str], vocab: dict[str, int]) -> "NgramCounts":
        uni, bi, tri, bh, th = Counter(), Counter(), Counter(), Counter(), Counter()
        total = 0
        for text in texts:
            toks = [BOS, BOS] + wikitext2.words(text)
            uni.update(toks[2:])
            total += len(toks) - 2
            bi.update(zip(toks[1:-1], toks[2:]))
            bh.update(toks[1:-1])
            tri.update(zip(toks[:-2], toks[1:-1], toks[2:]))
            th.update(zip(toks[:-2], toks[1:-1]))
        return cls(vocab, uni, bi, tri, bh, th, total)

    def components(self, text: str) -> np.ndarray:
        """Per-token array [n_tokens, 5] of the quantities both models need.

        Columns: 0 add-one unigram, 1 ML bigram, 2 ML trigram, 3 bigram count c(v,w), 4 history count c(v).
        """
        toks = [BOS, BOS] + wikitext2.words(text)
        V = len(self.vocab)
        rows = np.zeros((len(toks) - 2, 5))
        for i in range(2, len(toks)):
            u, v, w = toks[i - 2], toks[i - 1], toks[i]
            cv, cuv = self.bi_hist.get(v, 0), self.tri_hist.get((u, v), 0)
            cvw = self.bi.get((v, w), 0)
            rows[i - 2] = (
                (self.uni.get(w, 0) + 1) / (self.total + V),
                cvw / cv if cv else 0.0,
                self.tri.get((u, v, w), 0) / cuv if cuv else 0.0,
                cvw,
                cv,
            )
        return rows


def vocabulary() -> dict[str, int]:
    """The fixed vocabulary: every type in the full WikiText-2 training split (33,278 with ``<eos>``)."""
    types = sorted(set(wikitext2.words(wikitext2.read_split("train"))))
    return {w: i for i, w in enumerate(types)}


def bigram_nll(comp: np.ndarray, k: float, vocab_size: int) -> float:
    """Mean NLL (nats/token) of the add-k bigram from :meth:`NgramCounts.components` rows."""
    if k <= 0:
        raise ValueError(f"add-k smoothing needs k > 0, got {k}")
    p = (comp[:, 3] + k) / (comp[:, 4] + k * vocab_size)
    return float(-np.log(p).mean())


def trigram_nll(comp: np.ndarray, lambdas: tuple[float, float, float]) -> float:
    """Mean NLL (nats/token) of the interpolated trigram with weights (λ1 unigram, λ2 bigram, λ3 trigram)."""
    lam = np.asarray(lambdas, dtype=float)
    if lam.shape != (3,) or (lam < 0).any() or not np.isclose(lam.sum(), 1.0) or lam[0] <= 0:
        raise ValueError(f"interpolation weights must be 3 non-negative numbers summing to 1 with λ1>0, got {lambdas}")
    p = comp[:, :3] @ lam
    return float(-np.log(p).mean())


def per_article_components(counts: NgramCounts, split: str) -> list[np.ndarray]:
    """Component rows for every article of a split (validation or test)."""
    return [counts.components(a) for a in wikitext2.articles(split)]


def lambda_grid(step: float = 0.1) -> list[tuple[float, float, float]]:
    """All (λ1, λ2, λ3) on a simplex grid with λ1 ≥ step."""
    n = round(1 / step)
    return [(i * step, j * step, round(1 - (i + j) * step, 10)) for i in range(1, n + 1) for j in range(0, n + 1 - i)]
