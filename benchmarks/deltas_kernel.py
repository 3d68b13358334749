"""What the drift signal costs: the chunked gated-delta forward with and without the per-chunk drift.

On a CUDA device the Triton kernel (``agentpost.kernels.deltas``) is timed with CUDA events at the given shapes:
median / p20 / p80 over ``--repeats`` of forward-with-drift and forward-without-drift, their ratio (the drift's
cost), and the achieved memory bandwidth (bytes of q, k, v, g, beta read and o written). On the CPU the kernel runs
only in the Triton interpreter, which says nothing about speed: there the benchmark times the torch chunked form
(``agentpost.deltas.rule.chunk_gated_delta``) with and without the drift, and checks the kernel against the
reference once on a small shape (largest error of outputs and state, absolute; of the drift, relative). Prints a table; ``--receipt PATH`` writes it as JSON with the device facts.

On CUDA each ``--precision`` (the kernel's ``tl.dot`` input precision: ``ieee`` exact fp32, ``tf32`` tensor cores)
gets its rows, and where flash-linear-attention (``fla-core``, module ``fla``) is installed its
``chunk_gated_delta_rule`` on the same inputs gets a row (no drift; forward with the final state) to compare with.

``--hybrid-tokens N`` also times the drift's share of a whole streaming forward (the paper's "1.9% of the forward
pass", claim C3): the chapter's hybrid LM architecture (``--hybrid-hidden`` wide, untrained weights) reads N tokens in
chunks of ``--hybrid-chunk``, once plainly and once reading each DeltaNet layer's drift after every chunk as the
diagnostic does (:func:`agentpost.deltas.rule.state_drift` on the states before and after); the share is
with / without - 1.

    python benchmarks/deltas_kernel.py                       # CPU: torch chunked form, T = 1024
    python benchmarks/deltas_kernel.py --device cuda --seq-lens 8192,32768 --heads 16 --receipt out.json
    python benchmarks/deltas_kernel.py --seq-lens 256 --hybrid-tokens 2048      # + the drift's share of a forward
"""

from __future__ import annotations

import argparse
import importlib.util
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


