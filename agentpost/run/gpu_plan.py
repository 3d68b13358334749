"""The GPU machine's plan (``benchmarks/gpu_all.sh``, or ``python -m agentpost.run.gpu_plan``): a time budget spent
in priority order, what ran and what did not tabled.

The items and their predicted minutes live in ``benchmarks/gpu_predictions.yaml`` (one home; the README shows the
table, :func:`prediction_table` prints it). Order: the ``first`` items in the file's order (the kernel tests
compiled on the device, then the kernel benchmarks), then every chapter's ``a100`` profile by predicted minutes,
fewest first (most evidence per minute: a chapter's three seeds are one item, and a chapter counts only whole).

Budget rule: an item starts only if its predicted minutes fit in what is left of the budget less ``reserve_s``
(kept for validating and packing); a started item is stopped at ``overrun`` times its prediction or when the
budget's reserve is reached, whichever is first: SIGINT to its process group (``agentpost run`` then ends its
running runs and keeps the finished ones), SIGKILL after ``grace_s``. Every item writes its log, and benchmarks
their receipts, under the output folder; profile runs land in ``book/runs/<chapter>/a100/`` as usual and are
validated (``agentpost validate``) and packed into ``a100-runs.tar.gz.part0, part1, ...`` there at the end. With
``--bundle`` (for the device tool, which returns at most 8 files) everything but the table ``gpu_all.txt`` goes into
``gpu-all.tar.gz.part0, part1, ...`` instead: ``cat gpu-all.tar.gz.part* | tar -xz`` gives ``out/...`` (logs,
receipts) and ``book/runs/...``.

This module imports only the standard library, PyYAML and agentpost's project helpers (the evidence code only once
profiles ran; ``agentpost.run`` itself imports none of its modules), so it starts on a bare GPU image;
benchmarks/gpu_all.sh puts the checkout on PYTHONPATH.

``--dry-run-cpu`` rehearses the same path on a CPU: each item's ``dry`` command (tiny sizes, device cpu, the Triton
interpreter), neither predictions nor the budget applied (a rehearsal checks what runs and what it records, not how
fast a CPU that may be busy with other work gets there); a profile item without ``dry_params`` is skipped with that
reason. Its runs
are ad-hoc runs on a CPU: ``agentpost validate`` finds them sound, and the GPU-evidence rules refuse them
(``validate.log``, :func:`evidence_verdicts`).

    benchmarks/gpu_all.sh [--budget-s 570] [--out DIR] [--only NAME ...] [--seeds 42] [--dry-run-cpu] [--bundle]
                          [--list]
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from agentpost.errors import UsageError
from agentpost.project import project_root

PREDICTIONS = Path("benchmarks") / "gpu_predictions.yaml"
KINDS = ("tests", "bench", "train", "profile")
#: The kinds of the items under `first:` (a profile item is built from `chapter`).
STEP_KINDS = KINDS[:-1]
#: Modules every profile run needs (papermill executes the notebook); a profile item's `needs` adds its own.
PROFILE_NEEDS = ("papermill", "scrapbook", "nbformat", "ipykernel", "datasets", "pydantic")
SETTINGS = ("jobs", "seeds", "contention", "overrun", "reserve_s", "grace_s")
#: Size of one packed piece of the profile runs (the device tool returns files of limited size).
PIECE_BYTES = 15 * 2**20


@dataclass(frozen=True)
class Item:
    """One thing the plan may run: kernel tests, a benchmark, or a chapter's ``a100`` profile (all its seeds)."""

    name: str
    kind: str
    minutes: float  # predicted wall minutes of the whole item on the GPU machine
    argv: tuple[str, ...]  # GPU command; {py}, {out}, {jobs}, {seeds}, {chapter} are filled in
    dry: tuple[str, ...] | None  # CPU rehearsal command (None: no rehearsal)
    needs: tuple[str, ...] = ()  # python modules that must be importable
    env: dict = field(default_factory=dict)  # GPU environment additions
    chapter: str | None = None
    cpu_only: bool = False  # a profile whose runs do not use the GPU (no contention between its seeds)


@dataclass(frozen=True)
class Plan:
    settings: dict
    items: tuple[Item, ...]


@dataclass
class Outcome:
    item: Item
    status: str  # done | failed | stopped | skipped
    note: str = ""
    wall_s: float | None = None


def _fail(where: str, message: str):
    raise UsageError(f"{where}: {message}")


