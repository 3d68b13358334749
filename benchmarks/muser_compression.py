"""MuSeR user-tower cost: compressed vs raw history windows, and the serving split's long vs short parts.

For each window length L (synthetic item ids — labelled synthetic; only shapes matter here), the forward time of
the MuSeR user tower (compression -> encoder -> M interests) with strides 1/16/64 and with strides 1/1/1 (no
compression), the token counts, and the time of the short part alone (what an online request recomputes when the
long part is cached). Median of ``--repeats`` runs after a warm-up, ratios against the raw window in the same run.

    python benchmarks/muser_compression.py                       # CPU, d=64, L = 256 .. 4096
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd
import torch
from _table import record

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from agentpost.muser.compression import compressed_length  # noqa: E402
from agentpost.muser.model import MuSeR, MuSeRConfig  # noqa: E402


def _median_ms(fn, repeats: int, case: str) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return record("muser_compression", case, times, "ms")["median"]


@torch.no_grad()
def measure(lengths, *, dim: int, batch: int, recent: int, mid_frac: float, repeats: int) -> pd.DataFrame:
    rows = []
    for L in lengths:
        mid = int(mid_frac * L)
        hist = torch.randint(1, 1001, (batch, L), generator=torch.Generator().manual_seed(L))
        out = {}
        for name, strides in (("raw", (1, 1, 1)), ("compressed", (1, 16, 64))):
            cfg = MuSeRConfig(
                n_items=1000,
                dim=dim,
                max_len=L,
                recent_len=recent,
                mid_len=mid,
                strides=strides,
                heads=4,
                dropout=0.0,
                split_serving=True,
            )
            m = MuSeR(cfg).eval()
            out[name] = _median_ms(lambda: m(hist), repeats, f"L={L} {name} forward, batch {batch}")
            out[f"{name}_tokens"] = compressed_length(L, recent, mid, strides)
            if name == "compressed":
                z, zm = m.tokens(hist)
                out["short_only"] = _median_ms(
                    lambda: m.encode(z[:, m.n_long :], zm[:, m.n_long :]),
                    repeats,
                    f"L={L} short part only, batch {batch}",
                )
        rows.append(
            {
                "L": L,
                "tokens_raw": out["raw_tokens"],
                "tokens_compressed": out["compressed_tokens"],
                "raw_ms": round(out["raw"], 2),
                "compressed_ms": round(out["compressed"], 2),
                "short_part_ms": round(out["short_only"], 2),
                "compressed_vs_raw": round(out["compressed"] / out["raw"], 3),
                "short_vs_compressed": round(out["short_only"] / out["compressed"], 3),
            }
        )
    return pd.DataFrame(rows)


def main(argv=None) -> pd.DataFrame:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 2048, 4096])
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--recent", type=int, default=200)
    ap.add_argument("--mid-frac", type=float, default=0.32, help="L_m as a fraction of L (spec example 3,200/10,000)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    table = measure(
        args.lengths, dim=args.dim, batch=args.batch, recent=args.recent, mid_frac=args.mid_frac, repeats=args.repeats
    )
    print(
        f"MuSeR user tower, CPU, {args.threads} thread(s), d={args.dim}, batch {args.batch}, median of {args.repeats}"
    )
    print(table.to_string(index=False))
    return table


if __name__ == "__main__":
    main()
