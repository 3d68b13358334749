"""The ``agentpost`` command line: list, run, validate, ledger, book, refresh.

Exit codes: 0 success; 1 a run failed or a receipt does not validate; 2 bad input (nothing was written).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from agentpost.errors import UsageError


def _describe(runs) -> str:
    from agentpost.evidence.levels import newest_configuration

    group = newest_configuration(runs)
    if not group:
        return f"no valid run ({len(runs)} invalid)"
    ok = sorted(r.receipt["seed"] for r in group if r.valid_ok)
    end = max(r.receipt["timing"]["end"] for r in group)
    stale = " stale: made with older code" if any(r.stale for r in group) else ""
    return f"{len(ok)} ok seed(s) {ok} ({end[:16]}){stale}"


def _cmd_list(args) -> int:
    from agentpost.catalogue import chapters
    from agentpost.evidence import receipt as rc
    from agentpost.evidence.levels import group_runs
    from agentpost.evidence.validate import check_run

    runs, adhoc = group_runs([check_run(d) for d in rc.run_dirs()])
    print(f"{'chapter':18} {'status':12} {'profiles':16} newest evidence")
    for ch in chapters():
        status = "started" if ch.started else "not started"
        newest = [f"{profile}: {_describe(rs)}" for (cid, profile), rs in sorted(runs.items()) if cid == ch.id]
        print(f"{ch.id:18} {status:12} {','.join(ch.profiles) or '-':16} {'; '.join(newest) or '-'}")
    if adhoc:
        print("\nad-hoc runs (made with -p overrides; never a profile's evidence):")
        for (cid, profile), rs in sorted(adhoc.items()):
            seeds = sorted(r.receipt["seed"] for r in rs)
            print(f"  {cid}/{profile}+overrides: {len(rs)} run(s), seeds {seeds}")
    return 0


def _cmd_run(args) -> int:
    from agentpost.run.batch import run_batch, summary_table
    from agentpost.run.params import plan_runs

    backend = _backend(args)
    specs = plan_runs(args.chapters, args.profile, seeds=args.seeds, overrides=args.param)
    results = run_batch(specs, jobs=args.jobs, backend=backend, force=args.force)
    print(summary_table(results))
    return 1 if any(r.status == "failed" for r in results) else 0


def _cmd_validate(args) -> int:
    from agentpost.evidence import receipt as rc
    from agentpost.evidence.levels import group_runs, newest_configuration
    from agentpost.evidence.validate import check_run, gpu_evidence_problems

    paths = [Path(p) for p in args.paths] or [rc.runs_root()]
    if args.paths and any(not p.exists() for p in paths):
        raise UsageError(f"no such path: {', '.join(str(p) for p in paths if not p.exists())}")
    reports = [check_run(d) for d in sorted({d for p in paths for d in rc.run_dirs(p)})]  # each run checked once
    problems = [p for r in reports for p in r.problems]
    for p in problems:
        print(f"INVALID {p}")
    for r in reports:
        if r.stale and not r.problems:
            print(f"STALE {r.path.as_posix()}: made with older code ({', '.join(r.stale)} differ from the repository's)")
    runs, _ = group_runs(reports)
    for (chapter, profile), group in sorted(runs.items()):
        if profile == "smoke":
            continue
        reasons = gpu_evidence_problems([r.receipt for r in newest_configuration(group)])
        print(f"{chapter}/{profile}: " + ("counts as GPU evidence" if not reasons else "not GPU evidence: " + "; ".join(reasons)))
    print(f"{len(reports)} run(s) checked, {len(problems)} problem(s)")
    return 1 if problems else 0


def _cmd_ledger(args) -> int:
    from agentpost.evidence.ledger import write_ledger

    rows = write_ledger(Path(args.claims_report) if args.claims_report else None)
    counts = {}
    for row in rows:
        counts[row.reached] = counts.get(row.reached, 0) + 1
    print("ledger written to book/generated/ledger.md; claims by level reached: "
          + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return 0


def _claim_tests(root: Path) -> Path:
    """Run the claim-marked unit and kernel tests; their claims plugin writes the report the ledger reads."""
    from agentpost.evidence.levels import CLAIMS_REPORT

    report = root / CLAIMS_REPORT
    tests = [str(root / "tests" / d) for d in ("unit", "kernels") if (root / "tests" / d).is_dir()]
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "claim",
                    f"--claims-report={report}", *tests], cwd=root, check=False, stdout=subprocess.DEVNULL)
    return report


def _cmd_book(args) -> int:
    from agentpost.catalogue import chapters
    from agentpost.project import project_root

    started = [c.id for c in chapters() if c.started and "smoke" in c.profiles]
    status = 0
    if started and not args.skip_runs:
        status = _cmd_run(argparse.Namespace(chapters=started, profile="smoke", seeds=None, param=[], jobs=args.jobs,
                                             force=False, **{k: getattr(args, k) for k in BACKEND_OPTIONS}))
    report = args.claims_report or _claim_tests(project_root())
    _cmd_ledger(argparse.Namespace(claims_report=report))
    root = project_root()
    jb = shutil.which("jupyter-book", path=str(Path(sys.executable).parent)) or "jupyter-book"
    build = subprocess.run([jb, "build", str(root), "-W", "-n", "--keep-going", "--path-output", str(root)], cwd=root)
    if build.returncode:
        print("jupyter-book build failed", file=sys.stderr)
        return build.returncode
    print(f"book built: {root / '_build' / 'html' / 'index.html'}")
    return status


def _cmd_refresh(args) -> int:
    from agentpost.run.refresh import refresh_notebook

    for chapter_id in args.chapters:
        print(f"{chapter_id}: executed in {refresh_notebook(chapter_id):.1f} s; outputs committed in notebooks/{chapter_id}.ipynb")
    return 0


# ---------------------------------------------------------------- backend options (agentpost.run.backends)
BACKEND_OPTIONS = ("backend", "address", "partition", "time")


def _add_backend_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backend", default="local", choices=("local", "ray", "slurm"),
                        help="where runs execute: a process pool here (local, with --jobs), a Ray cluster, a Slurm array")
    parser.add_argument("--address", default=None, help="ray: the cluster, auto or ray://HOST:PORT (default: start one here)")
    parser.add_argument("--partition", default=None, help="slurm: the partition")
    parser.add_argument("--time", type=int, default=None, metavar="MINUTES", help="slurm: time limit per run (default 60)")


def _backend(args):
    from agentpost.run.backends import make_backend

    return make_backend(args.backend, address=args.address, partition=args.partition, minutes=args.time)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="agentpost", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="chapters, profiles and their newest evidence").set_defaults(func=_cmd_list)

    run = sub.add_parser("run", help="execute chapter notebooks through papermill, one process per (chapter, seed)")
    run.add_argument("chapters", nargs="+")
    run.add_argument("--profile", default="smoke")
    run.add_argument("--seeds", default=None, help="comma-separated seeds; default: the profile's")
    run.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE")
    run.add_argument("--jobs", type=int, default=1)
    _add_backend_options(run)
    run.add_argument("--force", action="store_true", help="re-run even when a cached successful run exists")
    run.set_defaults(func=_cmd_run)

    val = sub.add_parser("validate", help="recompute receipt hashes and apply the GPU-evidence rules")
    val.add_argument("paths", nargs="*")
    val.set_defaults(func=_cmd_validate)

    led = sub.add_parser("ledger", help="regenerate the ledger, evidence pages and _toc.yml")
    led.add_argument("--claims-report", default=None,
                     help="outcomes of claim tests, as the test run wrote them (default: _build/claims-report.json)")
    led.set_defaults(func=_cmd_ledger)

    book = sub.add_parser("book", help="run smoke profiles (cached), regenerate the ledger, build the book")
    book.add_argument("--jobs", type=int, default=2)
    _add_backend_options(book)
    book.add_argument("--skip-runs", action="store_true")
    book.add_argument("--claims-report", default=None, help="outcomes of claim tests (default: run them now)")
    book.set_defaults(func=_cmd_book)

    ref = sub.add_parser("refresh", help="re-execute notebooks in place with their default (smoke) parameters")
    ref.add_argument("chapters", nargs="+")
    ref.set_defaults(func=_cmd_refresh)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UsageError as err:
        print(f"agentpost: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
