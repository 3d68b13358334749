"""Start-up time of the command line: wall seconds of fresh processes (median of repeats), as a user waits.

Rows: ``agentpost --help`` and ``agentpost run --help`` (argparse only; commands import what they need when they
run), ``agentpost list`` (reads every run's receipt; also as it was before, with rfc3987-syntax imported), and ``import nbformat`` with and without
:func:`agentpost.project.skip_slow_optional_imports` (jsonschema's optional rfc3987-syntax grammar, compiled at
import when installed), the ratio against the plain import in the same run.

    .venv/bin/python benchmarks/cli_startup.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from _table import record

CASES = {
    "agentpost --help": [sys.executable, "-m", "agentpost", "--help"],
    "agentpost run --help": [sys.executable, "-m", "agentpost", "run", "--help"],
    "agentpost list": [sys.executable, "-m", "agentpost", "list"],
    "agentpost list (rfc3987-syntax imported)": [
        sys.executable,
        "-c",
        "import sys, nbformat; from agentpost.cli import main; sys.exit(main(['list']))",
    ],
    "import nbformat (plain)": [sys.executable, "-c", "import nbformat"],
    "import nbformat (skip rfc3987-syntax)": [
        sys.executable,
        "-c",
        "from agentpost.project import skip_slow_optional_imports as s; s(); import nbformat",
    ],
}


def wall(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    samples = {name: [wall(cmd) for _ in range(args.repeats)] for name, cmd in CASES.items()}
    medians = {name: record("cli_startup", name, xs, "s")["median"] for name, xs in samples.items()}
    base = medians["import nbformat (plain)"]
    print(f"{'command':40} {'median s':>9} {'vs plain nbformat import':>25}")
    for name, seconds in medians.items():
        print(f"{name:40} {seconds:9.2f} {seconds / base:25.2f}")


if __name__ == "__main__":
    main()
