"""Count-model baselines on a chapter's own tokens: the floor a trained language model must beat to be competent.

KITE's arms are scored by mean next-token NLL per test article (nats/token) on windows of ``seq_len + 1`` tokens of
the shared tokenizer, trained on the first ``train_chars`` characters of WikiText-2's training split. This script
scores an add-k unigram and an add-k bigram model (Jurafsky & Martin, SLP3 eq. 3.25) on the *same* windows, from
counts over the *same* training characters, with k chosen on the validation windows, and prints a table. The KITE
catalogue entry's competence floor (``design: competence``) cites its bigram row.

    python benchmarks/count_baselines.py [--profile cpu]
"""

from __future__ import annotations

import argparse

import numpy as np
import yaml

from agentpost.kite.train import article_chunks, token_stream
from agentpost.project import project_root

K_GRID = (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0)


def per_article(windows, owner, nll_of_window) -> float:
    per_window = np.array([nll_of_window(w) for w in windows])
    return float(np.mean([per_window[owner == a].mean() for a in np.unique(owner)]))  # as kite.train.per_article_nll


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="cpu")
    args = parser.parse_args()
    params = yaml.safe_load((project_root() / "params" / "kite" / f"{args.profile}.yaml").read_text())["parameters"]
    seq_len, chunks = params["seq_len"], params["eval_chunks"]
    stream = token_stream("train", params["train_chars"]).numpy()
    vocab = int(max(stream.max(), 0)) + 1
    from agentpost.models.tokenizer import load_tokenizer

    vocab = max(vocab, len(load_tokenizer()))
    uni = np.bincount(stream, minlength=vocab).astype(np.float64)
    pairs = {}
    for v, w in zip(stream[:-1], stream[1:]):
        pairs[(int(v), int(w))] = pairs.get((int(v), int(w)), 0) + 1
    hist = np.bincount(stream[:-1], minlength=vocab).astype(np.float64)

    def unigram(k):
        p = (uni + k) / (uni.sum() + k * vocab)
        return lambda w: float(-np.log(p[w[1:]]).mean())

    def bigram(k):
        def nll(w):
            w = w.tolist()
            return float(
                np.mean([-np.log((pairs.get((v, t), 0) + k) / (hist[v] + k * vocab)) for v, t in zip(w[:-1], w[1:])])
            )

        return nll

    splits = {s: tuple(x.numpy() for x in article_chunks(s, seq_len, chunks)) for s in ("validation", "test")}
    print(f"KITE profile {args.profile}: {len(stream)} training tokens, vocabulary {vocab}, seq_len {seq_len}")
    print(f"{'model':10} {'k (validation)':>15} {'validation NLL':>15} {'test NLL':>10}")
    for name, make in (("unigram", unigram), ("bigram", bigram)):
        scores = {k: per_article(*splits["validation"], make(k)) for k in K_GRID}
        best = min(scores, key=scores.get)
        test = per_article(*splits["test"], make(best))
        print(f"{name:10} {best:>15g} {scores[best]:>15.3f} {test:>10.3f}")


if __name__ == "__main__":
    main()
