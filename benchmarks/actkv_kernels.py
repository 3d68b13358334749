"""Benchmark of the ActKV page-aware kernels (spec `papers/actkv.md`, kernel benchmark "Table 1").

Setup: block 16, 8 KV heads, head_dim 128, 32 query heads, fp16, requests {1, 4, 16, 64}, compressions
1K->0.5K, 2K->1.5K, 6K->4K with a random (scattered) keep set per request. For each shape it times (median, p20,
p80 of several runs; the L2 cache is flushed before each run on a GPU):
  - in-place compaction (Alg. 4): the whole op (index plan + copy + table update) and the copy kernel alone;
  - gather-based compaction (workspace baseline): the whole op and its two copy kernels alone;
  - attention recovery (Alg. 3) for one action token per request over the full pre-compression context, against
    one read of the touched K blocks (a torch sum over exactly those blocks) measured in the same run.
Bytes moved count reads + writes; the device's copy bandwidth is measured in the same run (a large
device-to-device tensor copy, reads + writes). Every compaction result is checked against the uncompacted cache.
On a CPU the kernels run in the Triton interpreter at tiny sizes: correctness only, the times mean nothing.

    python benchmarks/actkv_kernels.py [--out receipt.json] [--reps 10] [--sizes auto|tiny|full]
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are imported

import triton  # noqa: E402
from _table import emit  # noqa: E402

from agentpost.record.environment import device_info, package_versions  # noqa: E402
from agentpost.kernels.actkv import (
    compact_gather,
    compact_inplace,
    compaction_plan,
    copy_rows,  # noqa: E402
    paged_decode_attention,
    recover_action_attention,
)

FULL = dict(
    block=16,
    kv_heads=8,
    head_dim=128,
    q_heads=32,
    dtype="float16",
    requests=[1, 4, 16, 64],
    compressions=[(1024, 512), (2048, 1536), (6144, 4096)],
)
TINY = dict(
    block=16, kv_heads=2, head_dim=16, q_heads=8, dtype="float32", requests=[1, 2], compressions=[(64, 32), (96, 72)]
)


class Timer:
    """Median/p20/p80 wall time of ``fn`` after ``setup`` (not timed); CUDA events on a GPU."""

    def __init__(self, device, reps, warmup=2):
        self.device, self.reps, self.warmup = device, reps, warmup
        self.flush = torch.empty(256 * 2**20, dtype=torch.int8, device=device) if device.type == "cuda" else None

    def __call__(self, fn, setup=None):
        times = []
        for i in range(self.warmup + self.reps):
            if setup is not None:
                setup()
            if self.flush is not None:
                self.flush.zero_()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                torch.cuda.synchronize()
                t = start.elapsed_time(end) / 1e3
            else:
                t0 = time.perf_counter()
                fn()
                t = time.perf_counter() - t0
            if i >= self.warmup:
                times.append(t)
        q = statistics.quantiles(times, n=5) if len(times) > 1 else [times[0]] * 4
        return {"median_s": statistics.median(times), "p20_s": q[0], "p80_s": q[3], "runs": len(times)}


def copy_bandwidth(device, timer, n_bytes):
    """Reads + writes per second of a plain device tensor copy (the roofline the kernels are compared with)."""
    a = torch.empty(n_bytes // 2, dtype=torch.float16, device=device).normal_()
    b = torch.empty_like(a)
    t = timer(lambda: b.copy_(a))
    return 2 * a.numel() * a.element_size() / t["median_s"], t


def make_cache(R, n, cfg, device, gen):
    """One layer holding ``n`` entries per request in shuffled physical blocks; a random keep set per request."""
    bs, H, D = cfg["block"], cfg["kv_heads"], cfg["head_dim"]
    dtype = getattr(torch, cfg["dtype"])
    per = triton.cdiv(n, bs)
    k = torch.randn(R * per, bs, H, D, device=device, dtype=dtype)
    v = torch.randn_like(k)
    table = torch.randperm(R * per, generator=gen).view(R, per).to(torch.int32).to(device)
    lens = torch.full((R,), n, dtype=torch.int32, device=device)
    return k, v, table, lens


def random_keep(R, n, B, device, gen):
    keep = torch.zeros(R, n, dtype=torch.bool)
    for r in range(R):
        keep[r, torch.randperm(n, generator=gen)[:B]] = True
    return keep.to(device)


def check_compacted(k0, v0, table0, k, v, table, lens, perm, keep, bs):
    """Vectorised check: entry j of each compacted request is old entry perm[r, j], and perm is the keep set."""
    R = table.shape[0]
    B = keep.sum(1)
    rows = torch.arange(R, device=k.device).repeat_interleave(B)
    j = torch.arange(int(B.sum()), device=k.device) - (torch.cumsum(B, 0) - B).repeat_interleave(B)
    old = perm[rows, j]
    # B distinct kept entries per request = exactly the keep set
    ok = bool(torch.equal(lens.long(), B)) and bool(keep[rows, old].all())
    ok &= torch.unique(rows * keep.shape[1] + old).numel() == old.numel()
    new_s = table[rows, j // bs].long() * bs + j % bs
    old_s = table0[rows, old // bs].long() * bs + old % bs
    row = k.shape[2] * k.shape[3]
    ok &= torch.equal(k.view(-1, row)[new_s], k0.view(-1, row)[old_s])
    ok &= torch.equal(v.view(-1, row)[new_s], v0.view(-1, row)[old_s])
    return ok


def bench_compaction(R, n, B, cfg, device, timer, gen):
    bs = cfg["block"]
    k0, v0, table0, lens0 = make_cache(R, n, cfg, device, gen)
    keep = random_keep(R, n, B, device, gen)
    k, v, table, lens = k0.clone(), v0.clone(), table0.clone(), lens0.clone()

    def restore():
        k.copy_(k0), v.copy_(v0), table.copy_(table0), lens.copy_(lens0)

    out = {}
    row_bytes = cfg["kv_heads"] * cfg["head_dim"] * k0.element_size()
    for name, op in (("inplace", compact_inplace), ("gather", compact_gather)):
        out[name] = timer(lambda: op(k, v, table, lens, keep), restore)
        restore()
        freed, perm = op(k, v, table, lens, keep)
        out[name]["checked"] = check_compacted(k0, v0, table0, k, v, table, lens, perm, keep, bs)
        out[name]["freed_blocks"] = int((freed >= 0).sum())
    # kernels alone, with the index work done beforehand
    plan = compaction_plan(table0, lens0, keep, bs)
    rows_k, rows_v = k.view(-1, k.shape[2] * k.shape[3]), v.view(-1, v.shape[2] * v.shape[3])
    out["inplace_kernel"] = timer(
        lambda: copy_rows(rows_k, rows_k, rows_v, rows_v, plan.src_slots, plan.dst_slots), restore
    )
    kr, ki = torch.nonzero(keep, as_tuple=True)
    old_s = table0[kr, ki // bs].long() * bs + ki % bs
    pos = torch.arange(kr.numel(), device=device) - (torch.cumsum(keep.sum(1), 0) - keep.sum(1))[kr]
    new_s = table0[kr, pos // bs].long() * bs + pos % bs
    ws = torch.arange(kr.numel(), device=device)
    work_k = torch.empty(kr.numel(), rows_k.shape[1], dtype=k.dtype, device=device)
    work_v = torch.empty_like(work_k)

    def gather_kernels():
        copy_rows(rows_k, work_k, rows_v, work_v, old_s, ws)
        copy_rows(work_k, rows_k, work_v, rows_v, ws, new_s)

    out["gather_kernel"] = timer(gather_kernels, restore)
    moved = int(plan.src_slots.numel())
    out["rows_moved_inplace"] = moved
    out["rows_moved_gather"] = 2 * kr.numel()
    out["bytes_inplace"] = 2 * 2 * moved * row_bytes  # K and V, read + write
    out["bytes_gather"] = 2 * 2 * 2 * kr.numel() * row_bytes
    return out


def bench_recovery(R, n, cfg, device, timer, gen):
    k, v, table, lens = make_cache(R, n, cfg, device, gen)
    q = torch.randn(R, 1, cfg["q_heads"], cfg["head_dim"], device=device, dtype=k.dtype)
    _, lse = paged_decode_attention(q[:, 0], k, v, table, lens)
    ctx = lens[:, None].clone()
    acc = torch.zeros(R, cfg["kv_heads"], table.shape[1] * cfg["block"], device=device)
    count = torch.zeros(R, device=device)
    t = timer(lambda: recover_action_attention(q, lse[:, None], k, table, ctx, acc=acc, count=count))
    t_read = timer(lambda: k.sum(dtype=torch.float32))  # the K pool is exactly the touched blocks
    return {"recovery": t, "read_k": t_read, "bytes_k": k.numel() * k.element_size()}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None, help="receipt path (default benchmarks/receipts/...)")
    ap.add_argument("--reps", type=int, default=None, help="timed runs per measurement (default 10 GPU, 3 CPU)")
    ap.add_argument("--sizes", choices=["auto", "tiny", "full"], default="auto")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    sizes = args.sizes if args.sizes != "auto" else ("full" if device.type == "cuda" else "tiny")
    if sizes == "full" and device.type != "cuda":
        sys.exit("--sizes full needs a CUDA device (the Triton interpreter would take hours)")
    cfg = FULL if sizes == "full" else TINY
    reps = args.reps or (10 if device.type == "cuda" else 3)
    timer = Timer(device, reps, warmup=2 if device.type == "cuda" else 1)
    gen = torch.Generator().manual_seed(0)
    started = dt.datetime.now(dt.timezone.utc)
    bw, bw_t = copy_bandwidth(device, timer, 2**30 if device.type == "cuda" else 2**24)
    rows = []
    for R in cfg["requests"]:
        for n, B in cfg["compressions"]:
            c = bench_compaction(R, n, B, cfg, device, timer, gen)
            rec = bench_recovery(R, n, cfg, device, timer, gen)
            for part, t in [
                *((k, c[k]) for k in ("inplace", "inplace_kernel", "gather", "gather_kernel")),
                *((k, rec[k]) for k in ("recovery", "read_k")),
            ]:
                emit(
                    "actkv_kernels",
                    f"{part} R={R} n={n} keep={B}",
                    1e3 * t["median_s"],
                    1e3 * t["p20_s"],
                    1e3 * t["p80_s"],
                    "ms",
                    device.type,
                )
            t_in, t_ink = c["inplace"]["median_s"], c["inplace_kernel"]["median_s"]
            t_ga, t_gak = c["gather"]["median_s"], c["gather_kernel"]["median_s"]
            rows.append(
                {
                    "requests": R,
                    "n": n,
                    "keep": B,
                    "inplace_ms": 1e3 * t_in,
                    "inplace_kernel_ms": 1e3 * t_ink,
                    "gather_ms": 1e3 * t_ga,
                    "gather_kernel_ms": 1e3 * t_gak,
                    "inplace_bytes": c["bytes_inplace"],
                    "gather_bytes": c["bytes_gather"],
                    "inplace_kernel_gbps": c["bytes_inplace"] / t_ink / 1e9,
                    "inplace_frac_copy_bw": c["bytes_inplace"] / t_ink / bw,
                    "gather_kernel_frac_copy_bw": c["bytes_gather"] / t_gak / bw,
                    "speedup_op": t_ga / t_in,
                    "speedup_kernel": t_gak / t_ink,
                    "recovery_ms": 1e3 * rec["recovery"]["median_s"],
                    "read_k_ms": 1e3 * rec["read_k"]["median_s"],
                    "recovery_over_read": rec["recovery"]["median_s"] / rec["read_k"]["median_s"],
                    "recovery_gbps": rec["bytes_k"] / rec["recovery"]["median_s"] / 1e9,
                    "checked": c["inplace"]["checked"] and c["gather"]["checked"],
                    "timings": {"compaction": c, "recovery": rec},
                }
            )
    title = (
        f"ActKV kernels on {device_info(device)['name']} ({cfg['dtype']}, block {cfg['block']}, "
        f"{cfg['kv_heads']} KV heads, head_dim {cfg['head_dim']}, {cfg['q_heads']} Q heads); "
        f"measured copy bandwidth {bw / 1e9:.1f} GB/s"
    )
    if device.type != "cuda":
        title = "CORRECTNESS ONLY (CPU, Triton interpreter, tiny sizes; times are meaningless) -- " + title
    print(title)
    head = (
        f"{'req':>4} {'n->B':>10} {'inplace ms':>10} {'kern ms':>8} {'GB/s':>7} {'%copyBW':>7} {'gather ms':>9} "
        f"{'speedup':>7} {'kern x':>6} {'recov ms':>8} {'readK ms':>8} {'rec/read':>8} {'ok':>3}"
    )
    print(head)
    for r in rows:
        print(
            f"{r['requests']:>4} {r['n']:>5}->{r['keep']:<4} {r['inplace_ms']:>10.3f} {r['inplace_kernel_ms']:>8.3f} "
            f"{r['inplace_kernel_gbps']:>7.1f} {100 * r['inplace_frac_copy_bw']:>6.1f}% {r['gather_ms']:>9.3f} "
            f"{r['speedup_op']:>6.2f}x {r['speedup_kernel']:>5.2f}x {r['recovery_ms']:>8.3f} {r['read_k_ms']:>8.3f} "
            f"{r['recovery_over_read']:>8.2f} {'yes' if r['checked'] else 'NO':>3}"
        )
    goals = {
        "compaction_frac_copy_bw_min": min(r["inplace_frac_copy_bw"] for r in rows),
        "speedup_over_gather_min": min(r["speedup_op"] for r in rows),
        "recovery_over_read_max": max(r["recovery_over_read"] for r in rows),
    }
    goals["met"] = (
        None
        if device.type != "cuda"
        else bool(
            goals["compaction_frac_copy_bw_min"] >= 0.7
            and goals["speedup_over_gather_min"] >= 2
            and goals["recovery_over_read_max"] <= 2
        )
    )
    print(
        "goals (GPU only): compaction >= 70% of copy BW: min {:.1%}; >= 2x gather: min {:.2f}x; "
        "recovery <= 2x one K read: max {:.2f}x -> {}".format(
            goals["compaction_frac_copy_bw_min"],
            goals["speedup_over_gather_min"],
            goals["recovery_over_read_max"],
            {True: "met", False: "not met", None: "not evaluated on a CPU"}[goals["met"]],
        )
    )
    receipt = {
        "schema": 1,
        "benchmark": "actkv_kernels",
        "mode": "correctness-only" if device.type != "cuda" else "timing",
        "sizes": sizes,
        "config": {**cfg, "compressions": [list(c) for c in cfg["compressions"]]},
        "device": device_info(device),
        "versions": package_versions(),
        "reps": reps,
        "started_utc": started.isoformat(timespec="seconds"),
        "wall_s": round((dt.datetime.now(dt.timezone.utc) - started).total_seconds(), 2),
        "copy_bandwidth_bytes_per_s": bw,
        "copy_bandwidth_timing": bw_t,
        "all_checked": all(r["checked"] for r in rows),
        "goals": goals,
        "rows": rows,
    }
    out = args.out or Path(__file__).resolve().parent / "receipts" / f"actkv_kernels_{device.type}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(receipt, indent=1, default=str) + "\n")
    print(f"receipt: {out.name}")
    return 0 if receipt["all_checked"] else 1


if __name__ == "__main__":
    sys.exit(main())
