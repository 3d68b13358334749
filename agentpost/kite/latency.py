"""Prefill and per-token decode latency of the SST and the dense baselines, measured in one run.

Timing is process CPU time (``time.process_time``) on CPU, so that other processes on a shared machine do not
inflate it (with one thread it is the compute time of the measured call), and CUDA events on a GPU; every number is the median of
``repeats`` runs (p20/p80 kept), and ratios are taken against the dense matched-FLOPs model measured in the same
run. Weights are random: latency does not depend on them. Achieved GFLOP/s (analytic FLOPs / median time) shows
whether a shape is compute-bound: compute-bound shapes run at a roughly constant rate, so time ratios track FLOP
ratios; launch- or overhead-bound shapes run far below that rate.
"""

from __future__ import annotations

import time

import numpy as np
import torch

from agentpost.kite.flops import decode_flops, prefill_flops
from agentpost.kite.model import build

LATENCY_ARMS = ("sst", "dense_flops", "dense_kv")


def _timer(device: torch.device):
    """A function ``time_ms(fn) -> float`` for ``device`` (CUDA events on a GPU, process CPU time on CPU)."""
    if device.type == "cuda":

        def time_ms(fn) -> float:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            return float(start.elapsed_time(end))
    else:

        def time_ms(fn) -> float:
            t0 = time.process_time()
            fn()
            return (time.process_time() - t0) * 1e3

    return time_ms


def _stats(samples: list[float]) -> dict:
    a = np.asarray(samples)
    return {"median": float(np.median(a)), "p20": float(np.quantile(a, 0.2)), "p80": float(np.quantile(a, 0.8))}


@torch.no_grad()
def measure(
    *,
    prompt_lengths: list[int],
    d_model: int,
    n_heads: int,
    d_ff: int,
    n_prefill: int = 2,
    n_decode: int = 2,
    vocab_size: int = 4096,
    decode_tokens: int = 8,
    repeats: int = 5,
    warmup: int = 1,
    device: str = "cpu",
    dtype: str = "float32",
    threads: int | None = 1,
    seed: int = 0,
    arms: tuple[str, ...] = LATENCY_ARMS,
) -> list[dict]:
    """One row per (arm, prompt length): prefill ms and decode ms/token (median, p20, p80), analytic FLOPs,
    achieved GFLOP/s. Arms are interleaved within each repeat so that drift in machine load hits them alike."""
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' was requested but torch sees no CUDA device")
    if dtype not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"dtype must be float32, bfloat16 or float16, got {dtype!r}")
    if threads is not None and dev.type == "cpu":
        torch.set_num_threads(threads)
    torch.manual_seed(seed)
    kw = dict(
        vocab_size=vocab_size, d_model=d_model, n_heads=n_heads, n_prefill=n_prefill, n_decode=n_decode, d_ff=d_ff
    )
    models = {arm: build(arm, **kw).to(dev, getattr(torch, dtype)).eval() for arm in arms}
    time_ms = _timer(dev)
    rows = []
    for prompt in prompt_lengths:
        tokens = torch.randint(0, vocab_size, (1, prompt + decode_tokens), device=dev)
        prefill_s = {a: [] for a in arms}
        decode_s = {a: [] for a in arms}
        for rep in range(warmup + repeats):
            for arm, model in models.items():
                out = {}
                ms = time_ms(lambda: out.update(c=model.prefill(tokens[:, :prompt], prompt + decode_tokens)[1]))
                steps = []
                for t in range(prompt, prompt + decode_tokens):
                    steps.append(time_ms(lambda: model.decode_step(tokens[:, t : t + 1], out["c"])))
                if rep >= warmup:
                    prefill_s[arm].append(ms)
                    decode_s[arm].append(float(np.median(steps)))
        for arm, model in models.items():
            p, d = _stats(prefill_s[arm]), _stats(decode_s[arm])
            pf = prefill_flops(model.cfg, prompt)
            df = decode_flops(model.cfg, prompt + decode_tokens // 2)
            rows.append(
                {
                    "arm": arm,
                    "prompt": prompt,
                    "d_model": d_model,
                    "prefill_ms": p["median"],
                    "prefill_ms_p20": p["p20"],
                    "prefill_ms_p80": p["p80"],
                    "decode_ms_per_token": d["median"],
                    "decode_ms_p20": d["p20"],
                    "decode_ms_p80": d["p80"],
                    "prefill_gflop": pf / 1e9,
                    "decode_mflop_per_token": df / 1e6,
                    "prefill_gflops_per_s": pf / 1e6 / p["median"],
                    "decode_gflops_per_s": df / 1e6 / d["median"],
                }
            )
    return rows


def ratios(rows: list[dict], baseline: str = "dense_flops"):
    """Per (arm, prompt): time ratios against ``baseline`` from the same run, next to the analytic FLOP ratios."""
    import pandas as pd

    df = pd.DataFrame(rows)
    base = df[df.arm == baseline].set_index("prompt")
    out = df[df.arm != baseline].copy()
    out["prefill_time_ratio"] = out.prefill_ms.values / base.loc[out.prompt, "prefill_ms"].values
    out["prefill_flop_ratio"] = out.prefill_gflop.values / base.loc[out.prompt, "prefill_gflop"].values
    out["decode_time_ratio"] = out.decode_ms_per_token.values / base.loc[out.prompt, "decode_ms_per_token"].values
    out["decode_flop_ratio"] = out.decode_mflop_per_token.values / base.loc[out.prompt, "decode_mflop_per_token"].values
    return out[
        ["arm", "prompt", "prefill_time_ratio", "prefill_flop_ratio", "decode_time_ratio", "decode_flop_ratio"]
    ].reset_index(drop=True)


def advantage_starts(rows: list[dict], arm: str = "sst", baseline: str = "dense_flops") -> int | None:
    """Smallest prompt length from which ``arm``'s prefill is faster than ``baseline``'s beyond the run-to-run
    spread (its p80 below the baseline's p20) at that and every longer prompt; None if never."""
    by = {(r["arm"], r["prompt"]): r for r in rows}
    prompts = sorted({r["prompt"] for r in rows})
    wins = [by[(arm, p)]["prefill_ms_p80"] < by[(baseline, p)]["prefill_ms_p20"] for p in prompts]
    for i, p in enumerate(prompts):
        if all(wins[i:]):
            return p
    return None