def load_plan(path: Path | None = None) -> Plan:
    """The plan from ``gpu_predictions.yaml``, checked before anything runs; items in the order they are tried."""
    path = Path(path) if path else project_root() / PREDICTIONS
    try:
        doc = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as e:
        _fail(str(path), f"cannot read: {e}")
    if not isinstance(doc, dict) or set(doc) != {"settings", "first", "profiles"}:
        _fail(str(path), "must be a mapping with exactly the keys settings, first, profiles")
    settings = doc["settings"]
    if not isinstance(settings, dict) or set(settings) != set(SETTINGS):
        _fail(f"{path}: settings", f"needs exactly {', '.join(SETTINGS)}")
    for key in SETTINGS:
        if key != "seeds" and not (isinstance(settings[key], (int, float)) and settings[key] > 0):
            _fail(f"{path}: settings.{key}", f"must be a positive number, not {settings[key]!r}")
    if not (
        isinstance(settings["seeds"], list)
        and settings["seeds"]
        and all(isinstance(s, int) and not isinstance(s, bool) for s in settings["seeds"])
    ):
        _fail(f"{path}: settings.seeds", "must be a non-empty list of integers")
    items = [_item(path, e, kind=None) for e in doc["first"] or []]
    profiles = [_item(path, e, kind="profile") for e in doc["profiles"] or []]
    names = [i.name for i in items + profiles]
    if dup := sorted({n for n in names if names.count(n) > 1}):
        _fail(str(path), f"item names repeated: {dup}")
    root = path.resolve().parents[1]
    have = sorted(p.parent.name for p in (root / "params").glob("*/a100.yaml"))
    listed = sorted(str(i.chapter) for i in profiles)  # a profile item always names its chapter
    if listed != have:
        _fail(f"{path}: profiles", f"must list every params/*/a100.yaml once: listed {listed}, present {have}")
    return Plan(settings, tuple(items + sorted(profiles, key=lambda i: (item_minutes(i, settings), i.name))))


def _item(path: Path, e, kind: str | None) -> Item:
    where = f"{path}: {e.get('name', e.get('chapter', '?')) if isinstance(e, dict) else e!r}"
    if not isinstance(e, dict):
        _fail(where, "each item must be a mapping")
    if kind == "profile":
        allowed = {"chapter", "minutes_per_seed", "basis", "needs", "dry_params", "cpu_only"}
        if not isinstance(e.get("chapter"), str):
            _fail(where, "a profile item needs `chapter`")
    else:
        allowed = {"name", "kind", "minutes", "basis", "argv", "dry", "needs", "env"}
        if e.get("kind") not in STEP_KINDS:
            _fail(where, f"kind must be one of {STEP_KINDS}, not {e.get('kind')!r}")
        if not (isinstance(e.get("argv"), list) and e["argv"] and all(isinstance(a, str) for a in e["argv"])):
            _fail(where, "argv must be a non-empty list of strings")
    if extra := sorted(set(e) - allowed):
        _fail(where, f"unknown keys {extra} (allowed: {sorted(allowed)})")
    minutes = e.get("minutes_per_seed" if kind == "profile" else "minutes")
    if not (isinstance(minutes, (int, float)) and not isinstance(minutes, bool) and minutes > 0):
        _fail(where, f"predicted minutes must be a positive number, not {minutes!r}")
    if not (isinstance(e.get("basis"), str) and e["basis"].strip()):
        _fail(where, "every prediction states its `basis` (what was measured, the scaling model)")
    needs = e.get("needs", [])
    if not (isinstance(needs, list) and all(isinstance(n, str) for n in needs)):
        _fail(where, "needs must be a list of module names")
    if kind == "profile":
        dry_params = e.get("dry_params")
        if dry_params is not None and not (isinstance(dry_params, dict) and dry_params):
            _fail(where, "dry_params must be a non-empty mapping of parameter overrides")
        if not isinstance(e.get("cpu_only", False), bool):
            _fail(where, "cpu_only must be true or false")
        argv = (
            "{py}",
            "-m",
            "agentpost",
            "run",
            "{chapter}",
            "--profile",
            "a100",
            "--seeds",
            "{seeds}",
            "--jobs",
            "{jobs}",
        )
        dry = (
            None
            if dry_params is None
            else (*argv, *(a for k, v in dry_params.items() for a in ("-p", f"{k}={json.dumps(v)}")))
        )
        return Item(
            f"profile-{e['chapter']}",
            "profile",
            float(minutes),
            argv,
            dry,
            (*PROFILE_NEEDS, *needs),
            {},
            e["chapter"],
            e.get("cpu_only", False),
        )
    dry = e.get("dry")
    if dry is not None and not (isinstance(dry, list) and all(isinstance(a, str) for a in dry)):
        _fail(where, "dry must be a list of strings")
    env = e.get("env", {})
    if not (isinstance(env, dict) and all(isinstance(v, str) for v in env.values())):
        _fail(where, "env must map names to strings")
    if not isinstance(e.get("name"), str):
        _fail(where, "an item needs a `name`")
    return Item(
        e["name"],
        e["kind"],
        float(minutes),
        tuple(e["argv"]),
        tuple(dry) if dry is not None else None,
        tuple(needs),
        env,
    )


