"""The ``agentpost`` command line: list, run, validate, ledger, book, refresh.

Exit codes: 0 success; 1 a run failed or a receipt does not validate; 2 bad input (nothing was written);
130 interrupted (Ctrl-C), 143 stopped by SIGTERM, 129 by SIGHUP (a batch stops its runs, removes their folders and
prints what finished, whichever the signal). No command shows a Python traceback (AGENTPOST_DEBUG=1 shows it for an unexpected
error). Commands import what they need when they run, so ``agentpost --help`` starts fast.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from agentpost.errors import UsageError

EPILOG = """exit codes: 0 success; 1 a run failed or a receipt does not validate; 2 bad input (nothing was
written); 130 interrupted (Ctrl-C); 143 SIGTERM; 129 SIGHUP.
environment: AGENTPOST_ROOT (the checkout; default: found from the package), AGENTPOST_DATA (the data
folder; default: ../shared/data next to the checkout)."""


def _describe(runs) -> str:
    from agentpost.evidence.levels import counted_configuration

    group = counted_configuration(runs)
    if not group:
        return f"no valid run ({len(runs)} invalid)"
    ok = sorted(r.receipt["seed"] for r in group if r.valid_ok)
    end = max(r.receipt["timing"]["end"] for r in group)
    stale = (
        " stale: made with older code"
        if any(r.current_stale for r in group)
        else " re-certified on the current code"
        if any(r.certified_by for r in group)
        else ""
    )
    return f"{len(ok)} ok seed(s) {ok} ({end[:16]}){stale}"


def _cmd_list(args) -> int:
    from agentpost.catalogue import chapters
    from agentpost.evidence import receipt as rc
    from agentpost.evidence.levels import group_runs
    from agentpost.evidence.validate import check_run
    from agentpost.catalogue.params import profiles

    runs, adhoc = group_runs([check_run(d, outcomes=False) for d in rc.run_dirs()])
    print(f"{'chapter':18} {'status':12} {'profiles':16} counted evidence")
    for ch in chapters():
        status = "started" if ch.started else "not started"
        newest = [f"{profile}: {_describe(rs)}" for (cid, profile), rs in sorted(runs.items()) if cid == ch.id]
        print(f"{ch.id:18} {status:12} {','.join(profiles(ch)) or '-':16} {'; '.join(newest) or '-'}")
    if adhoc:
        print("\nad-hoc runs (made with -p overrides; never a profile's evidence):")
        for (cid, profile), rs in sorted(adhoc.items()):
            seeds = sorted(r.receipt["seed"] for r in rs)
            print(f"  {cid}/{profile}+overrides: {len(rs)} run(s), seeds {seeds}")
    return _malformed(runs)


def _malformed(runs) -> int:
    """Exit status 2 and one line naming the malformed receipts, after the command listed everything else."""
    from agentpost.evidence.levels import malformed_message

    if message := malformed_message(runs):
        sys.stdout.flush()
        print(f"agentpost: error: {message}", file=sys.stderr)
        return 2
    return 0


def _cmd_run(args) -> int:
    status, invalid = _run(args)
    _say_invalid(invalid)
    return status


def _run(args) -> tuple[int, list[str]]:
    """Run the batch and print its summary; returns the exit status (1 when a run failed or one it just made does
    not validate) and the validation problems of the runs it just made."""
    from agentpost.run.batch import BatchInterrupted, run_batch, summary_table
    from agentpost.run.params import plan_runs

    backend = _backend(args)
    specs = plan_runs(args.chapters, args.profile, seeds=args.seeds, overrides=args.param)
    try:
        results = run_batch(specs, jobs=args.jobs, backend=backend, force=args.force)
    except BatchInterrupted as stop:
        if stop.finished:
            print(summary_table(stop.finished))
        raise
    print(summary_table(results))
    invalid = _invalid_runs(results)
    return (1 if invalid or any(r.status == "failed" for r in results) else 0), invalid


def _invalid_runs(results) -> list[str]:
    """``agentpost validate``'s problems with the runs a batch just made (a cached run validated before reuse)."""
    from agentpost.evidence.validate import check_run
    from agentpost.project import project_root

    return [
        str(p)
        for r in results
        if r.status != "cached" and r.run_dir
        for p in check_run(project_root() / r.run_dir).problems
    ]


