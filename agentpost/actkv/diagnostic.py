"""The chapter's diagnostic: teacher-forced fidelity of compressed caches to FullKV on held-out tool traces.

For every trace, method and budget ratio ``rho``: ``B = round(rho * n)`` evictable entries per layer (``n`` = FullKV
trace length, protocol of actkv.md "Defaults"), the trace is scored by :func:`agentpost.actkv.engine.score_trace`,
and compared token by token with the FullKV run of the same trace:

- ``nll_increase_nats``: mean over action tokens of NLL(method) - NLL(FullKV);
- ``top1_agreement``: fraction of action tokens whose top-1 prediction equals FullKV's;
- ``name_exact``: fraction of actions whose API-name tokens are all predicted correctly (teacher forced);
- ``peak_entries`` and ``peak_frac`` (peak cache entries per layer, and as a fraction of FullKV's);
- ``ms_per_token`` (forward time per fed token at the scoring chunk size) and ``overhead_frac``
  (observe + score + select + compact time over forward time).

Seeds are three disjoint samples of held-out traces (the model is the same trained checkpoint for all seeds).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import torch

from agentpost.actkv.budget import ConfidenceBudget
from agentpost.actkv.engine import TraceResult, score_trace
from agentpost.actkv.policies import make_policy
from agentpost.actkv.regions import RoundLayout, detect_rounds, token_texts
from agentpost.data.tool_traces import build_traces, tokenize_trace
from agentpost.stats import ArmMeta, PairedResult, compare

BASELINES = ("streamingllm", "h2o", "snapkv", "rkv")
METHODS = ("fullkv",) + BASELINES + ("actkv",)
#: Extra arms of the grid: a baseline under another reading the spec names (kv-baselines.md ambiguities 1, 3).
VARIANTS: dict[str, tuple[str, dict]] = {
    "h2o_normalised": ("h2o", {"normalise": True}),
    "snapkv_query_head": ("snapkv", {"head_mode": "query_head"}),
}


@dataclass(frozen=True)
class DiagTrace:
    """One tokenized trace with its round layout, compression points and (optionally) API-name tokens."""

    trace_id: str
    ids: tuple[int, ...]
    layout: RoundLayout
    compress_points: tuple[int, ...]
    name_mask: tuple[bool, ...] = ()

    def __len__(self) -> int:
        return len(self.ids)


def diag_trace(trace_id: str, ids: Sequence[int], tokenizer, prefix_len: int, round_spans: Sequence[tuple[int, int]],
               *, name_mask: Sequence[bool] = (), generated_mask: Sequence[bool] = (), delimiters: str = "qwen",
               boundary: str = "after_observation", observation_close: str = "</tool_response>") -> DiagTrace:
    """Action mask and region starts from the streaming detector on the decoded tokens; rounds from
    ``round_spans``; ``generated_mask``: the reasoning/action tokens (where Algorithm 2 records confidence; empty =
    every token after the prefix); compression points before each round after the first (``round_start``) or
    right after that round's observation closes (``after_observation``, the spec's reading of a round boundary,
    ambiguity 11)."""
    if boundary not in ("round_start", "after_observation"):
        raise ValueError(f"boundary must be 'round_start' or 'after_observation', got {boundary!r}")
    texts = token_texts(ids, tokenizer)
    det = detect_rounds(texts, prefix_len, delimiters)
    layout = RoundLayout(prefix_len, tuple(map(tuple, round_spans)), det.action_mask, det.region_starts,
                         tuple(bool(x) for x in generated_mask))
    points = []
    for a, b in layout.round_spans[1:]:
        p = a
        if boundary == "after_observation":
            acc = ""
            for t in range(a, b):
                acc += texts[t]
                if observation_close in acc:
                    p = t + 1
                    break
        points.append(p)
    return DiagTrace(trace_id, tuple(int(i) for i in ids), layout, tuple(points), tuple(bool(x) for x in name_mask))


def load_heldout_traces(tokenizer, *, split: str = "test", n_per_seed: int = 4, seeds: Sequence[int] = (42, 43, 44),
                        rounds: int = 4, distractors: int = 2, max_doc_chars: int = 300,
                        boundary: str = "after_observation") -> dict[int, list[DiagTrace]]:
    """Disjoint blocks of held-out traces, one block per seed (:mod:`agentpost.actkv.traces`: synthetic trace
    format over real StableToolBench API docs). Block ``i`` of one fixed ordering (``build_traces(seed=0)``)
    goes to ``seeds[i]``."""
    traces = build_traces(split, n_traces=n_per_seed * len(seeds), rounds=rounds, distractors=distractors,
                          max_doc_chars=max_doc_chars, seed=0)
    if len(traces) < n_per_seed * len(seeds):
        raise ValueError(f"split {split!r} gave {len(traces)} traces, need {n_per_seed * len(seeds)}")
    out = {}
    for i, seed in enumerate(seeds):
        block = []
        for tr in traces[i * n_per_seed : (i + 1) * n_per_seed]:
            tt = tokenize_trace(tr, tokenizer)
            block.append(diag_trace(tr.query_id, tt.input_ids, tokenizer, tt.prefix_len, tt.round_spans,
                                    name_mask=tt.name_mask, generated_mask=tt.generated_mask, boundary=boundary))
        out[seed] = block
    return out


def budget_for(trace: DiagTrace, ratio: float) -> int:
    """``B = round(ratio * n)`` with ``n`` the FullKV trace length."""
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"budget ratio must be in (0, 1], got {ratio}")
    return max(1, int(round(ratio * len(trace))))


def run_method(model, trace: DiagTrace, method: str, ratio: float | None, *, chunk: int = 32,
               policy_kwargs: dict | None = None, adaptive_budget: bool = False,
               variant_kwargs: dict | None = None) -> TraceResult:
    """Score one trace with one method (``ratio=None`` only for FullKV); ``policy_kwargs[method]`` then
    ``variant_kwargs`` configure the policy."""
    budget = None if method == "fullkv" else budget_for(trace, ratio)
    rule = ConfidenceBudget(budget=budget) if adaptive_budget and budget is not None else None
    policy = make_policy(method, **{**(policy_kwargs or {}).get(method, {}), **(variant_kwargs or {})})
    return score_trace(model, trace.ids, trace.layout, policy, budget, chunk=chunk, budget_rule=rule,
                       compress_points=trace.compress_points)


def round_bounds(res: TraceResult, trace: DiagTrace) -> list[tuple[int, int, int]]:
    """``(round, peak entries, bound)`` per round, bound = prefix + B + the round's length, where round ``r`` is the
    stretch between compression boundaries ``r`` and ``r + 1`` (FullKV: prefix + tokens so far)."""
    pts = [trace.layout.prefix_len, *trace.compress_points, len(trace)]
    out = []
    for r, peak in sorted(res.stats.peak_entries.items()):
        if r < 0:
            continue
        a, b = pts[r], pts[r + 1]
        budget = max(res.stats.budgets[:r] or [res.budget or 0])
        bound = b if res.budget is None else trace.layout.prefix_len + budget + (b - a)
        out.append((r, int(peak), int(bound)))
    return out


def fidelity(res: TraceResult, ref: TraceResult, trace: DiagTrace) -> dict:
    """Per-trace fidelity of ``res`` to the FullKV run ``ref`` (same trace)."""
    m = res.action_mask
    name_mask = trace.name_mask
    out = {
        "peak_within_bound": float(all(p <= bd for _, p, bd in round_bounds(res, trace))),
        "nll_increase_nats": float((-res.logprob[m] + ref.logprob[m]).mean()),
        "top1_agreement": float((res.top1[m] == ref.top1[m]).mean()),
        "peak_entries": int(res.peak_entries),
        "peak_frac": float(res.peak_entries / ref.peak_entries),
        "ms_per_token": res.decode_ms_per_token(),
        "overhead_frac": res.overhead_frac(),
        "final_budget": int(res.stats.budgets[-1]) if res.stats.budgets else (res.budget or 0),
    }
    if len(name_mask):
        correct = res.top1 == res.target_ids
        runs = _runs(np.asarray(name_mask, dtype=bool))
        out["name_exact"] = float(np.mean([correct[a:b].all() for a, b in runs])) if runs else float("nan")
    return out


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """Contiguous ``True`` runs ``[a, b)`` of a boolean mask."""
    edges = np.diff(np.concatenate([[0], mask.astype(int), [0]]))
    return list(zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)))


def run_grid(model, traces_by_seed: dict[int, list[DiagTrace]], *, methods: Sequence[str] = METHODS,
             ratios: Sequence[float] = (0.05, 0.1, 0.2, 0.25, 0.3), chunk: int = 32,
             policy_kwargs: dict | None = None, adaptive_budget: bool = True, threads: int = 1,
             variants: dict[str, tuple[str, dict]] | None = None):
    """Long table (pandas) with one row per (seed, trace, method, ratio): the :func:`fidelity` metrics.

    With ``adaptive_budget`` an extra arm ``actkv+budget`` runs ActKV with Algorithm 2 starting from the same B;
    ``variants`` (``{arm: (method, kwargs)}``, e.g. :data:`VARIANTS`) adds one arm per other reading."""
    import pandas as pd

    torch.set_num_threads(threads)
    rows = []
    for seed, traces in traces_by_seed.items():
        for tr in traces:
            ref = run_method(model, tr, "fullkv", None, chunk=chunk)
            for ratio in ratios:
                arms = [(m, m, False, None) for m in methods if m != "fullkv"]
                if adaptive_budget and "actkv" in methods:
                    arms.append(("actkv+budget", "actkv", True, None))
                arms += [(arm, m, False, kw) for arm, (m, kw) in (variants or {}).items()]
                for arm, method, adaptive, kw in arms:
                    res = run_method(model, tr, method, ratio, chunk=chunk, policy_kwargs=policy_kwargs,
                                     adaptive_budget=adaptive, variant_kwargs=kw)
                    rows.append({"seed": seed, "trace": tr.trace_id, "method": arm, "ratio": ratio,
                                 "n_tokens": len(tr), **fidelity(res, ref, tr)})
                rows.append({"seed": seed, "trace": tr.trace_id, "method": "fullkv", "ratio": ratio,
                             "n_tokens": len(tr), **fidelity(ref, ref, tr)})
    return pd.DataFrame(rows)


def load_diagnostic_model(name: str = "tool-lm", *, device: str = "cpu", dtype: str = "float32"):
    """``(model, tokenizer, checkpoint_label)`` in eager attention: the project's tool LM (``"tool-lm"``) or a
    Hugging Face hub model id (e.g. ``"Qwen/Qwen3-1.7B"``, the a100-hub profile; loaded through
    :mod:`agentpost.models.hub`). Raises ``RuntimeError`` naming what is missing."""
    torch_dtype = getattr(torch, dtype)
    if name == "tool-lm":
        try:
            from agentpost.models.lm import DEFAULT_DIR, load_tool_lm
        except ImportError as err:
            raise RuntimeError(f"the project's tool LM (agentpost.models.lm) is not available: {err}") from err
        try:
            model, tok = load_tool_lm(attn_implementation="eager", dtype=torch_dtype)
        except FileNotFoundError as err:
            raise RuntimeError(str(err)) from err
        return model.to(device), tok, f"tool-lm@{DEFAULT_DIR.name}"
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from agentpost.models.hub import require_hub_model

    path = require_hub_model(name)  # HubModelUnavailable (a RuntimeError) saying what to do where weights are missing
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="eager", dtype=torch_dtype)
    return model.to(device).eval(), tok, name


def fidelity_table(df):
    """Mean of every metric per (method, ratio) over seeds and traces."""
    cols = [c for c in ("nll_increase_nats", "top1_agreement", "name_exact", "peak_frac", "peak_within_bound",
                        "ms_per_token", "overhead_frac", "final_budget") if c in df.columns]
    return df.groupby(["method", "ratio"], sort=False)[cols].mean().reset_index()


def per_seed_values(df, method: str, ratio: float, metric: str) -> dict[int, list[float]]:
    """``{seed: [metric per trace, ordered by trace id]}`` for the paired protocol."""
    sub = df[(df.method == method) & (df.ratio == ratio)].sort_values(["seed", "trace"])
    return {int(s): g[metric].astype(float).tolist() for s, g in sub.groupby("seed")}


def paired_vs_baselines(df, *, ratio: float, arm_meta: Callable[[str], ArmMeta], metric: str = "nll_increase_nats",
                        higher_is_better: bool = False, min_effect: float, baselines: Sequence[str] = BASELINES,
                        method: str = "actkv") -> dict[str, PairedResult]:
    """ActKV (arm b) against each baseline (arm a) through :func:`agentpost.stats.compare`, one result per
    baseline; ``arm_meta(arm)`` builds each arm's own :class:`~agentpost.stats.ArmMeta`. Each seed scores its own
    disjoint block of traces (:func:`load_heldout_traces`), so ``shared_items=False``."""
    b = per_seed_values(df, method, ratio, metric)
    return {base: compare(per_seed_values(df, base, ratio, metric), b, meta_a=arm_meta(base), meta_b=arm_meta(method),
                          higher_is_better=higher_is_better, name_a=base, name_b=method, min_effect=min_effect,
                          shared_items=False)
            for base in baselines if base in set(df.method)}


def decode_profile(model, trace: DiagTrace, ratio: float, *, methods: Sequence[str] = ("fullkv", "actkv"),
                   repeats: int = 3, policy_kwargs: dict | None = None) -> dict:
    """Decode ``trace`` one token per step (teacher forced, so every method sees the same tokens) and report, per
    method: per-round peak entries vs the bound, per-round decode ms/token and overhead fraction (medians over
    ``repeats``), the overall decode ms/token, and ratios against FullKV measured in the same call."""
    import statistics

    budget = budget_for(trace, ratio)
    out: dict = {"n_tokens": len(trace), "prefix_len": trace.layout.prefix_len, "budget": budget, "ratio": ratio,
                 "methods": {}}
    for method in methods:
        runs = [run_method(model, trace, method, None if method == "fullkv" else ratio, chunk=1,
                           policy_kwargs=policy_kwargs) for _ in range(repeats)]
        st = [r.stats for r in runs]
        rows = []
        for r, peak, bound in round_bounds(runs[0], trace):  # round r: between compression boundaries r, r+1
            dec = statistics.median(s.decode_s[r] for s in st)
            ovh = statistics.median(s.overhead_s.get(r, 0.0) for s in st)
            rows.append({"round": r, "tokens": st[0].tokens[r], "peak_entries": peak, "bound": bound,
                         "decode_ms_per_token": 1e3 * dec / st[0].tokens[r], "overhead_frac": ovh / dec})
        out["methods"][method] = {"per_round": rows,
                                  "decode_ms_per_token": statistics.median(r.decode_ms_per_token() for r in runs),
                                  "peak_entries": runs[0].peak_entries,
                                  "max_round_overhead_frac": max(x["overhead_frac"] for x in rows),
                                  "peak_within_bound": all(x["peak_entries"] <= x["bound"] for x in rows)}
    if "fullkv" in out["methods"]:
        full = out["methods"]["fullkv"]
        for m in out["methods"].values():
            m["decode_ratio_vs_fullkv"] = m["decode_ms_per_token"] / full["decode_ms_per_token"]
            m["peak_frac_vs_fullkv"] = m["peak_entries"] / full["peak_entries"]
    return out
