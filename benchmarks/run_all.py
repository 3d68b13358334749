"""`make bench`: every benchmark script with small CPU defaults, then one long-format table of all timed cases.

Each script runs in its own process (its own output is shown as it runs); a script that fails is reported and the
others still run; the exit code is 1 if any failed. ``kernel_path_spread.py`` is not a speed benchmark (it re-runs
chapters on each kernel path to measure the spread of their glued values, an hour-scale job) and is left out.

    python benchmarks/run_all.py [--only NAME ...] [--full]   # --full: each script's own defaults
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _table import ROWS_ENV, format_table

HERE = Path(__file__).resolve().parent
#: script -> arguments that keep it to seconds or a minute on 2 CPU cores (``--full`` drops them).
QUICK = {
    "actkv_engine.py": ["--repeats", "2", "--candidates", "1", "--shape", "short"],
    "actkv_kernels.py": ["--sizes", "tiny", "--reps", "1", "--out", "{tmp}/actkv_kernels.json"],
    "cli_startup.py": ["--repeats", "2"],
    "data_loaders.py": ["--repeats", "1"],
    "deltas_kernel.py": ["--seq-lens", "256", "--heads", "2", "--repeats", "3"],
    "evidence_reading.py": ["--repeats", "1", "--only", "list", "compare deltas"],
    "gpu_step_costs.py": ["--only", "kite_sst_train_256", "tool_lm_decode"],
    "graft_graph_cost.py": ["--sizes", "4,8", "--repeats", "3"],
    "kite_latency.py": ["--prompts", "64", "256", "--d-model", "64", "--repeats", "3", "--decode-tokens", "4"],
    "muser_compression.py": ["--lengths", "256", "1024", "--batch", "2", "--repeats", "3"],
    "muser_retrieval.py": [
        "--epochs",
        "1",
        "--synthetic-items",
        "20000",
        "--ef-search",
        "16",
        "64",
        "--candidates",
        "50",
    ],
    "toolsearcher_variants.py": ["--steps", "3"],
    "walkthroughs.py": ["--repeats", "5"],
}
EXCLUDED = {
    "actkv_launch_count.py": "counts launches behind the actkv GPU prediction (minutes, needs shared data)",
    "kernel_path_spread.py": "re-runs chapters per kernel path (hours); run it by hand with chapter names",
    "count_baselines.py": "not a timing: the count-model floor the KITE catalogue's competence check cites",
    "paired_class_rates.py": "not a timing: the simulated verdict-class rates book/evidence-levels.md states (minutes)",
}


def scripts() -> list[str]:
    """Every benchmark script; one that is neither timed here nor excluded is an error (a new script gets a row)."""
    found = sorted(p.name for p in HERE.glob("*.py") if not p.name.startswith("_") and p.name != "run_all.py")
    missing = [s for s in found if s not in QUICK and s not in EXCLUDED]
    if missing:
        raise SystemExit(f"benchmarks/run_all.py: add {', '.join(missing)} to QUICK or EXCLUDED")
    return [s for s in found if s in QUICK]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", default=None, help="script names (e.g. kite_latency.py)")
    ap.add_argument("--full", action="store_true", help="each script's own defaults instead of the quick ones")
    args = ap.parse_args(argv)
    chosen = args.only or scripts()
    unknown = [s for s in chosen if s not in QUICK]
    if unknown:
        raise SystemExit(f"unknown benchmark(s) {unknown}; known: {sorted(QUICK)}")
    failed = []
    with tempfile.TemporaryDirectory() as tmp:
        rows_file = Path(tmp) / "rows.jsonl"
        env = {**os.environ, ROWS_ENV: str(rows_file)}
        for name in chosen:
            extra = [] if args.full else [a.format(tmp=tmp) for a in QUICK[name]]
            print(f"== {name} {' '.join(extra)}", flush=True)
            t0 = time.perf_counter()
            rc = subprocess.run([sys.executable, str(HERE / name), *extra], env=env).returncode
            print(f"== {name}: exit {rc}, {time.perf_counter() - t0:.1f} s\n", flush=True)
            if rc != 0:
                failed.append(f"{name} (exit {rc})")
        rows = [json.loads(line) for line in rows_file.read_text().splitlines()] if rows_file.exists() else []
    print(format_table(rows))
    for name, why in EXCLUDED.items():
        print(f"not run: {name}: {why}")
    if failed:
        print(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
