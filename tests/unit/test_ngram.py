"""The protocol chapter's n-gram estimators on hand-computed counts."""

import math

import numpy as np
import pytest

from agentpost.protocol import ngram

VOCAB = {"<eos>": 0, "a": 1, "b": 2}


@pytest.fixture
def counts():
    # tokens with history: <eos> <eos> a b <eos> | <eos> <eos> a a <eos>
    return ngram.NgramCounts.fit(["a b", "a a"], VOCAB)


def test_counts_by_hand(counts):
    assert counts.total == 6
    assert counts.uni == {"a": 3, "b": 1, "<eos>": 2}
    # the bigram history of an article's first token is the last padding <eos>: once per article
    assert counts.bi[("<eos>", "a")] == 2 and counts.bi_hist["<eos>"] == 2
    assert counts.tri[("<eos>", "<eos>", "a")] == 2 and counts.tri_hist[("<eos>", "<eos>")] == 2


def test_components_and_both_models_by_hand(counts):
    comp = counts.components("a b")  # predict a | <eos><eos>, b | <eos> a, <eos> | a b
    # add-one unigram: (c(w)+1)/(6+3); ML bigram: c(v,w)/c(v); ML trigram: c(u,v,w)/c(u,v)
    assert comp[0, :3] == pytest.approx([4 / 9, 2 / 2, 2 / 2])
    assert comp[1, :3] == pytest.approx([2 / 9, 1 / 3, 1 / 2])
    assert comp[2, :3] == pytest.approx([3 / 9, 1 / 1, 1 / 1])
    # add-k bigram with k = 1: (c(v,w)+1)/(c(v)+3)
    expected = -np.mean(np.log([(2 + 1) / (2 + 3), (1 + 1) / (3 + 3), (1 + 1) / (1 + 3)]))
    assert ngram.bigram_nll(comp, 1.0, 3) == pytest.approx(expected)
    lam = (0.2, 0.3, 0.5)
    p = [0.2 * 4 / 9 + 0.3 * 1.0 + 0.5 * 1.0, 0.2 * 2 / 9 + 0.3 / 3 + 0.5 * 0.5, 0.2 * 3 / 9 + 0.3 + 0.5]
    assert ngram.trigram_nll(comp, lam) == pytest.approx(-np.mean(np.log(p)))


def test_bad_smoothing_parameters_are_refused(counts):
    comp = counts.components("a")
    with pytest.raises(ValueError, match="k > 0"):
        ngram.bigram_nll(comp, 0.0, 3)
    with pytest.raises(ValueError, match="summing to 1"):
        ngram.trigram_nll(comp, (0.5, 0.5, 0.5))
    with pytest.raises(ValueError, match="fraction"):
        ngram.training_subsample(0, 0.0)


def test_lambda_grid_is_on_the_simplex():
    grid = ngram.lambda_grid(0.25)
    assert all(math.isclose(sum(g), 1.0) and g[0] >= 0.25 for g in grid)
    assert len(grid) == 10  # i in 1..4, j in 0..4-i
