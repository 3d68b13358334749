"""How much a chapter's glued results move between CPU kernel paths (issue "verdicts that hold up", item 6).

Runs a chapter's notebook at its smoke defaults (seed 42) once per kernel path -- ``ATEN_CPU_CAPABILITY=default``,
``ATEN_CPU_CAPABILITY=avx2``, ``OMP_NUM_THREADS=1`` and, if asked, torch's native dispatch on this CPU -- and
compares every glued value of every run with the committed notebook's (one more path: the machine that refreshed
it). The spread of a value is ``max - min`` over the paths, kept per name pattern (the items of a list share their
largest spread; strings keep the set seen); for a paired comparison it is the spread of its estimate per path, set
next to its MDE, so a reader sees whether machine noise is below the effect the protocol could
detect. The result is written to ``book/spread/<chapter>.json`` (committed: the evidence pages and the
nbval glue-regression tolerances read it) and printed as a table.

    python benchmarks/kernel_path_spread.py kite actkv
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import nbformat

from agentpost.record.environment import device_info, package_versions
from agentpost.record.recording import read_scraps
from agentpost.run.execute import execute_papermill

ROOT = Path(__file__).resolve().parents[1]
SPREAD_DIR = ROOT / "book" / "spread"

#: kernel path name -> environment overrides. "native" is whatever torch dispatches to on this CPU.
KERNEL_PATHS: dict[str, dict[str, str]] = {
    "default": {"ATEN_CPU_CAPABILITY": "default"},
    "avx2": {"ATEN_CPU_CAPABILITY": "avx2"},
    "threads1": {"OMP_NUM_THREADS": "1"},
    "native": {},
}
DEFAULT_PATHS = ("default", "avx2", "threads1")


def flatten(value, prefix: str = "") -> dict[str, float | str]:
    """Glued values as ``{dotted.name: number or string}`` (lists and tables are indexed)."""
    out: dict[str, float | str] = {}
    if isinstance(value, dict):
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.update(flatten(v, f"{prefix}[{i}]"))
    elif isinstance(value, bool) or value is None:
        out[prefix] = str(value)
    elif isinstance(value, (int, float)):
        out[prefix] = float(value)
    else:
        out[prefix] = str(value)
    return out


def run_path(chapter: str, env: dict[str, str], workdir: Path) -> tuple[dict, float]:
    """Execute ``notebooks/<chapter>.ipynb`` once with ``env`` added to the kernel's environment."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    workdir.mkdir(parents=True, exist_ok=True)
    out_nb = workdir / f"{chapter}.ipynb"
    t0 = time.perf_counter()
    try:
        execute_papermill(ROOT / "notebooks" / f"{chapter}.ipynb", out_nb)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    wall = time.perf_counter() - t0
    return read_scraps(nbformat.read(out_nb, as_version=4)), wall


def pattern(name: str) -> str:
    """A flattened name with its list indices as ``[*]``: the rows of a table or the items of an outcome list share
    one tolerance (their largest spread), which keeps a spread file small (``tests/unit/test_size_budget.py``)."""
    return re.sub(r"\[\d+\]", "[*]", name)


def spread_table(per_path: dict[str, dict]) -> dict[str, dict]:
    """Per name pattern (:func:`pattern`): ``spread``, the largest ``max - min`` over the paths of any number it
    covers, and ``values``, the sorted strings seen on any path where it covers strings (one when they agree)."""
    flat = {
        p: {k: v for name, val in scraps.items() for k, v in flatten(val, name).items()}
        for p, scraps in per_path.items()
    }
    rows: dict[str, dict] = {}
    for k in sorted(set().union(*flat.values())):
        values = [flat[p][k] for p in flat if k in flat[p]]
        row = rows.setdefault(pattern(k), {})
        if all(isinstance(v, float) and math.isfinite(v) for v in values):
            row["spread"] = max(row.get("spread", 0.0), max(values) - min(values))
        else:
            row["values"] = sorted(set(row.get("values", [])) | {str(v) for v in values})
    return rows


def merge_rows(rows: dict[str, dict], earlier: dict[str, dict]) -> dict[str, dict]:
    """This machine's rows with another machine's (``--keep``): the larger spread, the union of strings."""
    merged = {}
    for key in sorted(set(rows) | set(earlier)):
        a, b = rows.get(key, {}), earlier.get(key, {})
        row = {}
        if "spread" in a or "spread" in b:
            row["spread"] = max(a.get("spread", 0.0), b.get("spread", 0.0))
        if "values" in a or "values" in b:
            row["values"] = sorted(set(a.get("values", [])) | set(b.get("values", [])))
        merged[key] = row
    return merged


def paired_spread(per_path: dict[str, dict]) -> list[dict]:
    """For every comparison recorded with ``glue_paired``: estimate spread over paths next to its MDE."""
    first = next(iter(per_path.values()))
    rows = []
    for name, val in first.items():
        if not (isinstance(val, dict) and "verdict" in val and "estimate" in val):
            continue
        est = {p: s[name]["estimate"] for p, s in per_path.items() if name in s}
        verdicts = {p: s[name]["verdict"] for p, s in per_path.items() if name in s}
        mdes = [s[name]["mde"] for s in per_path.values() if name in s]
        spread = max(est.values()) - min(est.values())
        rows.append(
            {
                "comparison": name,
                "estimate": est,
                "estimate_spread": spread,
                "mde": max(mdes),
                "verdicts": verdicts,
                "spread_below_mde": spread == 0.0 or spread < max(mdes),
            }
        )
    return rows


