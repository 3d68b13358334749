"""What the drift signal costs: the chunked gated-delta forward with and without the per-chunk drift.

On a CUDA device the Triton kernel (``agentpost.kernels.deltas``) is timed with CUDA events at the given shapes:
median / p20 / p80 over ``--repeats`` of forward-with-drift and forward-without-drift, their ratio (the drift's
cost), and the achieved memory bandwidth (bytes of q, k, v, g, beta read and o written). On the CPU the kernel runs
only in the Triton interpreter, which says nothing about speed: there the benchmark times the torch chunked form
(``agentpost.deltas.rule.chunk_gated_delta``) with and without the drift, and checks the kernel against the
reference once on a small shape. On CUDA, where fla-core is installed (offline: carry its wheel, ``WHEELS=`` of
benchmarks/gpu_all.sh), its ``fla.ops.gated_delta_rule.chunk_gated_delta_rule`` (the same recurrence, no drift) is
timed on the same inputs as the reference point for speed; where it is missing or fails, the table says so (largest error of outputs and state, absolute; of the drift, relative). Prints a table; ``--receipt PATH`` writes it as JSON with the device facts.

    python benchmarks/deltas_kernel.py                       # CPU: torch chunked form, T = 1024
    python benchmarks/deltas_kernel.py --device cuda --seq-lens 8192,32768 --heads 16 --receipt out.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from _table import record

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _inputs(T, H, dk, dv, device, dtype, seed=0):
    import torch

    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(1, T, H, dk, generator=gen)
    k = torch.nn.functional.normalize(torch.randn(1, T, H, dk, generator=gen), dim=-1)
    v = torch.randn(1, T, H, dv, generator=gen)
    g = -torch.rand(1, T, H, generator=gen) * 0.1
    beta = torch.rand(1, T, H, generator=gen)
    return [x.to(device=device, dtype=dtype if x.dim() == 4 else torch.float32) for x in (q, k, v, g, beta)]


def _time(fn, repeats, device):
    import torch

    times = []
    for _ in range(repeats + 1):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append(1e3 * (time.perf_counter() - t0))
    return times[1:]  # the first call compiles / warms up


def _fla():
    """fla-core's chunked gated-delta forward, or (None, why not)."""
    try:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule
    except Exception as e:  # not installed, or it cannot import here (fla needs a GPU build of triton)
        return None, f"fla-core unavailable ({type(e).__name__}: {e})"
    return chunk_gated_delta_rule, ""


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--seq-lens", default="1024")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--chunk-size", type=int, default=64)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--receipt", type=Path)
    args = p.parse_args(argv)
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch

    from agentpost.deltas.rule import chunk_gated_delta
    from agentpost.evidence.environment import device_info, package_versions
    from agentpost.kernels.deltas import chunk_gated_delta_drift, chunk_gated_delta_drift_reference

    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: torch sees no CUDA device")
    dtype = getattr(torch, args.dtype)
    rows = []
    fla, fla_note = _fla() if args.device == "cuda" else (None, "fla-core: CUDA only")
    small = _inputs(70, 2, 32, 32, args.device, torch.float32, seed=1)
    got = chunk_gated_delta_drift(*small, chunk_size=16)
    ref = chunk_gated_delta_drift_reference(*small, chunk_size=16)
    max_err = max(float((a.float() - b.float()).abs().max()) for a, b in zip(got[:2], ref[:2]))
    drift_rel_err = float(((got[2] - ref[2]).abs() / ref[2].abs().clamp_min(1e-6)).max())
    for T in [int(x) for x in args.seq_lens.split(",")]:
        x = _inputs(T, args.heads, args.head_dim, args.head_dim, args.device, dtype)
        if args.device == "cuda":
            with_d = _time(lambda: chunk_gated_delta_drift(*x, chunk_size=args.chunk_size), args.repeats, "cuda")
            without = _time(lambda: chunk_gated_delta_drift(*x, chunk_size=args.chunk_size, with_drift=False),
                            args.repeats, "cuda")
            impl = "triton"
            fla_ms = None
            if fla is not None:
                try:
                    fla_ms = record("deltas_kernel", f"fla-core T={T} H={args.heads} d={args.head_dim} {args.dtype}",
                                    _time(lambda: fla(q=x[0], k=x[1], v=x[2], g=x[3], beta=x[4].to(x[0].dtype),
                                                      output_final_state=True), args.repeats, "cuda"),
                                    "ms", "cuda")["median"]
                except Exception as e:  # an API or build mismatch is reported, the rest of the benchmark still runs
                    fla, fla_note = None, f"fla-core failed ({type(e).__name__}: {e})"
        else:
            with_d = _time(lambda: chunk_gated_delta(*x, chunk_size=args.chunk_size), args.repeats, "cpu")
            without = _time(lambda: chunk_gated_delta(*x, chunk_size=args.chunk_size, with_drift=False),
                            args.repeats, "cpu")
            impl, fla_ms = "torch chunked", None
        case = f"{impl} T={T} H={args.heads} d={args.head_dim} {args.dtype}"
        stats = ("median", "p20", "p80")
        row_with = record("deltas_kernel", f"{case} with drift", with_d, "ms", args.device)
        row_without = record("deltas_kernel", f"{case} without drift", without, "ms", args.device)
        with_d, without = (tuple(r[k] for k in stats) for r in (row_with, row_without))
        moved = sum(t.numel() * t.element_size() for t in x) + x[2].numel() * x[2].element_size()
        rows.append({"impl": impl, "T": T, "heads": args.heads, "head_dim": args.head_dim, "dtype": args.dtype,
                     "with_drift_ms": with_d[0], "with_drift_p20_ms": with_d[1], "with_drift_p80_ms": with_d[2],
                     "without_drift_ms": without[0], "drift_cost_ratio": with_d[0] / without[0],
                     "bandwidth_GBps": moved / (without[0] * 1e-3) / 1e9, "fla_ms": fla_ms,
                     "without_drift_vs_fla": None if fla_ms is None else without[0] / fla_ms})
    where = "device" if args.device == "cuda" else "interpreter on CPU"
    print(f"kernel vs reference ({where}): max abs error o/state {max_err:.2e}, max rel error drift {drift_rel_err:.2e}")
    print(f"{'impl':48s} {'T':>6s} {'with drift ms':>14s} {'without ms':>11s} {'ratio':>6s} {'GB/s':>7s} {'fla ms':>7s}")
    for r in rows:
        fla_ms = "-" if r["fla_ms"] is None else f"{r['fla_ms']:.3f}"
        print(f"{r['impl']:48s} {r['T']:6d} {r['with_drift_ms']:14.3f} {r['without_drift_ms']:11.3f} "
              f"{r['drift_cost_ratio']:6.3f} {r['bandwidth_GBps']:7.1f} {fla_ms:>7s}")
    if fla_note:
        print(fla_note)
    if args.receipt:
        args.receipt.parent.mkdir(parents=True, exist_ok=True)
        args.receipt.write_text(json.dumps({"benchmark": "deltas_kernel", "args": {k: str(v) for k, v in vars(args).items()},
                                            "device": device_info(), "packages": package_versions(),
                                            "kernel_max_abs_error": max_err,
                                            "kernel_drift_max_rel_error": drift_rel_err, "fla_note": fla_note,
                                            "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
