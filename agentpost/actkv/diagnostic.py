"""The chapter's diagnostic: teacher-forced fidelity of compressed caches to FullKV on held-out tool traces.

For every trace, method and budget ratio ``rho``: ``B`` evictable entries per layer (:func:`budget_for`: under
actkv.md's reading ``B = rho * n`` with ``n`` the FullKV trace length and the protected prefix on top; under kvpress's
reading ``rho * n`` is the whole cache kept per head, prefix included), the trace is scored by
:func:`agentpost.actkv.engine.score_trace`, and compared token by token with the FullKV run of the same trace:

- ``nll_increase_nats``: mean over action tokens of NLL(method) - NLL(FullKV);
- ``top1_agreement``: fraction of action tokens whose top-1 prediction equals FullKV's;
- ``name_exact``: fraction of actions whose API-name tokens are all predicted correctly (teacher forced);
- ``peak_entries`` and ``peak_frac`` (peak cache entries per layer, and as a fraction of FullKV's);
- ``ms_per_token`` (forward time per fed token at the scoring chunk size) and ``overhead_frac``
  (observe + score + select + compact time over forward time).

A run is one seed: the seed draws its own sample of held-out traces (the model is the same trained checkpoint for
every seed), so items are nested in seeds; the declared comparisons are computed across seed runs
(``agentpost compare actkv``).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Sequence

import numpy as np
import torch

from agentpost.actkv.budget import ConfidenceBudget, round_half_up
from agentpost.actkv.engine import TraceResult, score_trace
from agentpost.actkv.policies import make_policy
from agentpost.actkv.regions import RoundLayout, detect_rounds, token_texts
from agentpost.data.tool_traces import build_traces, tokenize_trace
from agentpost.registry import Registry

BASELINES = ("streamingllm", "h2o", "snapkv", "rkv")
METHODS = ("fullkv",) + BASELINES + ("actkv",)
#: Extra arms of the grid: a baseline under another reading the spec names (where the baseline's own papers leave the
#: head pooling or the normalisation open). ``h2o_normalised`` is kvpress's ``ObservedAttentionPress`` (normalised
#: accumulated attention, no forced recent window: ``recent_fraction=0`` overrides the H2O arm's own recent window).
VARIANTS: Registry = Registry(
    "ActKV extra arm",
    {
        "h2o_normalised": ("h2o", {"normalise": True, "recent_fraction": 0.0}),
        "snapkv_query_head": ("snapkv", {"head_mode": "query_head"}),
    },
)


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


def diag_trace(
    trace_id: str,
    ids: Sequence[int],
    tokenizer,
    prefix_len: int,
    round_spans: Sequence[tuple[int, int]],
    *,
    name_mask: Sequence[bool] = (),
    generated_mask: Sequence[bool] = (),
    delimiters: str = "qwen",
    boundary: str = "after_observation",
    observation_close: str = "</tool_response>",
) -> DiagTrace:
    """Action mask and region starts from the streaming detector on the decoded tokens; rounds from
    ``round_spans``; ``generated_mask``: the reasoning/action tokens (where Algorithm 2 records confidence; empty =
    every token after the prefix); compression points before each round after the first (``round_start``) or
    right after that round's observation closes (``after_observation``, our reading of a round boundary,
    which the paper leaves open)."""
    if boundary not in ("round_start", "after_observation"):
        raise ValueError(f"boundary must be 'round_start' or 'after_observation', got {boundary!r}")
    texts = token_texts(ids, tokenizer)
    det = detect_rounds(texts, prefix_len, delimiters)
    layout = RoundLayout(
        prefix_len,
        tuple(map(tuple, round_spans)),
        det.action_mask,
        det.region_starts,
        tuple(bool(x) for x in generated_mask),
    )
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


def load_heldout_traces(
    tokenizer,
    *,
    split: str = "test",
    n_traces: int = 4,
    seed: int = 0,
    rounds: int = 4,
    distractors: int = 2,
    max_doc_chars: int = 300,
    boundary: str = "after_observation",
) -> list[DiagTrace]:
    """``n_traces`` held-out traces drawn by ``seed`` (:mod:`agentpost.data.tool_traces`: synthetic trace format over
    real StableToolBench API docs; ``seed`` orders the split's queries and draws the distractors). Their query ids
    are the item ids; they must be distinct, so ``n_traces`` may not exceed the split's queries."""
    traces = build_traces(
        split, n_traces=n_traces, rounds=rounds, distractors=distractors, max_doc_chars=max_doc_chars, seed=seed
    )
    ids = [tr.query_id for tr in traces]
    if len(traces) < n_traces or len(set(ids)) < len(ids):
        raise ValueError(f"split {split!r} has fewer than n_traces={n_traces} distinct queries")
    out = []
    for tr in traces:
        tt = tokenize_trace(tr, tokenizer)
        out.append(
            diag_trace(
                tr.query_id,
                tt.input_ids,
                tokenizer,
                tt.prefix_len,
                tt.round_spans,
                name_mask=tt.name_mask,
                generated_mask=tt.generated_mask,
                boundary=boundary,
            )
        )
    return out


#: How a budget ratio becomes B: ``evictable`` (actkv.md "Defaults": ratio x FullKV length evictable entries, the
#: protected prefix on top) or ``total`` (kvpress: ratio x FullKV length is everything kept per head, the prefix
#: with StreamingLLM's sinks and every forced window inside it).
BUDGET_READINGS = ("evictable", "total")


def budget_for(trace: DiagTrace, ratio: float, reading: str = "evictable") -> int:
    """``B``, the evictable entries each layer keeps per head after a compression (:data:`BUDGET_READINGS`).

    The ratio is read as the decimal it prints as (``0.1`` is 1/10), times ``n`` = the FullKV trace length, rounded
    half up. Under ``total`` the prefix counts against the budget; a ratio that cannot even hold the protected
    prefix is refused with a ``ValueError`` naming the trace."""
    if not 0.0 < ratio <= 1.0:
        raise ValueError(f"budget ratio must be in (0, 1], got {ratio}")
    if reading not in BUDGET_READINGS:
        raise ValueError(f"budget_reading must be one of {BUDGET_READINGS}, got {reading!r}")
    kept = round_half_up(Fraction(str(ratio)) * len(trace))
    if reading == "evictable":
        return max(1, kept)
    prefix = trace.layout.prefix_len
    if kept <= prefix:
        raise ValueError(
            f"budget_reading='total': ratio {ratio} of trace {trace.trace_id} ({len(trace)} tokens) "
            f"keeps {kept} entries per head, no more than its protected prefix ({prefix}); raise the "
            f"ratio or use budget_reading='evictable'"
        )
    return kept - prefix


def budget_terms(trace: DiagTrace, ratio: float, reading: str = "evictable") -> dict:
    """One budget stated three ways: ``B`` (evictable entries per head), ``total_per_head`` (prefix + B: every
    entry a head keeps right after a compression) and ``kvpress_compression_ratio`` (the fraction kvpress's
    ``compression_ratio`` would remove from the FullKV trace to keep that many: 1 - total / n)."""
    b = budget_for(trace, ratio, reading)
    total = trace.layout.prefix_len + b
    return {
        "trace": trace.trace_id,
        "ratio": ratio,
        "reading": reading,
        "n_tokens": len(trace),
        "prefix": trace.layout.prefix_len,
        "B": b,
        "total_per_head": total,
        "kvpress_compression_ratio": 1.0 - total / len(trace),
    }


def run_method(
    model,
    trace: DiagTrace,
    method: str,
    ratio: float | None,
    *,
    chunk: int = 32,
    policy_kwargs: dict | None = None,
    adaptive_budget: bool = False,
    variant_kwargs: dict | None = None,
    budget_reading: str = "evictable",
) -> TraceResult:
    """Score one trace with one method (``ratio=None`` only for FullKV); ``policy_kwargs[method]`` then
    ``variant_kwargs`` configure the policy."""
    budget = None if method == "fullkv" else budget_for(trace, ratio, budget_reading)
    rule = ConfidenceBudget(budget=budget) if adaptive_budget and budget is not None else None
    policy = make_policy(method, **{**(policy_kwargs or {}).get(method, {}), **(variant_kwargs or {})})
    return score_trace(
        model,
        trace.ids,
        trace.layout,
        policy,
        budget,
        chunk=chunk,
        budget_rule=rule,
        compress_points=trace.compress_points,
    )


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


def run_grid(
    model,
    traces: Sequence[DiagTrace],
    *,
    methods: Sequence[str] = METHODS,
    ratios: Sequence[float] = (0.05, 0.1, 0.2, 0.25, 0.3),
    chunk: int = 32,
    policy_kwargs: dict | None = None,
    adaptive_budget: bool = True,
    threads: int = 1,
    variants: dict[str, tuple[str, dict]] | None = None,
    budget_reading: str = "evictable",
):
    """Long table (pandas) with one row per (trace, method, ratio): the :func:`fidelity` metrics.

    With ``adaptive_budget`` an extra arm ``actkv+budget`` runs ActKV with Algorithm 2 starting from the same B;
    ``variants`` (``{arm: (method, kwargs)}``, e.g. :data:`VARIANTS`) adds one arm per other reading. Every
    budget is checked (:func:`budget_for`) before any trace is scored."""
    import pandas as pd

    for tr in traces:
        for ratio in ratios:
            budget_for(tr, ratio, budget_reading)
    torch.set_num_threads(threads)
    rows = []
    for tr in traces:
        ref = run_method(model, tr, "fullkv", None, chunk=chunk)
        for ratio in ratios:
            arms = [(m, m, False, None) for m in methods if m != "fullkv"]
            if adaptive_budget and "actkv" in methods:
                arms.append(("actkv+budget", "actkv", True, None))
            arms += [(arm, m, False, kw) for arm, (m, kw) in (variants or {}).items()]
            for arm, method, adaptive, kw in arms:
                res = run_method(
                    model,
                    tr,
                    method,
                    ratio,
                    chunk=chunk,
                    policy_kwargs=policy_kwargs,
                    adaptive_budget=adaptive,
                    variant_kwargs=kw,
                    budget_reading=budget_reading,
                )
                rows.append(
                    {"trace": tr.trace_id, "method": arm, "ratio": ratio, "n_tokens": len(tr), **fidelity(res, ref, tr)}
                )
            rows.append(
                {
                    "trace": tr.trace_id,
                    "method": "fullkv",
                    "ratio": ratio,
                    "n_tokens": len(tr),
                    **fidelity(ref, ref, tr),
                }
            )
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
    from agentpost.models.hub import load_hub_model

    # HubModelUnavailable (a RuntimeError) says what to do where the weights are missing
    tok, model = load_hub_model(name, dtype=torch_dtype, attn_implementation="eager")
    return model.to(device).eval(), tok, name


def fidelity_table(df):
    """Mean of every metric per (method, ratio) over this run's traces."""
    cols = [
        c
        for c in (
            "nll_increase_nats",
            "top1_agreement",
            "name_exact",
            "peak_frac",
            "peak_within_bound",
            "ms_per_token",
            "overhead_frac",
            "final_budget",
        )
        if c in df.columns
    ]
    return df.groupby(["method", "ratio"], sort=False)[cols].mean().reset_index()


def per_item(df, ratio: float, metric: str) -> dict[str, dict[str, float]]:
    """``{arm: {trace id: metric}}`` at ``ratio`` for every arm but FullKV (the reference), for
    :func:`agentpost.record.outcomes.record_outcomes`."""
    sub = df[(df.ratio == ratio) & (df.method != "fullkv")]
    return {arm: dict(zip(g.trace, g[metric].astype(float))) for arm, g in sub.groupby("method", sort=True)}


def decode_profile(
    model,
    trace: DiagTrace,
    ratio: float,
    *,
    methods: Sequence[str] = ("fullkv", "actkv"),
    repeats: int = 3,
    policy_kwargs: dict | None = None,
    budget_reading: str = "evictable",
) -> dict:
    """Decode ``trace`` one token per step (teacher forced, so every method sees the same tokens) and report, per
    method: per-round peak entries vs the bound, per-round decode ms/token and overhead fraction (medians over
    ``repeats``), the overall decode ms/token, and ratios against FullKV measured in the same call."""
    import statistics

    budget = budget_for(trace, ratio, budget_reading)
    out: dict = {
        "n_tokens": len(trace),
        "prefix_len": trace.layout.prefix_len,
        "budget": budget,
        "ratio": ratio,
        "methods": {},
    }
    for method in methods:
        runs = [
            run_method(
                model,
                trace,
                method,
                None if method == "fullkv" else ratio,
                chunk=1,
                policy_kwargs=policy_kwargs,
                budget_reading=budget_reading,
            )
            for _ in range(repeats)
        ]
        st = [r.stats for r in runs]
        rows = []
        for r, peak, bound in round_bounds(runs[0], trace):  # round r: between compression boundaries r, r+1
            dec = statistics.median(s.decode_s[r] for s in st)
            ovh = statistics.median(s.overhead_s.get(r, 0.0) for s in st)
            rows.append(
                {
                    "round": r,
                    "tokens": st[0].tokens[r],
                    "peak_entries": peak,
                    "bound": bound,
                    "decode_ms_per_token": 1e3 * dec / st[0].tokens[r],
                    "overhead_frac": ovh / dec,
                }
            )
        out["methods"][method] = {
            "per_round": rows,
            "decode_ms_per_token": statistics.median(r.decode_ms_per_token() for r in runs),
            "peak_entries": runs[0].peak_entries,
            "max_round_overhead_frac": max(x["overhead_frac"] for x in rows),
            "peak_within_bound": all(x["peak_entries"] <= x["bound"] for x in rows),
        }
    if "fullkv" in out["methods"]:
        full = out["methods"]["fullkv"]
        for m in out["methods"].values():
            m["decode_ratio_vs_fullkv"] = m["decode_ms_per_token"] / full["decode_ms_per_token"]
            m["peak_frac_vs_fullkv"] = m["peak_entries"] / full["peak_entries"]
    return out