def _say_invalid(invalid: list[str]) -> None:
    """The last thing a command prints when runs it made do not validate: each problem, loudly, on stderr."""
    if not invalid:
        return
    runs = sorted({line.split(": ", 1)[0] for line in invalid})
    print(
        f"\n{'=' * 100}\nINVALID: {len(runs)} run(s) just made do not validate ({len(invalid)} problem(s)); "
        "they are not evidence until fixed and re-run:",
        file=sys.stderr,
    )
    for line in invalid:
        print(f"INVALID {line}", file=sys.stderr)
    print("=" * 100, file=sys.stderr)


def _cmd_validate(args) -> int:
    from agentpost.evidence import receipt as rc
    from agentpost.evidence.certificates import certificate_dir
    from agentpost.evidence.certificates import problems as certificate_problems
    from agentpost.evidence.levels import UNKNOWN, configurations, counted_configuration, group_runs
    from agentpost.evidence.validate import check_run, copied_seeds, gpu_evidence_problems

    paths = [Path(p) for p in args.paths] or [rc.runs_root()]
    if args.paths and any(not p.exists() for p in paths):
        raise UsageError(f"no such path: {', '.join(str(p) for p in paths if not p.exists())}")
    if args.paths:
        empty = [str(p) for p in paths if not rc.run_dirs(p)]
        if empty:
            raise UsageError(
                f"no run folder (a folder with {rc.RECEIPT_NAME} and its notebook) in: {', '.join(empty)}"
                "; name a run folder or a folder of runs"
            )
    reports = [check_run(d) for d in sorted({d for p in paths for d in rc.run_dirs(p)})]  # each run checked once
    problems = [p for r in reports for p in r.problems]
    for p in problems:
        print(f"INVALID {p}")
    runs, adhoc = group_runs(reports)
    for (chapter, profile), group in sorted({**runs, **adhoc}.items()):
        if (chapter, profile) != UNKNOWN:
            configurations(group)  # marks the runs a certificate re-certified
            for cert in sorted(certificate_dir(chapter, profile).glob("*.json")):
                for why in certificate_problems(cert):
                    problems.append(f"{cert.as_posix()}: {why}")
                    print(f"INVALID {cert.as_posix()}: {why}")
        for r in group:
            if r.problems:
                continue
            if r.certified_by:
                print(
                    f"RE-CERTIFIED {r.path.as_posix()}: made with older code, reproduced on the current code "
                    f"({', '.join(r.certified_by)})"
                )
            elif r.stale:
                print(
                    f"STALE {r.path.as_posix()}: made with older code ({', '.join(r.stale)} differ from the "
                    "repository's)"
                )
    for (chapter, profile), group in sorted(runs.items()):
        if (chapter, profile) == UNKNOWN:  # receipts naming no catalogue profile
            continue
        for seeds in copied_seeds([r.receipt for r in counted_configuration(group)]):
            problems.append(why := f"{chapter}/{profile}: {_copies(seeds)}")
            print(f"INVALID {why}")
        if profile == "smoke":
            continue
        reasons = gpu_evidence_problems([r.receipt for r in counted_configuration(group)])
        print(
            f"{chapter}/{profile}: "
            + ("counts as GPU evidence" if not reasons else "not GPU evidence: " + "; ".join(reasons))
        )
    print(f"{len(reports)} run(s) checked, {len(problems)} problem(s)")
    return 1 if problems else 0


def _copies(seeds: list[int]) -> str:
    return (
        f"seeds {seeds} recorded identical metrics or near-identical per-item outcomes: one run copied, not "
        "replications; the ledger never counts this configuration"
    )


def _cmd_ledger(args) -> int:
    from agentpost.evidence.ledger import write_ledger
    from agentpost.evidence.levels import collect_runs

    runs = collect_runs()
    rows = write_ledger(Path(args.claims_report) if args.claims_report else None, runs)
    counts = {}
    for row in rows:
        counts[row.reached] = counts.get(row.reached, 0) + 1
    print(
        "ledger written to book/generated/ledger.md; claims by level reached: "
        + ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    )
    return _malformed(runs)


def _num(x, spec: str = "+.4g") -> str:
    return "-" if x is None else format(x, spec)