def item_minutes(item: Item, settings: dict, dry: bool = False) -> float:
    """Predicted wall minutes of an item. A profile's: minutes per seed x ceil(seeds / jobs) x ``contention`` when
    its concurrent seeds share the GPU (the stated slowdown; 1 for a ``cpu_only`` profile or one run at a time). A
    dry run predicts nothing."""
    if dry:
        return 0.0
    if item.kind != "profile":
        return item.minutes
    waves = -(-len(settings["seeds"]) // int(settings["jobs"]))
    shared = min(int(settings["jobs"]), len(settings["seeds"])) > 1 and not item.cpu_only
    return item.minutes * waves * (settings["contention"] if shared else 1.0)


def prediction_table(plan: Plan) -> str:
    """The predicted-minutes table in the order items are tried (the README's copy of it)."""
    s = plan.settings
    lines = ["| order | item | predicted min per seed | predicted min for the item |", "|---|---|---|---|"]
    for n, item in enumerate(plan.items, 1):
        per_seed = f"{item.minutes:g}" if item.kind == "profile" else "-"
        lines.append(f"| {n} | {item.name} | {per_seed} | {item_minutes(item, s):.1f} |")
    return "\n".join(lines)


def _fill(args: tuple[str, ...], item: Item, settings: dict, out: Path, dry: bool) -> list[str]:
    seeds = settings["seeds"][:1] if dry else settings["seeds"]
    values = {
        "py": sys.executable,
        "out": str(out),
        "jobs": "1" if dry else str(int(settings["jobs"])),
        "seeds": ",".join(map(str, seeds)),
        "chapter": item.chapter or "",
    }
    return [a.format(**values) for a in args]


def _missing(needs: tuple[str, ...]) -> list[str]:
    return [m for m in needs if importlib.util.find_spec(m) is None]


def _run(argv: list[str], env: dict, log: Path, limit_s: float | None, grace_s: float) -> tuple[int | None, float]:
    """Run ``argv`` in its own process group, output to ``log``; at ``limit_s`` (None: no limit) SIGINT the group,
    SIGKILL after ``grace_s``. Returns (exit code or None when stopped, wall seconds)."""
    t0 = time.monotonic()
    with open(log, "w", encoding="utf-8") as fh:
        shown = [Path(a).name if a == sys.executable else a.replace(str(log.parent), "$OUT") for a in argv]
        fh.write(f"$ {' '.join(shown)}\n")  # no machine paths in a log that may be committed
        fh.flush()
        proc = subprocess.Popen(
            argv, cwd=project_root(), env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            rc = proc.wait(timeout=None if limit_s is None else max(limit_s, 0.0))
            return rc, time.monotonic() - t0
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGINT)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()
            return None, time.monotonic() - t0
        except KeyboardInterrupt:  # the caller's Ctrl-C stops the running item the same way, then propagates
            _signal_group(proc, signal.SIGINT)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
            raise


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def execute(
    plan: Plan, budget_s: float, out: Path, dry: bool = False, only: list[str] | None = None, say=print
) -> list[Outcome]:
    """Try every item in order within ``budget_s`` seconds (a ``dry`` run applies no budget); returns one
    :class:`Outcome` per item."""
    s = plan.settings
    deadline = time.monotonic() + budget_s
    base_env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if dry:
        base_env.pop("AGENTPOST_TRITON_GPU", None)
        base_env["TRITON_INTERPRET"] = "1"
        base_env["CUDA_VISIBLE_DEVICES"] = ""
    else:
        base_env.pop("TRITON_INTERPRET", None)  # compiled kernels on the device
    outcomes = []
    for item in plan.items:
        if only and item.name not in only:
            continue
        left = deadline - time.monotonic() - s["reserve_s"]
        predicted = item_minutes(item, s, dry)
        argv = item.dry if dry else item.argv
        if argv is None:
            outcomes.append(Outcome(item, "skipped", "no CPU dry-run sizes in gpu_predictions.yaml"))
        elif missing := _missing(item.needs):
            outcomes.append(Outcome(item, "skipped", f"missing python packages {missing} (carry wheels: WHEELS=)"))
        elif not dry and predicted * 60 > left:
            outcomes.append(
                Outcome(item, "skipped", f"predicted {predicted:.1f} min > {max(left, 0) / 60:.1f} min left")
            )
        else:
            limit = None if dry else min(left, predicted * 60 * s["overrun"])
            say(
                f"== {item.name}: "
                + (
                    "rehearsal, no time limit"
                    if limit is None
                    else f"predicted {predicted:.1f} min, stopped after {limit / 60:.1f} min"
                ),
                flush=True,
            )
            env = base_env if dry else {**base_env, **item.env}
            rc, wall = _run(_fill(argv, item, s, out, dry), env, out / f"{item.name}.log", limit, s["grace_s"])
            if rc is None:
                assert limit is not None  # only a run with a limit is stopped
                why = "budget reserve reached" if limit >= left else f"{s['overrun']:g}x its prediction"
                outcomes.append(Outcome(item, "stopped", f"stopped at {limit / 60:.1f} min ({why})", wall))
            else:
                outcomes.append(Outcome(item, "done" if rc == 0 else "failed", "" if rc == 0 else f"exit {rc}", wall))
        say(f"== {item.name}: {outcomes[-1].status} {outcomes[-1].note}", flush=True)
    return outcomes


def collect_runs(outcomes: list[Outcome], out: Path) -> list[Path]:
    """Validate the a100 runs of every profile item that started and judge them as GPU evidence; returns their
    folders. ``out/validate.log`` gets ``agentpost validate``'s report and one verdict line per chapter and
    configuration (:func:`evidence_verdicts`)."""
    root = project_root()
    chapters = [str(o.item.chapter) for o in outcomes if o.item.kind == "profile" and o.wall_s is not None]
    folders = [root / "book" / "runs" / c / "a100" for c in chapters if (root / "book" / "runs" / c / "a100").is_dir()]
    if folders:
        argv = [sys.executable, "-m", "agentpost", "validate", *map(str, folders)]
        report = subprocess.run(argv, cwd=root, capture_output=True, text=True)
        verdicts = [line for f in folders for line in evidence_verdicts(f)]
        (out / "validate.log").write_text(report.stdout + report.stderr + "\n".join(verdicts) + "\n")
    return folders


def pack(out: Path, runs: list[Path], bundle: bool) -> list[Path]:
    """Pack the run folders into ``out/a100-runs.tar.gz.partN``, or with ``bundle`` everything in ``out`` but
    ``gpu_all.txt`` together with the runs into ``out/gpu-all.tar.gz.partN`` (the loose files removed). Pieces of
    15 MiB; returns them."""
    root = project_root()
    loose = sorted(p for p in out.iterdir() if p.is_file() and p.name != "gpu_all.txt") if bundle else []
    if not runs and not loose:
        return []
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for f in loose:
            tar.add(f, arcname=f"out/{f.name}")
        for f in runs:
            tar.add(f, arcname=f.relative_to(root).as_posix())
    for f in loose:
        f.unlink()
    data, stem = buf.getvalue(), "gpu-all" if bundle else "a100-runs"
    pieces = []
    for n, start in enumerate(range(0, len(data), PIECE_BYTES)):
        pieces.append(out / f"{stem}.tar.gz.part{n}")
        pieces[-1].write_bytes(data[start : start + PIECE_BYTES])
    return pieces


def evidence_verdicts(folder: Path) -> list[str]:
    """Whether the runs under ``folder`` count as GPU evidence, one line per (chapter, profile) and kind of run:
    the GPU-evidence rules (:func:`agentpost.evidence.validate.gpu_evidence_problems`) applied to the counted
    configuration (:func:`agentpost.evidence.levels.configurations`), ad-hoc runs (a dry run's, made with overrides) included, which ``agentpost validate`` leaves out
    because they never count."""
    from agentpost.evidence import receipt as rc
    from agentpost.evidence.levels import counted_configuration, group_runs
    from agentpost.evidence.validate import check_run, gpu_evidence_problems

    profile, adhoc = group_runs([check_run(d) for d in rc.run_dirs(folder)])
    lines = []
    for label, groups in (("", profile), (" (ad-hoc)", adhoc)):
        for (chapter, name), runs in sorted(groups.items()):
            counted = counted_configuration(runs)
            reasons = gpu_evidence_problems([r.receipt for r in counted]) if counted else ["no valid run"]
            lines.append(
                f"GPU evidence {chapter}/{name}{label}: " + ("yes" if not reasons else "no: " + "; ".join(reasons))
            )
    return lines


def outcome_table(outcomes: list[Outcome], settings: dict) -> str:
    """What ran, what was skipped and why; "predicted min" is the GPU prediction (a dry run does not apply it)."""
    head = ("item", "kind", "predicted min", "status", "wall min", "note")
    rows = [
        (
            o.item.name,
            o.item.kind,
            f"{item_minutes(o.item, settings):.1f}",
            o.status,
            "-" if o.wall_s is None else f"{o.wall_s / 60:.1f}",
            o.note,
        )
        for o in outcomes
    ]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [head, *rows])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="gpu_all.sh", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--budget-s",
        type=float,
        default=570.0,
        help="seconds for everything (default 570: the device tool allows 600 s per command)",
    )
    ap.add_argument("--out", type=Path, default=None, help="receipts and logs (default $OUT, else benchmarks/receipts)")
    ap.add_argument("--only", nargs="+", default=None, metavar="NAME", help="items to try (names as --list shows)")
    ap.add_argument(
        "--dry-run-cpu",
        action="store_true",
        help="rehearse on the CPU: tiny sizes, device cpu, Triton interpreter; proves no GPU evidence",
    )
    ap.add_argument(
        "--seeds",
        default=None,
        metavar="S1,S2,...",
        help="the profiles' seeds instead of the file's (e.g. one seed per 10-minute command)",
    )
    ap.add_argument(
        "--bundle",
        action="store_true",
        help="pack every output but gpu_all.txt into gpu-all.tar.gz.partN (the device tool returns 8 files)",
    )
    ap.add_argument("--plan", type=Path, default=None, help=f"predictions file (default {PREDICTIONS})")
    ap.add_argument("--list", action="store_true", help="print the predicted-minutes table and exit")
    args = ap.parse_args(argv)
    try:
        plan = load_plan(args.plan)
        if args.seeds is not None:
            try:
                seeds = [int(x) for x in args.seeds.split(",")]
            except ValueError:
                raise UsageError(f"--seeds must be comma-separated integers, not {args.seeds!r}") from None
            plan = Plan({**plan.settings, "seeds": seeds}, plan.items)
        if args.list:
            print(prediction_table(plan))
            return 0
        if args.budget_s <= 0:
            raise UsageError(f"--budget-s must be positive, not {args.budget_s:g}")
        if args.only and (unknown := sorted(set(args.only) - {i.name for i in plan.items})):
            raise UsageError(f"--only: unknown items {unknown}; known: {[i.name for i in plan.items]}")
        if not args.dry_run_cpu:
            import torch

            if not torch.cuda.is_available():
                raise UsageError("torch sees no CUDA device: run on a GPU machine, or rehearse with --dry-run-cpu")
        out = (args.out or Path(os.environ.get("OUT") or project_root() / "benchmarks" / "receipts")).resolve()
        out.mkdir(parents=True, exist_ok=True)
    except UsageError as e:
        print(f"gpu_all: {e}", file=sys.stderr)
        return 2
    mode = "CPU dry run (no GPU evidence)" if args.dry_run_cpu else "GPU"
    print(f"== gpu_all: {mode}, budget {args.budget_s:.0f} s, output {out}", flush=True)
    try:
        outcomes = execute(plan, args.budget_s, out, args.dry_run_cpu, args.only)
    except KeyboardInterrupt:
        print("gpu_all: interrupted", file=sys.stderr)
        return 130
    runs = collect_runs(outcomes, out)
    table = outcome_table(outcomes, plan.settings)
    verdicts = (out / "validate.log").read_text().rstrip() if runs else "no a100 run to validate"
    (out / "gpu_all.txt").write_text(f"{mode}, budget {args.budget_s:.0f} s\n{table}\n{verdicts}\n")
    (out / "gpu_all.json").write_text(
        json.dumps(
            {
                "mode": mode,
                "budget_s": args.budget_s,
                "runs": [p.relative_to(project_root()).as_posix() for p in runs],
                "items": [
                    {
                        "name": o.item.name,
                        "kind": o.item.kind,
                        "status": o.status,
                        "note": o.note,
                        "wall_s": o.wall_s,
                        "predicted_min": item_minutes(o.item, plan.settings),
                    }
                    for o in outcomes
                ],
            },
            indent=2,
        )
    )
    pieces = pack(out, runs, args.bundle)
    print(table)
    print(verdicts)
    print("packed: " + (", ".join(p.name for p in pieces) or "nothing"))
    return 1 if any(o.status == "failed" for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
