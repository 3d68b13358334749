"""MuSeR retrieval as served: per-interest HNSW candidates + exact rerank against exact top-k, recall and latency.

Two catalogues:

* **MovieTweetings** (real data, ``agentpost.data.movietweetings``): one MuSeR arm (default ``multi``: six interests,
  ID embeddings) trained on the chapter's split at the smoke settings, its six interest vectors per test user and its
  item table. Per request (one user, seen items excluded): the exact top-10 by the model's adaptive score over the
  whole catalogue, and the served top-10 (:class:`agentpost.muser.retrieval.InterestRetriever`: each interest fetches
  ``candidates`` items from the index, the union is reranked exactly). Reported: the share of the exact top-10 the
  served list returns (overlap@10), Recall@10 of the held-out test item under each, and milliseconds per request.
* **Synthetic** (labelled synthetic; only its size matters): ``--synthetic-items`` clustered unit vectors at the
  model's width, interests drawn near cluster centres; overlap@10 and latency, where a catalogue of MovieTweetings'
  size (2,999 items) is too small for an index to save time.

Latency: one request at a time on ``--threads`` threads (faiss and torch), median of all requests, after one warm-up
request; the ``exact`` index (brute force, ``IndexFlatIP``) is the baseline measured in the same run.

    python benchmarks/muser_retrieval.py                          # arm multi, 2 epochs, 200,000 synthetic items
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from _table import quantiles, record

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentpost.muser.retrieval import (  # noqa: E402
    IndexConfig,
    InterestRetriever,
    exact_topk,
    overlap_at_k,
    unit_rows,
)

K = 10


def movietweetings_case(arm: str, epochs: int, user_fraction: float, seed: int):
    """(interests (U, M, d), items (N, d), seen positions per user, test target positions) of one trained arm."""
    from agentpost.data.movietweetings import leave_last_out, load_interactions
    from agentpost.muser.diagnostic import arm_config
    from agentpost.muser.model import MuSeRConfig
    from agentpost.muser.train import TrainConfig, history_windows, train_model

    data = load_interactions(user_fraction=user_fraction)
    split = leave_last_out(data, min_eval_len=5)
    base = MuSeRConfig(
        n_items=data.n_items,
        dim=32,
        max_len=50,
        recent_len=8,
        mid_len=16,
        strides=(1, 4, 8),
        num_interests=6,
        layers=1,
        heads=2,
        tau=0.07,
    )
    cfg = arm_config(arm, base, num_interests=6, ortho_lambda=0.1, align_weight=0.1)
    if cfg is None or cfg.semantic:
        raise SystemExit(f"--arm {arm}: choose an ID-only arm with interests (multi, compression, sasrec, ...)")
    model = train_model(
        cfg, TrainConfig(epochs=epochs, batch_size=512, n_sampled=128), split.train, seed, progress=False
    ).model
    with torch.no_grad():
        u = model(torch.from_numpy(history_windows(split.test.history, model.window)))
        items = model.items.all_items()
    seen = [np.unique(h[h > 0]) - 1 for h in split.test.history]
    return unit_rows(u), unit_rows(items), seen, split.test.target - 1, cfg


def synthetic_case(n_items: int, dim: int, users: int, interests: int, seed: int):
    """Clustered unit vectors (synthetic): 1,000 centres, items and interests near them."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(1000, dim))
    items = centres[rng.integers(0, 1000, n_items)] + 0.5 * rng.normal(size=(n_items, dim))
    u = centres[rng.integers(0, 1000, (users, interests))] + 0.5 * rng.normal(size=(users, interests, dim))
    return unit_rows(u), unit_rows(items)