def _profile_of(chapter_id: str, profile: str):
    from agentpost.catalogue import chapter
    from agentpost.errors import brief
    from agentpost.catalogue.params import profiles

    try:
        ch = chapter(chapter_id)
    except KeyError as err:
        raise UsageError(str(err).strip("'\"")) from None
    if profile not in profiles(ch):
        raise UsageError(f"chapter {chapter_id} has no profile {brief(profile)} (profiles: {', '.join(ch.profiles)})")
    if not ch.comparisons:
        raise UsageError(
            f"chapter {chapter_id} declares no comparison (catalogue: agentpost/catalogue/{chapter_id}.yaml)"
        )
    return ch


def _cmd_compare(args) -> int:
    from agentpost.evidence.comparisons import compute
    from agentpost.evidence.comparisons import configuration_runs
    from agentpost.evidence.design_checks import summary as design_summary
    from agentpost.evidence.levels import collect_runs
    from agentpost.evidence.validate import copied_seeds

    _profile_of(args.chapter, args.profile)
    runs = collect_runs()  # every run, as list and the ledger see them: a stray receipt anywhere is named below
    computed = compute(args.chapter, args.profile, runs)
    seeds = sorted({s for c in computed for s in c.seeds})
    print(f"{args.chapter} / {args.profile}: declared comparisons across seed runs {seeds or 'none'}")
    print(
        f"{'comparison':34} {'claim':5} {'b - a':30} {'estimate':>10} {'95% CI':>22} {'MDE':>8} {'margin':>7} "
        f"{'seeds x items':>13}  verdict"
    )
    for c in computed:
        r = c.result or {}
        ci = f"[{_num(r.get('ci_low'))}, {_num(r.get('ci_high'))}]" if r else "-"
        shape = f"{r['n_seeds']} x {r['n_items']}" if r else "-"
        print(
            f"{c.comparison.id[:34]:34} {c.comparison.claim:5} {(c.comparison.b + ' - ' + c.comparison.a)[:30]:30} "
            f"{_num(r.get('estimate')):>10} {ci:>22} {_num(r.get('mde'), '.3g'):>8} "
            f"{c.comparison.min_effect:>7.3g} {shape:>13}  {c.verdict}"
        )
    print("Design checks (agentpost.evidence.design_checks: no harm, competence, headroom, tuning, identity):")
    for c in computed:
        print(f"  {c.comparison.id}: {design_summary(c.checks)}")
        for check in c.checks:
            print(f"    {check.line()}")
    for c in computed:
        if c.problem:
            print(f"  {c.comparison.id}: not computed: {c.problem}")
        if c.copies:
            print(
                f"  {c.comparison.id}: seeds {sorted(c.copies)} recorded the same outcomes as seeds "
                f"{[c.copies[s] for s in sorted(c.copies)]}; a copy is not a replication and was left out"
            )
    for seeds in copied_seeds([r.receipt for r in configuration_runs(args.chapter, args.profile, runs)]):
        print(f"  {_copies(seeds)}")
    return _malformed(runs)


def _cmd_plan(args) -> int:
    from agentpost.evidence.planning import plan_chapter, render

    _profile_of(args.chapter, args.profile)
    if not 3 <= args.max_seeds <= 1000:
        raise UsageError(f"--max-seeds must be in 3..1000, got {args.max_seeds}")
    print(render(plan_chapter(args.chapter, args.profile, max_seeds=args.max_seeds), args.chapter, args.profile))
    return 0


def _claim_tests(root: Path) -> Path:
    """Run the claim-marked unit and kernel tests; their claims plugin writes the report the ledger reads."""
    import subprocess

    from agentpost.evidence.levels import CLAIMS_REPORT

    report = root / CLAIMS_REPORT
    tests = [str(root / "tests" / d) for d in ("unit", "kernels") if (root / "tests" / d).is_dir()]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            "claim",
            f"--claims-report={report}",
            *tests,
        ],
        cwd=root,
        check=False,
        stdout=subprocess.DEVNULL,
    )
    return report