def _hybrid_forward_share(tokens: int, hidden: int, chunk: int, repeats: int, device: str) -> dict:
    """Median ms of streaming ``tokens`` through the hybrid LM in ``chunk``-token calls, with and without reading
    every DeltaNet layer's drift after each chunk, and the drift's share of the forward (with / without - 1)."""
    import torch

    from agentpost.deltas.hybrid import HybridConfig, HybridForCausalLM
    from agentpost.deltas.rule import state_drift

    torch.manual_seed(0)
    model = (
        HybridForCausalLM(
            HybridConfig(
                hidden_size=hidden,
                intermediate_size=3 * hidden,
                linear_num_heads=max(1, hidden // 64),
                num_attention_heads=max(1, hidden // 64),
                head_dim=64,
            )
        )
        .to(device)
        .eval()
    )
    ids = torch.randint(0, model.config.vocab_size, (1, tokens), device=device)

    @torch.no_grad()
    def stream(with_drift: bool):
        state = None
        for c0 in range(0, tokens, chunk):
            before = None if state is None else state.linear_states()
            state = model(ids[:, c0 : c0 + chunk], state=state).state
            if with_drift and before is not None:
                for b, a in zip(before, state.linear_states()):
                    state_drift(b, a)

    case = f"hybrid LM d={hidden} streaming T={tokens} chunk={chunk}"
    without = record(
        "deltas_kernel", f"{case} without drift", _time(lambda: stream(False), repeats, device), "ms", device
    )
    with_d = record("deltas_kernel", f"{case} with drift", _time(lambda: stream(True), repeats, device), "ms", device)
    return {
        "tokens": tokens,
        "hidden": hidden,
        "chunk": chunk,
        "with_drift_ms": with_d["median"],
        "without_drift_ms": without["median"],
        "drift_share": with_d["median"] / without["median"] - 1,
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--seq-lens", default="1024")
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--chunk-size", type=int, default=64)
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--precision", default="ieee,tf32", help="CUDA only: comma-separated tl.dot input precisions")
    p.add_argument(
        "--hybrid-tokens",
        type=int,
        default=0,
        help="time the drift's share of a hybrid LM streaming forward over this many tokens (0: skip)",
    )
    p.add_argument("--hybrid-hidden", type=int, default=256, help="width of that hybrid LM")
    p.add_argument("--hybrid-chunk", type=int, default=256, help="tokens per streaming call (one frame group)")
    p.add_argument("--receipt", type=Path)
    args = p.parse_args(argv)
    if min(args.hybrid_tokens, args.hybrid_hidden - 1, args.hybrid_chunk - 1) < 0 or args.hybrid_hidden % 64:
        p.error("--hybrid-tokens must be >= 0, --hybrid-chunk >= 1 and --hybrid-hidden a positive multiple of 64")
    if args.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    import torch

    from agentpost.deltas.rule import chunk_gated_delta
    from agentpost.record.environment import device_info, package_versions
    from agentpost.kernels.deltas import chunk_gated_delta_drift, chunk_gated_delta_drift_reference

    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: torch sees no CUDA device")
    dtype = getattr(torch, args.dtype)
    rows = []
    small = _inputs(70, 2, 32, 32, args.device, torch.float32, seed=1)
    got = chunk_gated_delta_drift(*small, chunk_size=16)
    ref = chunk_gated_delta_drift_reference(*small, chunk_size=16)
    max_err = max(float((a.float() - b.float()).abs().max()) for a, b in zip(got[:2], ref[:2]))
    drift_rel_err = float(((got[2] - ref[2]).abs() / ref[2].abs().clamp_min(1e-6)).max())
    fla_rule = None
    if args.device == "cuda" and importlib.util.find_spec("fla") is not None:
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as fla_rule
    nan = float("nan")
    stats = ("median", "p20", "p80")
    for T in [int(x) for x in args.seq_lens.split(",")]:
        x = _inputs(T, args.heads, args.head_dim, args.head_dim, args.device, dtype)
        moved = sum(t.numel() * t.element_size() for t in x) + x[2].numel() * x[2].element_size()
        if args.device == "cuda":
            runs = {
                f"triton {prec}": (
                    lambda prec=prec: chunk_gated_delta_drift(*x, chunk_size=args.chunk_size, precision=prec),
                    lambda prec=prec: chunk_gated_delta_drift(
                        *x, chunk_size=args.chunk_size, precision=prec, with_drift=False
                    ),
                )
                for prec in args.precision.split(",")
            }
            if fla_rule is not None:
                runs["fla-core chunk_gated_delta_rule"] = (None, lambda: fla_rule(*x, output_final_state=True))
        else:
            runs = {
                "torch chunked": (
                    lambda: chunk_gated_delta(*x, chunk_size=args.chunk_size),
                    lambda: chunk_gated_delta(*x, chunk_size=args.chunk_size, with_drift=False),
                )
            }
        for impl, (fn_with, fn_without) in runs.items():
            case = f"{impl} T={T} H={args.heads} d={args.head_dim} {args.dtype}"
            without = record(
                "deltas_kernel",
                f"{case} without drift",
                _time(fn_without, args.repeats, args.device),
                "ms",
                args.device,
            )
            with_d = (
                record(
                    "deltas_kernel", f"{case} with drift", _time(fn_with, args.repeats, args.device), "ms", args.device
                )
                if fn_with
                else dict.fromkeys(stats, nan)
            )
            rows.append(
                {
                    "impl": impl,
                    "T": T,
                    "heads": args.heads,
                    "head_dim": args.head_dim,
                    "dtype": args.dtype,
                    "with_drift_ms": with_d["median"],
                    "with_drift_p20_ms": with_d["p20"],
                    "with_drift_p80_ms": with_d["p80"],
                    "without_drift_ms": without["median"],
                    "drift_cost_ratio": with_d["median"] / without["median"],
                    "bandwidth_GBps": moved / (without["median"] * 1e-3) / 1e9,
                }
            )
    hybrid = (
        _hybrid_forward_share(args.hybrid_tokens, args.hybrid_hidden, args.hybrid_chunk, args.repeats, args.device)
        if args.hybrid_tokens
        else None
    )
    if args.device == "cuda" and fla_rule is None:
        print("fla-core is not installed (module fla): no flash-linear-attention row")
    where = "device" if args.device == "cuda" else "interpreter on CPU"
    print(
        f"kernel vs reference ({where}): max abs error o/state {max_err:.2e}, max rel error drift {drift_rel_err:.2e}"
    )
    print(f"{'impl':48s} {'T':>6s} {'with drift ms':>14s} {'without ms':>11s} {'ratio':>6s} {'GB/s':>7s}")
    for r in rows:
        print(
            f"{r['impl']:48s} {r['T']:6d} {r['with_drift_ms']:14.3f} {r['without_drift_ms']:11.3f} "
            f"{r['drift_cost_ratio']:6.3f} {r['bandwidth_GBps']:7.1f}"
        )
    if hybrid:
        print(
            f"hybrid LM streaming forward (d {hybrid['hidden']}, {hybrid['tokens']} tokens in chunks of "
            f"{hybrid['chunk']}): {hybrid['without_drift_ms']:.1f} ms, with the drift read after every chunk "
            f"{hybrid['with_drift_ms']:.1f} ms: drift share {hybrid['drift_share']:+.1%} (paper: 1.9%)"
        )
    if args.receipt:
        args.receipt.parent.mkdir(parents=True, exist_ok=True)
        args.receipt.write_text(
            json.dumps(
                {
                    "benchmark": "deltas_kernel",
                    "args": {k: (v.name if isinstance(v, Path) else str(v)) for k, v in vars(args).items()},
                    "device": device_info(),
                    "packages": package_versions(),
                    "kernel_max_abs_error": max_err,
                    "kernel_drift_max_rel_error": drift_rel_err,
                    "rows": rows,
                    "hybrid_forward": hybrid,
                },
                indent=1,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
