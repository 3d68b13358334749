"""The DeltaS diagnostic on the synthetic recall stream: recall per policy and budget over seeds, paired verdicts."""

from __future__ import annotations

from dataclasses import asdict

import pandas as pd
from tqdm.auto import tqdm

from agentpost.deltas.recall import RecallStreamSpec, make_stream, recall_after_retention
from agentpost.stats import ArmMeta, compare

STREAMING_POLICIES = ("drift", "recency", "random", "key_norm")
REFERENCE_POLICIES = ("attention",)


def recall_grid(spec: RecallStreamSpec, seeds, budget_fractions, policies, *, buckets: int = 4,
                retention: str = "bucketed", progress: bool = True) -> pd.DataFrame:
    """One row per (seed, budget fraction, policy, fact): recalled 0/1 and the budget in tokens."""
    rows = []
    for seed in tqdm(list(seeds), desc="recall streams", disable=not progress):
        stream = make_stream(spec, seed)
        n = len(stream.keys)
        for frac in budget_fractions:
            budget = int(round(frac * n))
            for policy in policies:
                kw = {"buckets": buckets, "retention": retention} if policy == "drift" else {}
                hits = recall_after_retention(stream, spec, policy, budget, seed, **kw)
                rows += [{"seed": seed, "budget_frac": frac, "budget_tokens": budget, "policy": policy, "fact": i,
                          "recalled": float(h)} for i, h in enumerate(hits.tolist())]
    return pd.DataFrame(rows)


def drift_separation(spec: RecallStreamSpec, seeds) -> pd.DataFrame:
    """Per seed: median drift of fact chunks and of repeated distractor chunks (the first chunk, read from a zero
    state, is left out: its drift is ``||dS|| / eps``)."""
    rows = []
    for seed in seeds:
        s = make_stream(spec, seed)
        later = slice(1, None)
        fact, drift = s.is_fact[later], s.drift[later]
        rows.append({"seed": seed, "fact_drift_median": float(drift[fact].median()),
                     "distractor_drift_median": float(drift[~fact].median())})
    return pd.DataFrame(rows)


def arm_meta(spec: RecallStreamSpec, policy: str) -> ArmMeta:
    """What every arm shares: the same streams (one per seed, from ``spec``), no training, no generation."""
    return ArmMeta(checkpoint="none (random projections)", data_version=f"synthetic recall stream {asdict(spec)}",
                   updates=0, max_new_tokens=None)


def paired_vs_baselines(grid: pd.DataFrame, spec: RecallStreamSpec, budget_frac: float, *, min_effect: float,
                        baselines=("recency", "random", "key_norm"), method: str = "drift") -> dict:
    """Drift (arm b) against each streaming baseline (arm a) on per-fact recall at one budget; facts are items
    within a seed's own stream (``shared_items=False``); higher recall is better."""
    sub = grid[grid.budget_frac == budget_frac]

    def per_seed(policy):
        p = sub[sub.policy == policy].sort_values(["seed", "fact"])
        return {int(s): g.recalled.tolist() for s, g in p.groupby("seed")}

    b = per_seed(method)
    return {base: compare(per_seed(base), b, meta_a=arm_meta(spec, base), meta_b=arm_meta(spec, method),
                          higher_is_better=True, min_effect=min_effect, shared_items=False, name_a=base, name_b=method)
            for base in baselines}