def _cmd_book(args) -> int:
    import shutil
    import subprocess

    from agentpost.catalogue import chapters
    from agentpost.evidence.levels import read_claims_report
    from agentpost.project import project_root
    from agentpost.catalogue.params import profiles

    if args.claims_report:  # a bad report is named before any run starts
        read_claims_report(Path(args.claims_report))
    started = [c.id for c in chapters() if c.started and "smoke" in profiles(c)]
    status, invalid = 0, []
    if started and not args.skip_runs:
        status, invalid = _run(
            argparse.Namespace(
                chapters=started,
                profile="smoke",
                seeds=None,
                param=[],
                jobs=args.jobs,
                force=False,
                **{k: getattr(args, k) for k in BACKEND_OPTIONS},
            )
        )
    report = args.claims_report or _claim_tests(project_root())
    ledger_status = _cmd_ledger(argparse.Namespace(claims_report=report))
    root = project_root()
    jb = shutil.which("jupyter-book", path=str(Path(sys.executable).parent)) or "jupyter-book"
    build = subprocess.run([jb, "build", str(root), "-W", "-n", "--keep-going", "--path-output", str(root)], cwd=root)
    if build.returncode:
        print("jupyter-book build failed", file=sys.stderr)
    else:
        print(f"book built: {root / '_build' / 'html' / 'index.html'}")
    _say_invalid(invalid)
    return build.returncode or status or ledger_status


def _cmd_migrate(args) -> int:
    from agentpost.evidence import receipt as rc
    from tqdm.auto import tqdm

    from agentpost.evidence.migrate import NotMigrated, migrate_run

    paths = [Path(p) for p in args.paths] or [rc.runs_root()]
    if missing := [str(p) for p in paths if not p.exists()]:
        raise UsageError(f"no such path: {', '.join(missing)}")
    folders = sorted({d for p in paths for d in rc.run_dirs(p)})
    done = failed = 0
    for folder in tqdm(folders, desc="migrate", unit="run", disable=len(folders) < 2):
        if rc.load_raw(folder / rc.RECEIPT_NAME).get("schema_version") == rc.SCHEMA_VERSION:
            continue
        try:
            migrate_run(folder)
            done += 1
        except NotMigrated as why:
            failed += 1
            print(f"NOT MIGRATED {folder.as_posix()}: {why}")
    print(
        f"{len(folders)} run(s): {done} migrated to schema {rc.SCHEMA_VERSION}, {failed} left as they were, "
        f"{len(folders) - done - failed} already current"
    )
    return 1 if failed else 0


def _cmd_recertify(args) -> int:
    from agentpost.catalogue.params import parse_seeds
    from agentpost.run.recertify import recertify

    _profile_of(args.chapter, args.profile)
    seeds = parse_seeds(args.seeds, None, "--seeds") if args.seeds else None
    outcome = recertify(args.chapter, args.profile, seeds, jobs=args.jobs, backend=_backend(args))
    for seed, found in sorted(outcome.differences.items()):
        print(f"seed {seed}: {len(found)} value(s) differ:")
        print(
            "\n".join(f"  {line}" for line in found[:20])
            + (f"\n  ... and {len(found) - 20} more" if len(found) > 20 else "")
        )
    print(outcome.message)
    return 1 if outcome.differences else 0


def _cmd_refresh(args) -> int:
    from papermill.exceptions import PapermillExecutionError

    from agentpost.run.refresh import refresh_notebook

    for chapter_id in args.chapters:
        try:
            seconds = refresh_notebook(chapter_id)
        except PapermillExecutionError as err:
            print(
                f"agentpost: {chapter_id}: cell {err.cell_index} failed: {err.ename}: {str(err.evalue)[:300]}; "
                f"notebooks/{chapter_id}.ipynb is unchanged",
                file=sys.stderr,
            )
            return 1
        print(f"{chapter_id}: executed in {seconds:.1f} s; outputs committed in notebooks/{chapter_id}.ipynb")
    return 0


class _Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    """Descriptions as written (line breaks kept) and each option's default shown, where it has one."""

    def _get_help_string(self, action):
        if action.default in (None, False, []) or "default:" in (action.help or ""):
            return action.help
        return super()._get_help_string(action)


# ---------------------------------------------------------------- backend options (agentpost.run.backends)
BACKEND_OPTIONS = ("backend", "address", "partition", "time")


def _add_backend_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend",
        default="local",
        choices=("local", "ray", "slurm"),
        help="where runs execute: processes on this machine (local, --jobs at a time), a Ray cluster "
        "(ray), a Slurm job array (slurm)",
    )
    parser.add_argument(
        "--address",
        default=None,
        metavar="ADDRESS",
        help="ray: the cluster, auto, ray://HOST:PORT or HOST:PORT (default: start one on this machine)",
    )
    parser.add_argument("--partition", default=None, help="slurm: the partition (default: the cluster's)")
    parser.add_argument(
        "--time", type=int, default=None, metavar="MINUTES", help="slurm: time limit per run in minutes (default: 60)"
    )


