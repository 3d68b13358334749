"""The DeltaS diagnostics and their paired verdicts: recall on the synthetic stream (mechanism level) and next-token
NLL of the hybrid LM on WikiText-2 test streams under a KV budget (:mod:`agentpost.deltas.stream`)."""

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
    b = per_seed_values(sub, method, "recalled", "fact")
    return {base: compare(per_seed_values(sub, base, "recalled", "fact"), b, meta_a=arm_meta(spec, base), meta_b=arm_meta(spec, method),
                          higher_is_better=True, min_effect=min_effect, shared_items=False, name_a=base, name_b=method)
            for base in baselines}


def per_seed_values(frame: pd.DataFrame, policy: str, value: str, item: str) -> dict:
    """``{seed: [value of each item, in item order]}`` of one policy's rows."""
    p = frame[frame.policy == policy].sort_values(["seed", item])
    return {int(s): g[value].tolist() for s, g in p.groupby("seed")}


def lm_arm_meta(checkpoint: str, data_version: str) -> ArmMeta:
    """What every LM arm shares: the fixed trained hybrid model and the same test streams; no training, no
    generation (teacher-forced NLL)."""
    return ArmMeta(checkpoint=checkpoint, data_version=data_version, updates=0, max_new_tokens=None)


def lm_paired_vs_baselines(nll: pd.DataFrame, budget_frac: float, meta: ArmMeta, *, min_effect: float,
                           baselines=("recency", "random", "key_norm"), method: str = "drift") -> dict:
    """Drift (arm b) against each baseline (arm a) on per-stream continuation NLL at one budget; streams are the
    items of a seed (each seed draws its own, ``shared_items=False``); lower NLL is better."""
    sub = nll[nll.budget_frac == budget_frac]
    b = per_seed_values(sub, method, "nll", "stream")
    return {base: compare(per_seed_values(sub, base, "nll", "stream"), b, meta_a=meta, meta_b=meta,
                          higher_is_better=False, min_effect=min_effect, shared_items=False, name_a=base, name_b=method)
            for base in baselines}


def overlap_paired(overlap: pd.DataFrame, budget_frac: float, meta: ArmMeta, *, min_effect: float,
                   method: str = "drift", chance: str = "random"):
    """Does ``method`` keep the entries the attention reference keeps more often than ``chance`` does? Per-stream
    share of the reference's kept middle entries that each policy keeps, ``method`` (b) against ``chance`` (a)."""
    sub = overlap[overlap.budget_frac == budget_frac]
    return compare(per_seed_values(sub, chance, "overlap", "stream"), per_seed_values(sub, method, "overlap", "stream"),
                   meta_a=meta, meta_b=meta, higher_is_better=True, min_effect=min_effect, shared_items=False,
                   name_a=chance, name_b=method)
