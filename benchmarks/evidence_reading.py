"""How long a user waits for the evidence: wall seconds of ``agentpost list``, ``validate``, ``compare CHAPTER
--profile cpu`` (every chapter with a cpu batch) and ``ledger`` as fresh processes over the committed runs (median of
repeats), with the ratio against the same command in an older checkout measured in the same run (``--baseline``,
e.g. a ``git worktree`` of the commit before the compact run store: its own code reading its own runs).

    .venv/bin/python benchmarks/evidence_reading.py [--repeats 3] [--baseline /tmp/agentpost-before
                                                    [--baseline-repeats 1]] [--only list "compare muser" ledger]
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

from _table import record

ROOT = Path(__file__).resolve().parents[1]


def cases(root: Path) -> dict[str, list[str]]:
    chapters = sorted(p.parent.name for p in (root / "book" / "runs").glob("*/cpu") if p.is_dir())
    claims = Path(tempfile.gettempdir()) / "agentpost-bench-claims.json"
    claims.write_text(json.dumps({}))
    return {
        "list": ["list"],
        "validate": ["validate"],
        **{f"compare {c}": ["compare", c, "--profile", "cpu"] for c in chapters},
        "ledger": ["ledger", "--claims-report", str(claims)],
    }


def wall(root: Path, args: list[str]) -> float:
    """Seconds of ``python -m agentpost ARGS`` run in ``root`` (its own package first on the path)."""
    env = {**os.environ, "AGENTPOST_ROOT": str(root), "PYTHONPATH": str(root)}
    t0 = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "agentpost", *args],
        cwd=root,
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--baseline", type=Path, default=None, help="an older checkout, timed beside this one")
    parser.add_argument("--baseline-repeats", type=int, default=None, help="repeats there (default: --repeats)")
    parser.add_argument("--only", nargs="*", default=None, help="case names to time (default: all)")
    args = parser.parse_args()
    todo = {k: v for k, v in cases(ROOT).items() if not args.only or k in args.only}
    print(f"{'command':28} {'median s':>9}" + (f" {'baseline s':>11} {'ratio':>7}" if args.baseline else ""))
    for name, argv in todo.items():
        now = record("evidence_reading", name, [wall(ROOT, argv) for _ in range(args.repeats)], "s")["median"]
        line = f"{name:28} {now:9.2f}"
        if args.baseline:
            before = record(
                "evidence_reading",
                f"{name} (baseline)",
                [wall(args.baseline, argv) for _ in range(args.baseline_repeats or args.repeats)],
                "s",
            )["median"]
            line += f" {before:11.2f} {now / before:7.3f}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