def serve(catalogue: str, u, retriever: InterestRetriever, build_s: float, *, seen=None, targets=None) -> dict:
    """One row at the retriever's current search settings: per-request latency, overlap@10 with the exact top-10 and
    (with targets) Recall@10."""
    cfg, items, tau, agg = retriever.cfg, retriever.items, retriever.tau, retriever.interest_agg
    no_seen = [np.array([], dtype=np.int64)] * len(u)
    seen = no_seen if seen is None else seen
    retriever.topk(u[0], K, seen[0])  # warm-up
    times, overlaps, hits, exact_hits = [], [], [], []
    for b in range(len(u)):
        t = time.perf_counter()
        served = retriever.topk(u[b], K, seen[b])
        times.append((time.perf_counter() - t) * 1e3)
        exact = exact_topk(u[b], items, K, tau=tau, interest_agg=agg, exclude=seen[b])
        overlaps.append(overlap_at_k(served, exact))
        if targets is not None:
            hits.append(float(targets[b] in served))
            exact_hits.append(float(targets[b] in exact))
    label = "exact" if cfg.kind == "exact" else f"hnsw ef={cfg.ef_search} cand={cfg.candidates}"
    record("muser_retrieval", f"{catalogue} N={len(items)} {label} per request", times, "ms")
    med, p20, p80 = quantiles(times)
    return {
        "catalogue": catalogue,
        "items": len(items),
        "index": cfg.kind,
        "ef_search": cfg.ef_search if cfg.kind == "hnsw" else "-",
        "candidates": cfg.candidates,
        "build_s": round(build_s, 2),
        "ms_per_request": round(med, 3),
        "ms_p20": round(p20, 3),
        "ms_p80": round(p80, 3),
        "overlap@10": round(float(np.mean(overlaps)), 4),
        "recall@10": round(float(np.mean(hits)), 4) if targets is not None else "-",
        "exact_recall@10": round(float(np.mean(exact_hits)), 4) if targets is not None else "-",
    }


def sweep(catalogue: str, u, items, args, *, tau: float, agg: str, seen=None, targets=None) -> list[dict]:
    """Each index built once (timed), then every (ef_search, candidates) setting searched on it."""
    rows = []
    for kind, efs in (("exact", [None]), ("hnsw", args.ef_search)):
        t0 = time.perf_counter()
        retriever = InterestRetriever(items, IndexConfig(kind=kind), tau=tau, interest_agg=agg)
        build_s = time.perf_counter() - t0
        for ef in efs:
            for c in args.candidates:
                retriever.set_search(ef_search=ef, candidates=c)
                rows.append(serve(catalogue, u, retriever, build_s, seen=seen, targets=targets))
    return rows


def main(argv=None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arm", default="multi")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--user-fraction", type=float, default=0.1, help="the smoke profile's share of users")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--ef-search", type=int, nargs="+", default=[16, 64, 256])
    ap.add_argument("--candidates", type=int, nargs="+", default=[10, 50])
    ap.add_argument("--synthetic-items", type=int, default=200_000, help="0: skip the synthetic catalogue")
    ap.add_argument("--synthetic-users", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    import faiss

    faiss.omp_set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    u, items, seen, targets, cfg = movietweetings_case(args.arm, args.epochs, args.user_fraction, args.seed)
    rows = sweep("MovieTweetings", u, items, args, tau=cfg.tau, agg=cfg.interest_agg, seen=seen, targets=targets)
    if args.synthetic_items:
        su, sitems = synthetic_case(args.synthetic_items, items.shape[1], args.synthetic_users, u.shape[1], args.seed)
        rows += sweep("synthetic", su, sitems, args, tau=cfg.tau, agg=cfg.interest_agg)
    table = pd.DataFrame(rows)
    exact_ms = {
        cat: table[(table["catalogue"] == cat) & (table["index"] == "exact")]["ms_per_request"].iloc[0]
        for cat in table["catalogue"].unique()
    }
    table["vs_exact"] = [round(r.ms_per_request / exact_ms[r.catalogue], 3) for r in table.itertuples()]
    print(
        f"MuSeR served retrieval: arm {args.arm} ({u.shape[1]} interests, d={items.shape[1]}), {len(u)} test users "
        f"(MovieTweetings), one request at a time on {args.threads} thread(s); top-{K}, seen items excluded on "
        f"MovieTweetings; synthetic catalogue labelled synthetic"
    )
    print(table.to_string(index=False))
    return table


if __name__ == "__main__":
    main()