def _backend(args):
    from agentpost.run.backends import make_backend

    return make_backend(args.backend, address=args.address, partition=args.partition, minutes=args.time)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentpost",
        formatter_class=_Formatter,
        epilog=EPILOG,
        description="Run, validate and publish the chapters of the agentpost book of evidence.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, func, help: str, description: str | None = None) -> argparse.ArgumentParser:
        cmd = sub.add_parser(
            name, help=help, description=description or help, formatter_class=_Formatter, epilog=EPILOG
        )
        cmd.set_defaults(func=func)
        return cmd

    command("list", _cmd_list, "chapters, their profiles and the evidence each counts")

    run = command(
        "run",
        _cmd_run,
        "execute chapter notebooks through papermill, one process per (chapter, seed)",
        "Execute chapter notebooks through papermill, one process per (chapter, seed), each into\n"
        "book/runs/<chapter>/<profile>/seed-<seed>-<key>/ with a receipt. Everything is checked before\n"
        "the first run starts (profile, parameters and their declared ranges, seeds, data checksums).\n"
        "A run with the same key that succeeded and validates is reused, not run again.",
    )
    run.add_argument("chapters", nargs="+", metavar="CHAPTER", help="chapter ids (see `agentpost list`)")
    run.add_argument("--profile", default="smoke", help="parameter profile: params/<chapter>/<profile>.yaml")
    run.add_argument(
        "--seeds",
        default=None,
        metavar="S1,S2,...",
        help="comma-separated seeds, integers in 0..4294967295 (default: the profile's `seeds:`)",
    )
    run.add_argument(
        "-p",
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one parameter (VALUE parsed as YAML: 3, 0.5, true, [1, 2], text); repeatable. "
        "A run with overrides is ad-hoc: kept apart, never a profile's evidence",
    )
    run.add_argument("--jobs", type=int, default=1, help="runs executed at the same time (local backend)")
    _add_backend_options(run)
    run.add_argument("--force", action="store_true", help="re-run even when a cached successful run exists")

    val = command("validate", _cmd_validate, "recompute receipt hashes and apply the GPU-evidence rules")
    val.add_argument(
        "paths", nargs="*", metavar="PATH", help="run folders or folders of runs (default: every run under book/runs)"
    )

    led = command("ledger", _cmd_ledger, "regenerate the ledger, evidence pages and _toc.yml")
    led.add_argument(
        "--claims-report",
        default=None,
        help="outcomes of claim tests, as the test run wrote them (default: _build/claims-report.json)",
    )

    book = command("book", _cmd_book, "run smoke profiles (cached), regenerate the ledger, build the book")
    book.add_argument("--jobs", type=int, default=2, help="runs executed at the same time (local backend)")
    _add_backend_options(book)
    book.add_argument("--skip-runs", action="store_true", help="build from the runs already recorded")
    book.add_argument("--claims-report", default=None, help="outcomes of claim tests (default: run them now)")

    cmp_ = command(
        "compare",
        _cmd_compare,
        "compute a chapter's declared comparisons across its seed runs",
        "Compute the chapter's declared comparisons (agentpost/catalogue/<chapter>.yaml, `comparisons:`)\n"
        "across the seed runs of the counted configuration (most seeds) of a profile: one seed = one papermill run.\n"
        "Verdicts: better/worse (a difference that matters), ... may be negligible (detectable, within\n"
        "reach of the margin), equivalent (inside the margin), inconclusive, no information.",
    )
    cmp_.add_argument("chapter", metavar="CHAPTER", help="chapter id (see `agentpost list`)")
    cmp_.add_argument("--profile", default="smoke", help="parameter profile whose runs are compared")

    pl = command(
        "plan",
        _cmd_plan,
        "seeds x items each declared comparison needs, from a pilot profile's runs",
        "From the variance components of a pilot (the counted configuration of --profile), the fewest items per seed\n"
        "that bring each declared comparison's MDE at 80% power down to its margin, per seed count, with\n"
        "the predicted wall time from the pilot receipts' timings.",
    )
    pl.add_argument("chapter", metavar="CHAPTER", help="chapter id (see `agentpost list`)")
    pl.add_argument("--profile", default="smoke", help="the pilot profile whose runs are read")
    pl.add_argument("--max-seeds", type=int, default=20, help="largest seed count considered")

    mig = command(
        "migrate",
        _cmd_migrate,
        "rewrite schema 4 runs in the compact schema 5 form (evidence kept bit for bit)",
        "Rewrite schema 4 run folders once into schema 5: per-item outcomes into outcomes.parquet, the\n"
        "notebook gzipped without figures, imported code and the notebook hashed by their code (so a\n"
        "docstring, comment or prose edit stales nothing). Every recorded value must read back bit for\n"
        "bit and the new folder validate, or the run is left as it was.",
    )
    mig.add_argument(
        "paths", nargs="*", metavar="PATH", help="run folders or folders of runs (default: every run under book/runs)"
    )

    rec = command(
        "recertify",
        _cmd_recertify,
        "re-run a sample of a stale batch's seeds; certify it current if they reproduce",
        "Re-execute seeds of a profile's counted batch on the current code (as ordinary runs, kept) and\n"
        "compare each with the old run at its seed: every glued value and per-item outcome within 3x the\n"
        "chapter's kernel-path spread, fingerprint facts by the arms they group. If all reproduce, a sealed\n"
        "certificate under book/runs/<chapter>/<profile>/certificates/ makes the whole batch current (new\n"
        "seeds then join it); otherwise the differing values are named and the batch stays stale.",
    )
    rec.add_argument("chapter", metavar="CHAPTER", help="chapter id (see `agentpost list`)")
    rec.add_argument("--profile", default="cpu", help="the profile whose counted batch is re-certified")
    rec.add_argument(
        "--seeds",
        default=None,
        metavar="S1,S2,...",
        help="seeds to re-run (default: the batch's first seeds, up to 5 recorded minutes, at least one)",
    )
    rec.add_argument("--jobs", type=int, default=1, help="runs executed at the same time (local backend)")
    _add_backend_options(rec)

    ref = command("refresh", _cmd_refresh, "re-execute notebooks in place with their default (smoke) parameters")
    ref.add_argument("chapters", nargs="+", metavar="CHAPTER", help="chapter ids")
    return parser