def earlier_paths(old: dict) -> tuple[dict[str, dict], list[dict], dict[str, dict]]:
    """A spread file's rows, its paired rows over its measured paths (not its ``committed`` column) and their
    environments, the paths named ``path@machine``, so a run on another machine can add its paths (``--keep``)."""
    label = {p: p if "@" in p else f"{p}@{old['device']['name']}" for p in old["paths"]}
    paired = [
        r | {key: {label[p]: v for p, v in r[key].items() if p in label} for key in ("estimate", "verdicts")}
        for r in old["paired"]
    ]
    return old["values"], paired, {label[p]: old["environments"][p] for p in label}


def merge_paired(rows: list[dict], earlier: list[dict]) -> list[dict]:
    """Paired rows over the union of both path sets (estimate spread recomputed, the larger MDE)."""
    before = {r["comparison"]: r for r in earlier}
    merged = []
    for r in rows:
        e = before.get(r["comparison"], {"estimate": {}, "verdicts": {}, "mde": r["mde"]})
        est, verdicts = e["estimate"] | r["estimate"], e["verdicts"] | r["verdicts"]
        spread, mde = max(est.values()) - min(est.values()), max(r["mde"], e["mde"])
        merged.append(
            r
            | {
                "estimate": est,
                "verdicts": verdicts,
                "estimate_spread": spread,
                "mde": mde,
                "spread_below_mde": spread == 0.0 or spread < mde,
            }
        )
    return merged


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("chapters", nargs="+")
    parser.add_argument("--paths", default=",".join(DEFAULT_PATHS), help="comma-separated kernel paths to run")
    parser.add_argument("--jobs", type=int, default=1, help="kernel paths run at once (each in its own process)")
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the paths the chapter's spread file already holds (another machine's: named "
        "path@machine) and add these, so the tolerances cover both CPUs",
    )
    args = parser.parse_args(argv)
    paths = args.paths.split(",")
    unknown = sorted(set(paths) - set(KERNEL_PATHS))
    if unknown:
        parser.error(f"unknown kernel path(s) {unknown}; known: {sorted(KERNEL_PATHS)}")
    for chapter in args.chapters:
        if not (ROOT / "notebooks" / f"{chapter}.ipynb").is_file():
            parser.error(f"no notebook notebooks/{chapter}.ipynb")
    SPREAD_DIR.mkdir(parents=True, exist_ok=True)
    for chapter in args.chapters:
        committed = nbformat.read(ROOT / "notebooks" / f"{chapter}.ipynb", as_version=4)
        per_path, walls = {"committed": read_scraps(committed)}, {}
        with tempfile.TemporaryDirectory() as tmp, ProcessPoolExecutor(max_workers=args.jobs) as pool:
            print(f"[{chapter}] kernel paths {paths} ...", flush=True)
            futures = {p: pool.submit(run_path, chapter, KERNEL_PATHS[p], Path(tmp) / p) for p in paths}
            for p, future in futures.items():
                per_path[p], walls[p] = future.result()
        out, device = SPREAD_DIR / f"{chapter}.json", device_info()
        labels = {p: f"{p}@{device['name']}" if args.keep else p for p in paths}
        per_path = {"committed": per_path["committed"]} | {labels[p]: per_path[p] for p in paths}
        environments, paired = {labels[p]: KERNEL_PATHS[p] for p in paths}, paired_spread(per_path)
        rows = spread_table(per_path)
        if args.keep and out.is_file():
            earlier_rows, earlier, earlier_environments = earlier_paths(json.loads(out.read_text()))
            rows, paired = merge_rows(rows, earlier_rows), merge_paired(paired, earlier)
            environments = earlier_environments | environments
        result = {
            "chapter": chapter,
            "seed": 42,
            "profile": "smoke (notebook defaults)",
            "paths": list(environments),
            "environments": environments,
            "wall_s": {labels[p]: w for p, w in walls.items()},
            "device": device,
            "packages": package_versions(),
            "paired": paired,
            "values": rows,
        }
        out.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
        print(f"\n{chapter}: {len(result['values'])} glued name patterns over paths {paths} -> {out.relative_to(ROOT)}")
        print(f"{'comparison':48s} {'spread':>10s} {'MDE':>10s}  verdicts")
        for row in result["paired"]:
            print(
                f"{row['comparison']:48s} {row['estimate_spread']:10.4g} {row['mde']:10.4g}  "
                f"{sorted(set(row['verdicts'].values()))}"
            )
        moved = sorted(((r["spread"], k) for k, r in result["values"].items() if r.get("spread")), reverse=True)[:15]
        print("\nlargest numeric spreads:\n" + "\n".join(f"  {k:60s} {s:.3g}" for s, k in moved))
    return 0


if __name__ == "__main__":
    sys.exit(main())
