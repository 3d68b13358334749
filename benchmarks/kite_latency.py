"""KITE / SST prefill and per-token decode latency vs dense baselines, standalone (writes an optional receipt).

Measures, in one run and for every prompt length, the SST (2+2), the dense model of equal total depth (matched
FLOPs) and the dense model with the Prefiller's depth (matched KV): prefill ms and decode ms/token (median of
``--repeats``, p20/p80), ratios against the matched-FLOPs dense model, analytic FLOP ratios, and achieved GFLOP/s
at the main width and at a small width (compute-bound shapes run at a similar rate across prompts and arms;
overhead-bound ones far below it).

    python benchmarks/kite_latency.py                                   # CPU, d=256, prompts 64..8192
    python benchmarks/kite_latency.py --profile a100 --receipt out.json # the a100 profile's latency settings
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from pathlib import Path

import pandas as pd
import yaml
from _table import emit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from agentpost.record.environment import device_info, package_versions  # noqa: E402
from agentpost.kite.latency import advantage_starts, measure, ratios  # noqa: E402


def _profile(name: str) -> dict:
    params = yaml.safe_load((ROOT / "params" / "kite" / f"{name}.yaml").read_text())["parameters"]
    return {
        "device": params["latency_device"],
        "dtype": params["latency_dtype"],
        "d_model": params["latency_d_model"],
        "n_heads": params["latency_n_heads"],
        "prompts": params["latency_prompts"],
        "repeats": params["latency_repeats"],
        "decode_tokens": params["latency_decode_tokens"],
        "small_d_model": params["latency_small_d_model"],
    }


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", help="take the latency settings from params/kite/<profile>.yaml")
    ap.add_argument("--prompts", type=int, nargs="+", default=[64, 128, 256, 512, 1024, 2048, 4096, 8192])
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--n-heads", type=int, default=4)
    ap.add_argument("--small-d-model", type=int, default=32, help="a width expected to be overhead-bound")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--decode-tokens", type=int, default=8)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads (ignored on CUDA)")
    ap.add_argument("--receipt", type=Path, help="write a JSON receipt here")
    args = ap.parse_args(argv)
    cfg = {
        "device": args.device,
        "dtype": args.dtype,
        "d_model": args.d_model,
        "n_heads": args.n_heads,
        "prompts": args.prompts,
        "repeats": args.repeats,
        "decode_tokens": args.decode_tokens,
        "small_d_model": args.small_d_model,
    }
    if args.profile:
        cfg.update(_profile(args.profile))
    common = dict(
        repeats=cfg["repeats"],
        decode_tokens=cfg["decode_tokens"],
        device=cfg["device"],
        dtype=cfg["dtype"],
        threads=args.threads,
    )
    start = time.time()
    rows = measure(
        prompt_lengths=cfg["prompts"], d_model=cfg["d_model"], n_heads=cfg["n_heads"], d_ff=4 * cfg["d_model"], **common
    )
    small_prompts = sorted({min(cfg["prompts"]), max(cfg["prompts"])})
    small = measure(
        prompt_lengths=small_prompts, d_model=cfg["small_d_model"], n_heads=2, d_ff=4 * cfg["small_d_model"], **common
    )
    table = ratios(rows)
    starts = advantage_starts(rows)
    pd.set_option("display.width", 200)
    cols = [
        "arm",
        "prompt",
        "d_model",
        "prefill_ms",
        "prefill_ms_p20",
        "prefill_ms_p80",
        "decode_ms_per_token",
        "prefill_gflops_per_s",
        "decode_gflops_per_s",
    ]
    print(pd.DataFrame(rows + small)[cols].to_string(index=False, float_format=lambda x: f"{x:.4g}"))
    print("\nratios vs dense_flops (same run):")
    print(table.to_string(index=False, float_format=lambda x: f"{x:.3f}"))
    print(f"\nSST prefill advantage over dense_flops starts at prompt length: {starts}")
    for r in rows + small:
        case = f"{r['arm']} prompt={r['prompt']} d={r['d_model']}"
        emit(
            "kite_latency",
            f"{case} prefill",
            r["prefill_ms"],
            r["prefill_ms_p20"],
            r["prefill_ms_p80"],
            "ms",
            cfg["device"],
        )
        emit(
            "kite_latency",
            f"{case} decode/token",
            r["decode_ms_per_token"],
            r["decode_ms_p20"],
            r["decode_ms_p80"],
            "ms",
            cfg["device"],
        )
    receipt = {
        "schema": 1,
        "benchmark": "kite_latency",
        "paper": "kite",
        "settings": cfg,
        "threads": args.threads,
        "device": device_info(cfg["device"]),
        "packages": package_versions(),
        "timing": "cuda events" if cfg["device"] == "cuda" else "process cpu time",
        "started": dt.datetime.fromtimestamp(start, dt.timezone.utc).isoformat(timespec="seconds"),
        "wall_s": round(time.time() - start, 1),
        "rows": rows,
        "small_width_rows": small,
        "ratios": table.to_dict(orient="records"),
        "sst_prefill_advantage_starts_at": starts,
    }
    if args.receipt:
        args.receipt.parent.mkdir(parents=True, exist_ok=True)
        args.receipt.write_text(json.dumps(receipt, indent=2) + "\n")
        print(f"receipt: {args.receipt}")
    return receipt


if __name__ == "__main__":
    main()
