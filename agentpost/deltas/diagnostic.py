"""The DeltaS diagnostics: recall on the synthetic stream (mechanism level) and next-token NLL of the hybrid LM on
WikiText-2 test streams under a KV budget (:mod:`agentpost.deltas.stream`), with the per-item outcomes a run
records (:func:`per_item`) and the headroom every LM comparison is read against (:func:`headroom`,
:func:`gap_recovered`). A run is one seed; the declared comparisons are computed across seed runs
(``agentpost compare deltas``)."""

from __future__ import annotations

import pandas as pd
from tqdm.auto import tqdm

from agentpost.deltas.recall import RecallStreamSpec, make_stream, recall_after_retention

STREAMING_POLICIES = ("drift", "recency", "random", "key_norm")
REFERENCE_POLICIES = ("attention",)


def recall_grid(
    spec: RecallStreamSpec,
    seeds,
    budget_fractions,
    policies,
    *,
    buckets: int = 4,
    retention: str = "bucketed",
    progress: bool = True,
) -> pd.DataFrame:
    """One row per (stream seed, budget fraction, policy, fact): recalled 0/1 and the budget in tokens."""
    rows = []
    for seed in tqdm(list(seeds), desc="recall streams", disable=not progress):
        stream = make_stream(spec, seed)
        n = len(stream.keys)
        for frac in budget_fractions:
            budget = int(round(frac * n))
            for policy in policies:
                kw = {"buckets": buckets, "retention": retention} if policy == "drift" else {}
                hits = recall_after_retention(stream, spec, policy, budget, seed, **kw)
                rows += [
                    {
                        "seed": seed,
                        "budget_frac": frac,
                        "budget_tokens": budget,
                        "policy": policy,
                        "fact": i,
                        "recalled": float(h),
                    }
                    for i, h in enumerate(hits.tolist())
                ]
    return pd.DataFrame(rows)


def drift_separation(spec: RecallStreamSpec, seeds) -> pd.DataFrame:
    """Per seed: median drift of fact chunks and of repeated distractor chunks (the first chunk, read from a zero
    state, is left out: its drift is ``||dS|| / eps``)."""
    rows = []
    for seed in seeds:
        s = make_stream(spec, seed)
        later = slice(1, None)
        fact, drift = s.is_fact[later], s.drift[later]
        rows.append(
            {
                "seed": seed,
                "fact_drift_median": float(drift[fact].median()),
                "distractor_drift_median": float(drift[~fact].median()),
            }
        )
    return pd.DataFrame(rows)


def per_item(frame: pd.DataFrame, value: str, item: str | list[str]) -> dict[str, dict[str, float]]:
    """``{policy: {item id: value}}`` for :func:`agentpost.record.outcomes.record_outcomes`; the item id joins the
    ``item`` column(s) with ``:`` (e.g. ``["seed", "fact"]`` -> ``"42000:3"``)."""
    cols = [item] if isinstance(item, str) else list(item)
    ids = frame[cols].astype(str).agg(":".join, axis=1)
    return {policy: dict(zip(ids[g.index], g[value].astype(float))) for policy, g in frame.groupby("policy", sort=True)}


def headroom(nll: pd.DataFrame) -> pd.DataFrame:
    """Per stream: the reference cuts' NLL (full, sinks_recent, no_kv) and the headroom
    NLL(sinks_recent) - NLL(full), the most any retention policy can win back on that stream."""
    refs = nll[nll.policy.isin(["full", "sinks_recent", "no_kv"])].pivot(index="stream", columns="policy", values="nll")
    return refs.assign(headroom=refs.sinks_recent - refs.full).reset_index()


def gap_recovered(nll: pd.DataFrame, policies) -> pd.DataFrame:
    """Share of the headroom each policy wins back, per budget: (mean NLL(sinks_recent) - mean NLL(policy)) /
    (mean NLL(sinks_recent) - mean NLL(full)) over the run's streams (a ratio of means: one stream's headroom can be
    near zero). 1 = as good as the full cache, 0 = no better than evicting the whole middle. Undefined (NaN) when
    the mean headroom is not positive: evicting the whole middle was then no worse than keeping it, and there is no
    gap to recover."""
    room = headroom(nll)
    worst, best = room.sinks_recent.mean(), room.full.mean()
    cut = nll[nll.policy.isin(list(policies))]
    table = cut.groupby(["budget_frac", "policy"]).nll.mean().unstack()[list(policies)]
    gap = worst - best
    return ((worst - table) / gap if gap > 0 else table * float("nan")).reset_index()