def check_environment() -> None:
    """A root named by AGENTPOST_ROOT or AGENTPOST_DATA must exist: a typo never falls back silently. A relative
    one is resolved here, once, against the current folder (the run processes and their kernels, which start in
    ``notebooks/``, inherit the absolute path)."""
    for name in ("AGENTPOST_ROOT", "AGENTPOST_DATA"):
        value = os.environ.get(name)
        if value and not Path(value).is_dir():
            raise UsageError(f"{name}={value} is not a folder (unset it to use the default)")
        if value:
            os.environ[name] = str(Path(value).resolve())
    root = os.environ.get("AGENTPOST_ROOT")
    if root and not (Path(root) / "pyproject.toml").is_file():
        raise UsageError(f"AGENTPOST_ROOT={root} is not an agentpost checkout (no pyproject.toml)")


class _TerminalSafe:
    """A text stream that passes everything written through :func:`agentpost.evidence.escape.terminal`: a name from
    a run folder, a profile file or a receipt never sends control characters (an ANSI escape) to the terminal."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        from agentpost.evidence.escape import terminal

        return self._stream.write(terminal(text))

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def main(argv: list[str] | None = None) -> int:
    """Parse ``argv`` and run the command; every expected failure becomes one line on stderr and an exit code."""
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = _TerminalSafe(sys.stdout), _TerminalSafe(sys.stderr)
    try:
        return _main(argv)
    finally:
        sys.stdout, sys.stderr = streams


def _main(argv: list[str] | None) -> int:
    from agentpost.project import skip_slow_optional_imports

    skip_slow_optional_imports()
    args = build_parser().parse_args(argv)
    try:
        check_environment()
        code = args.func(args)
        sys.stdout.flush()  # a closed pipe shows here, inside the handlers below, not at interpreter exit
        return code
    except UsageError as err:
        print(f"agentpost: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        import signal

        signum = getattr(stop, "signum", signal.SIGINT)
        how = "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name
        print(f"agentpost: {str(stop) if hasattr(stop, 'finished') else 'interrupted'} ({how})", file=sys.stderr)
        return 128 + signum
    except BrokenPipeError:  # `agentpost list | head`: the reader left; stop quietly, as Unix tools do
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except Exception as err:  # noqa: BLE001 - the promise: one line, never a traceback
        if os.environ.get("AGENTPOST_DEBUG"):
            raise
        print(
            f"agentpost: unexpected error: {type(err).__name__}: {err} (AGENTPOST_DEBUG=1 shows the traceback)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":
    sys.exit(main())
