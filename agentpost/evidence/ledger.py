"""The evidence ledger: claim levels derived from receipts and test outcomes, and the book pages showing them.

Levels (DESIGN.md), each derived, never typed:

* **mechanism** — every test tied to the claim (``@pytest.mark.claim``) passed, and there is at least one;
* **diagnostic** — a run configuration of a non-synthetic chapter with >= ``min_seeds`` successful, valid
  seeds whose receipts all record the claim's metrics;
* **gpu-diagnostic** — the same from runs on an allowed CUDA device that pass :func:`gpu_evidence_problems`;
* **reproduction** — the same from a profile named ``reproduction`` (the paper's models, data and budgets).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from agentpost.catalogue import Chapter, Claim, chapters
from agentpost.evidence import receipt as rc
from agentpost.evidence.paired_table import is_paired, paired_outcome, paired_rows
from agentpost.evidence.validate import configuration_key, gpu_evidence_problems, validate_run
from agentpost.project import config, project_root

LEVELS = ("mechanism", "diagnostic", "gpu-diagnostic", "reproduction")
GENERATED = "book/generated"


@dataclass
class Run:
    path: Path
    receipt: dict
    problems: list = field(default_factory=list)

    @property
    def valid_ok(self) -> bool:
        return not self.problems and self.receipt.get("status") == "ok"


def collect_runs(chapter_id: str | None = None) -> dict[tuple[str, str], list[Run]]:
    """Every run under book/runs, validated, keyed by (chapter, profile)."""
    root = project_root() / "book" / "runs"
    found: dict[tuple[str, str], list[Run]] = defaultdict(list)
    pattern = f"{chapter_id or '*'}/*/seed-*/{rc.RECEIPT_NAME}"
    for receipt_path in sorted(root.glob(pattern)):
        receipt = rc.load(receipt_path)
        run = Run(receipt_path.parent, receipt, validate_run(receipt_path.parent))
        found[(receipt.get("chapter"), receipt.get("profile"))].append(run)
    return found


def newest_configuration(runs: list[Run]) -> list[Run]:
    """The runs of the configuration (all but the seed equal) that finished most recently."""
    groups: dict[str, list[Run]] = defaultdict(list)
    for run in runs:
        if "hashes" in run.receipt:
            groups[configuration_key(run.receipt)].append(run)
    if not groups:
        return []
    return max(groups.values(), key=lambda g: max(r.receipt["timing"]["end"] for r in g))


def run_claim_tests(report: Path | None = None) -> dict:
    """Outcomes of claim-marked tests: read ``report`` or run them now (unit and kernel tests only)."""
    if report is not None:
        return json.loads(Path(report).read_text())
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "claims.json"
        tests = [str(project_root() / "tests" / d) for d in ("unit", "kernels") if (project_root() / "tests" / d).is_dir()]
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "claim",
                        f"--claims-report={out}", *tests], cwd=project_root(), check=False,
                       stdout=subprocess.DEVNULL)
        return json.loads(out.read_text()) if out.is_file() else {}


@dataclass
class ClaimStatus:
    chapter: Chapter
    claim: Claim
    levels: dict[str, bool]
    notes: dict[str, str]

    @property
    def reached(self) -> str:
        reached = [lvl for lvl in LEVELS if self.levels[lvl]]
        return reached[-1] if reached else "none"


def _has_metrics(group: list[Run], metrics: tuple[str, ...]) -> bool:
    return bool(metrics) and all(all(m in r.receipt["metrics"] for m in metrics) for r in group)


def _outcome(group: list[Run], metrics: tuple[str, ...]) -> str:
    """What the claim's metrics say across the seeds' runs: verdict-like values as recorded, numbers as their mean.

    A level says evidence exists; the outcome says whether it supports the claim, contradicts it or is null.
    """
    parts = []
    for m in metrics:
        values = [r.receipt["metrics"][m] for r in sorted(group, key=lambda r: r.receipt["seed"])]
        if all(is_paired(v) for v in values):
            parts.append(f"{m} = " + " / ".join(paired_outcome(v) for v in values))
        elif all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            parts.append(f"{m} = {sum(values) / len(values):.4g} (mean of {len(values)} seeds)")
        elif all(isinstance(v, (str, bool)) or (isinstance(v, dict) and all(isinstance(x, str) for x in v.values()))
                 for v in values):
            shown = {json.dumps(v, sort_keys=True) for v in values}
            text = " / ".join(_fmt(v) for v in values) if len(shown) > 1 else _fmt(values[0])
            parts.append(f"{m} = {text}")
    return "; ".join(parts)


def claim_status(chapter: Chapter, claim: Claim, tests: dict, runs: dict[tuple[str, str], list[Run]]) -> ClaimStatus:
    levels = dict.fromkeys(LEVELS, False)
    notes = {}
    t = tests.get(f"{chapter.id}/{claim.id}")
    if t:
        levels["mechanism"] = t["passed"] > 0 and t["failed"] == 0
        notes["mechanism"] = f"{t['passed']} passed, {t['failed']} failed"
    else:
        notes["mechanism"] = "no test tied to this claim"
    min_seeds = config()["min_seeds"]
    for (cid, profile), chapter_runs in runs.items():
        if cid != chapter.id:
            continue
        group = [r for r in newest_configuration(chapter_runs) if r.valid_ok]
        seeds = {r.receipt["seed"] for r in group}
        if len(seeds) < min_seeds or not _has_metrics(group, claim.metrics):
            continue
        receipts = [r.receipt for r in group]
        on_gpu = not gpu_evidence_problems(receipts)
        level = "reproduction" if profile == "reproduction" and on_gpu else "gpu-diagnostic" if on_gpu else "diagnostic"
        if chapter.synthetic:
            notes["diagnostic"] = "synthetic data: never counts as a diagnostic"
            continue
        # A GPU (or reproduction) configuration is also the diagnostic run at a larger scale.
        reached = {"diagnostic"} | ({"gpu-diagnostic"} if on_gpu else set()) | ({level} if level == "reproduction" else set())
        for lvl in reached:
            levels[lvl] = True
            notes[lvl] = f"profile {profile}, seeds {sorted(seeds)}"
        if outcome := _outcome(group, claim.metrics):
            notes["outcome"] = outcome
    if not claim.metrics:
        notes.setdefault("diagnostic", "no metric is tied to this claim")
    return ClaimStatus(chapter, claim, levels, notes)


def ledger_rows(tests: dict, runs) -> list[ClaimStatus]:
    return [claim_status(ch, cl, tests, runs) for ch in chapters() for cl in ch.claims]


# ---------------------------------------------------------------- pages

def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_fmt(v)}" for k, v in value.items())
    return str(value)


def _scalar_metrics(group: list[Run]) -> list[str]:
    names = set()
    for r in group:
        names |= {k for k, v in r.receipt["metrics"].items() if isinstance(v, (int, float, str)) and not isinstance(v, bool)}
    return sorted(names)


def ledger_page(rows: list[ClaimStatus]) -> str:
    lines = [
        "# Evidence ledger",
        "",
        "Generated by `agentpost ledger` from the receipts under `book/runs/` and the outcomes of the tests tied to",
        "each claim; nothing here is typed by hand. A level is reached only when its rule holds (see",
        "[evidence levels](../evidence-levels.md)); levels are not interchangeable.",
        "",
        "## Summary",
        "",
        "| chapter | status | claims | " + " | ".join(LEVELS) + " |",
        "|---|---|---|" + "---|" * len(LEVELS),
    ]
    for ch in chapters():
        mine = [r for r in rows if r.chapter.id == ch.id]
        name = f"[{ch.id}](#{ch.id})"
        counts = " | ".join(str(sum(r.levels[lvl] for r in mine)) for lvl in LEVELS)
        lines.append(f"| {name} | {'started' if ch.started else 'not started'} | {len(mine)} | {counts} |")
    lines += ["", "Each count is the number of the chapter's claims that reached that level.", ""]
    for ch in chapters():
        lines += [f"({ch.id})=", f"## {ch.title}", ""]
        meta = [f"*{ch.id}*", "chapter started" if ch.started else "**not started**"]
        if ch.arxiv:
            meta.append(f"arXiv [{ch.arxiv}](https://arxiv.org/abs/{ch.arxiv})")
        if ch.started:
            meta.append(f"[runs and metrics](evidence/{ch.id}.md)")
        lines += [" · ".join(meta), "", "| claim | level reached | how it was derived |", "|---|---|---|"]
        for row in (r for r in rows if r.chapter.id == ch.id):
            text = row.claim.text.replace("|", "\\|")
            how = "<br>".join(f"{k}: {v}" for k, v in row.notes.items())
            lines.append(f"| **{row.claim.id}** {text} | **{row.reached}** | {how} |")
        lines += ["", "**Gaps toward a reproduction**", ""] + [f"- {g}" for g in ch.gaps] + [""]
    return "\n".join(lines)


def _figure(chapter_id: str, profile: str, group: list[Run], names: list[str], out_dir: Path) -> str | None:
    numeric = [n for n in names if all(isinstance(r.receipt["metrics"].get(n), (int, float)) for r in group)]
    if not numeric:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    numeric = numeric[:12]
    fig, axes = plt.subplots(1, len(numeric), figsize=(2.2 * len(numeric), 2.4), squeeze=False)
    for ax, name in zip(axes[0], numeric):
        values = [r.receipt["metrics"][name] for r in group]
        ax.scatter(range(len(values)), values, color="tab:blue")
        ax.axhline(sum(values) / len(values), color="tab:gray", lw=1)
        ax.set_xticks(range(len(values)), [str(r.receipt["seed"]) for r in group], fontsize=7)
        ax.set_title(name, fontsize=7)
        ax.tick_params(labelsize=7)
    fig.suptitle(f"{chapter_id} · {profile}: recorded metrics per seed (line: mean)", fontsize=8)
    fig.tight_layout()
    path = out_dir / f"{chapter_id}-{profile}-metrics.png"
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path.name


def evidence_page(chapter: Chapter, runs, rows: list[ClaimStatus], out_dir: Path) -> str:
    lines = [f"# Evidence: {chapter.title}", "",
             "Generated by `agentpost ledger`. Each run is one papermill execution of the chapter notebook at one seed;",
             "its receipt holds hashes of every input and the recorded metrics, and `agentpost validate` recomputes them.", ""]
    lines += ["| claim | level reached | notes |", "|---|---|---|"]
    for row in rows:
        if row.chapter.id == chapter.id:
            notes = "; ".join(f"{k}: {v}" for k, v in row.notes.items())
            lines.append(f"| {row.claim.id} | **{row.reached}** | {notes} |")
    lines.append("")
    profiles = sorted(p for (c, p) in runs if c == chapter.id)
    if not profiles:
        lines.append("No runs yet: `agentpost run " + chapter.id + " --profile smoke`.")
    for profile in profiles:
        all_runs = runs[(chapter.id, profile)]
        group = sorted(newest_configuration(all_runs), key=lambda r: r.receipt["seed"])
        lines += [f"## Profile `{profile}`", "",
                  f"Newest configuration: {len(group)} run(s); {len(all_runs)} run(s) on record.", "",
                  "| seed | status | valid | wall s | peak RSS MiB | device | receipt | notebook |",
                  "|---|---|---|---|---|---|---|---|"]
        for r in group:
            rel = Path("../..") / r.path.relative_to(project_root() / "book")
            rec = r.receipt
            lines.append(
                f"| {rec['seed']} | {rec['status']} | {'yes' if not r.problems else 'NO: ' + '; '.join(p.field for p in r.problems)} "
                f"| {rec['timing']['wall_s']:.1f} | {rec['peak_memory']['host_rss_bytes'] / 2**20:.0f} "
                f"| {rec['device']['kind']}: {rec['device']['name']} "
                f"| {{download}}`receipt.json <{rel.as_posix()}/receipt.json>` "
                f"| {{download}}`notebook.ipynb <{rel.as_posix()}/notebook.ipynb>` |")
        names = _scalar_metrics(group)
        if names:
            lines += ["", "### Recorded metrics across seeds", "",
                      "| metric | " + " | ".join(f"seed {r.receipt['seed']}" for r in group) + " |",
                      "|---|" + "---|" * len(group)]
            for n in names:
                lines.append(f"| `{n}` | " + " | ".join(_fmt(r.receipt["metrics"].get(n, "")) for r in group) + " |")
            fig = _figure(chapter.id, profile, group, names, out_dir)
            if fig:
                lines += ["", f"![recorded metrics per seed]({fig})"]
        if table := paired_rows(r.receipt for r in group):
            lines += ["", "### Paired comparisons recorded by each run", "", table]
        lines.append("")
    return "\n".join(lines) + "\n"


def toc(started: list[Chapter]) -> dict:
    parts = [
        {"caption": "Reading the evidence",
         "chapters": [{"file": "book/evidence-levels"}, {"file": "book/receipts"}, {"file": f"{GENERATED}/ledger"}]},
        {"caption": "Chapters",
         "chapters": [{"file": f"notebooks/{c.id}", "sections": [{"file": f"{GENERATED}/evidence/{c.id}"}]} for c in started]},
    ]
    return {"format": "jb-book", "root": "book/intro", "parts": parts}


def write_ledger(tests_report: Path | None = None) -> list[ClaimStatus]:
    """Regenerate book/generated/ (ledger and evidence pages) and _toc.yml; returns the claim statuses."""
    root = project_root()
    out = root / GENERATED
    ev_dir = out / "evidence"
    ev_dir.mkdir(parents=True, exist_ok=True)
    for stale in ev_dir.glob("*"):
        stale.unlink()
    tests = run_claim_tests(tests_report)
    runs = collect_runs()
    rows = ledger_rows(tests, runs)
    paired = paired_rows(r.receipt for k in sorted(runs, key=str) for r in newest_configuration(runs[k]) if r.valid_ok)
    rc.write_atomic(out / "ledger.md", ledger_page(rows) + ("\n## Paired comparisons of every chapter\n\n" + paired
                                                           if paired else ""))
    started = [c for c in chapters() if c.started]
    for ch in started:
        rc.write_atomic(ev_dir / f"{ch.id}.md", evidence_page(ch, runs, rows, ev_dir))
    header = "# Generated by `agentpost ledger` from the catalogue; do not edit.\n"
    rc.write_atomic(root / "_toc.yml", header + yaml.safe_dump(toc(started), sort_keys=False))
    return rows
