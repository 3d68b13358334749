"""Issue 47: evidence that cannot be quietly edited or hidden, on a throwaway project holding a copy of the committed
deltas cpu runs (5 seeds, the smallest committed batch; nothing is executed).

* one discovery of runs: a stray receipt is named by list, validate, compare, ledger and book and hides no run;
* names checked where they are listed and never sent raw to a terminal or a page;
* forgeries, each a consistent, resealed edit (every hash and the seal recomputed, the outcomes' visible summary
  re-rendered): per-item outcomes edited alone, a seed copied under other seeds with a value nudged, an older
  receipt schema;
* bad inputs caught before any run starts.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agentpost.evidence import receipt as rc
from agentpost.evidence import run_store
from agentpost.project import project_root
from agentpost.record.hashing import sha256_bytes
from agentpost.record.outcomes import outcomes_html, outcomes_text
from agentpost.record.recording import SCRAP_MIME
from tests.e2e.test_bad_input import _fresh_caches

REPO = project_root()
DATA = REPO.parent / "shared" / "data"
CHAPTER = "deltas"
RUNS = Path(rc.RUNS_DIR) / CHAPTER / "cpu"
COMMITTED = sorted((REPO / RUNS).glob("seed-*"))
pytestmark = pytest.mark.skipif(len(COMMITTED) < 3 or not DATA.is_dir(), reason="needs the committed deltas runs")


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project with the repository's notebooks, profiles and book pages and a copy of the deltas cpu runs."""
    import shutil

    root = tmp_path / "project"
    root.mkdir()
    for name in ("pyproject.toml", "_config.yml"):
        shutil.copy(REPO / name, root / name)
    shutil.copytree(REPO / "params", root / "params")
    shutil.copytree(REPO / "notebooks", root / "notebooks")
    shutil.copytree(REPO / "book", root / "book", ignore=shutil.ignore_patterns("runs", "generated"))
    for folder in COMMITTED:
        shutil.copytree(folder, root / RUNS / folder.name)
    monkeypatch.setenv("AGENTPOST_ROOT", str(root))
    monkeypatch.setenv("AGENTPOST_DATA", str(DATA))
    monkeypatch.setenv("AGENTPOST_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(root)
    _fresh_caches()
    yield root
    _fresh_caches()


def cli(capsys, *argv: str) -> tuple[int, str]:
    """``agentpost ARGV`` in this process: (exit code, stdout and stderr together)."""
    from agentpost.cli import main

    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and "unexpected error" not in out + err, out + err
    return code, out + err


def seeds(project: Path) -> dict[int, Path]:
    return {int(p.name.split("-")[1]): p for p in sorted((project / RUNS).glob("seed-*"))}


def reseal(folder: Path, edit_outcomes=None, edit_receipt=None) -> None:
    """Edit a run as a careful forger would: the outcomes file rewritten, the outcomes' visible per-arm summaries in
    the notebook re-rendered from the new values, every hash and the seal recomputed."""
    receipt = json.loads((folder / rc.RECEIPT_NAME).read_text())
    if edit_outcomes is not None:
        stored = run_store.read_outcomes((folder / run_store.OUTCOMES_NAME).read_bytes())
        edit_outcomes(stored)
        data = run_store.outcomes_bytes(stored)
        (folder / run_store.OUTCOMES_NAME).write_bytes(data)
        receipt["outcomes_sha256"] = sha256_bytes(data)
        nb_path = folder / rc.STORED_NOTEBOOK_NAME
        nb = json.loads(run_store.read_notebook_text(nb_path))
        for cell in nb["cells"]:
            for out in cell.get("outputs", []):
                bundle = out.get("data") or {}
                scrap = bundle.get(SCRAP_MIME)
                if isinstance(scrap, dict) and scrap.get("name") in stored:
                    full = {"metric": scrap["data"]["metric"], **stored[scrap["name"]]}
                    bundle["text/plain"] = outcomes_text(full)
                    if "text/html" in bundle:
                        bundle["text/html"] = outcomes_html(full)
        text = json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
        nb_path.write_bytes(run_store.stored_notebook_bytes(text))
        receipt["hashes"]["output_notebook"] = sha256_bytes(text.encode())
    if edit_receipt is not None:
        edit_receipt(receipt)
    (folder / rc.RECEIPT_NAME).write_text(rc.dump(rc.seal(receipt)))


def claims_report(project: Path) -> str:
    path = project / "claims.json"
    path.write_text("{}")
    return str(path)


# ---------------------------------------------------------------- one discovery of runs


@pytest.mark.parametrize("where", ["", CHAPTER, f"{CHAPTER}/cpu", f"{CHAPTER}/cpu/certificates"])
def test_a_stray_receipt_is_named_by_every_command_and_hides_no_run(project, capsys, monkeypatch, where):
    stray = project / rc.RUNS_DIR / where / rc.RECEIPT_NAME
    stray.parent.mkdir(parents=True, exist_ok=True)
    stray.write_bytes((COMMITTED[0] / rc.RECEIPT_NAME).read_bytes())  # a valid receipt, in the wrong place
    named = f"{stray.parent.as_posix()}/{rc.RECEIPT_NAME} (folder: stray receipt"

    code, out = cli(capsys, "list")
    assert code == 2 and named in out and "cpu: 5 ok seed(s) [42, 43, 44, 45, 46]" in out

    code, out = cli(capsys, "validate")
    assert code == 1 and f"INVALID {stray.parent.as_posix()}: folder: stray receipt" in out
    assert f"{len(COMMITTED) + 1} run(s) checked, " in out  # the runs beside it were checked too

    code, out = cli(capsys, "compare", CHAPTER, "--profile", "cpu")
    assert code == 2 and named in out and "5 x 900" in out  # still computed over the five seeds

    code, out = cli(capsys, "ledger", "--claims-report", claims_report(project))
    assert code == 2 and named in out and "diagnostic" in out

    import subprocess

    monkeypatch.setattr(subprocess, "run", lambda *a, **k: subprocess.CompletedProcess(a, 0))  # no jupyter-book
    code, out = cli(capsys, "book", "--skip-runs", "--claims-report", claims_report(project))
    assert code == 2 and named in out


def test_a_run_folder_in_place_is_no_stray(project):
    for folder in seeds(project).values():
        assert not rc.misplaced(folder)
    assert rc.misplaced(project / rc.RUNS_DIR) and rc.misplaced(project / RUNS)
    assert not rc.misplaced(Path("/elsewhere/a-copy-of-a-run"))  # outside the runs root: the folder check judges it


# ---------------------------------------------------------------- names


HOSTILE_PROFILE = "x\n```{raw} html\n<img src=x onerror=alert(1)>\n```\n"


@pytest.mark.parametrize(
    "argv",
    [("list",), ("validate",), ("compare", CHAPTER, "--profile", "cpu"), ("run", CHAPTER), ("ledger",)],
    ids=lambda a: a[0],
)
def test_a_profile_file_name_with_markup_is_refused_where_profiles_are_listed(project, capsys, argv):
    (project / "params" / CHAPTER / f"{HOSTILE_PROFILE}.yaml").write_text("seeds: [1]\n")
    if argv == ("ledger",):
        argv = ("ledger", "--claims-report", claims_report(project))
    code, out = cli(capsys, *argv)
    assert code == 2
    assert "params/deltas/'x\\n```{raw} html" in out and "a chapter or profile name must be" in out
    assert "<img" not in out.split("'x\\n")[0] and "\n```" not in out  # named as a quoted value, on one line
    assert not (project / "book" / "generated").exists()


def test_the_verdicts_heading_holds_a_profile_name_as_code(tmp_path):
    from agentpost.catalogue import chapter
    from agentpost.evidence.comparisons import Computed
    from agentpost.evidence.verdicts import verdicts_notebook

    deltas = chapter(CHAPTER)
    ran = [Computed(CHAPTER, "x", c, seeds=[1, 2, 3], problem="no outcomes") for c in deltas.comparisons]
    idle = [Computed(CHAPTER, "y", c, problem="no run") for c in deltas.comparisons]
    nb = verdicts_notebook(deltas, {"a`b\n<img>": ran, "c`d\n<b>": idle}, tmp_path)
    heading = next(c for c in nb["cells"] if "".join(c["source"]).startswith("## Profile"))
    assert "".join(heading["source"]).split("\n")[0] == "## Profile ``a`b <img>``"
    not_run = next(c for c in nb["cells"] if "".join(c["source"]).startswith("**Not run yet:**"))
    assert "``c`d <b>``" in "".join(not_run["source"])  # a profile that never ran is named as code too


def test_control_characters_never_reach_the_terminal(project, capsys):
    """A run folder whose name holds an ANSI escape and a newline is named escaped, on one line."""
    import shutil

    hostile = project / RUNS / "seed-1-\x1b[31mred\nnext"
    shutil.copytree(COMMITTED[0], hostile)
    code, out = cli(capsys, "validate")
    assert code == 1 and "\x1b" not in out and "seed-1-\\x1b[31mred" in out


def test_terminal_escapes_what_a_name_may_smuggle():
    from agentpost.evidence.escape import one_line, terminal

    assert terminal("a\x1b[2Jb\u202ec\x07\n\t\r") == "a\\x1b[2Jb\\u202ec\\x07\n\t\r"
    assert one_line("two\nlines") == "two\\nlines"


# ---------------------------------------------------------------- forgeries


def test_per_item_outcomes_edited_alone_are_caught(project, capsys):
    """The drift arm's outcomes shifted by +0.5 nats, resealed: the recorded per-policy table still holds the old
    mean, which is no arm's mean of the edited outcomes. Before issue 47: 0 problems."""

    def shift(stored):
        arms = stored["outcomes_lm_nll"]["arms"]
        arms["drift"] = [v + 0.5 for v in arms["drift"]]

    reseal(seeds(project)[42], edit_outcomes=shift)
    code, out = cli(capsys, "validate", str(seeds(project)[42]))
    assert code == 1, out
    assert "metrics.lm_nll_by_policy_and_budget[*].drift: recorded [" in out
    assert "none of which is an arm's mean of the run's per-item outcomes_lm_nll" in out


def test_derived_summaries_hold_on_every_committed_run(project):
    """The links are learnt from the chapter's notebook; every committed run of the chapter keeps them."""
    from agentpost.evidence.validate import derivation_problems, derived_summaries

    links = derived_summaries(CHAPTER)
    assert {"lm_nll_full", "lm_nll_no_kv", "lm_headroom_mean", "lm_nll_by_policy_and_budget[*].drift"} <= set(links)
    for folder in seeds(project).values():
        assert derivation_problems(run_store.read_receipt(folder)) == []


def test_a_summary_is_an_arm_mean_computed_by_hand():
    from agentpost.evidence.validate import outcome_statistics

    outcomes = {
        "kind": "outcomes",
        "metric": "m",
        "items": ["a", "b", "c", "d"],
        "arms": {"x": [1.0, 2.0, 4.5, 0.5], "y": [2.0, 2.5, 5.0, 1.0], "flags": [0.0, 1.0, 1.0, 0.0]},
        "facts": {},
    }
    stats = outcome_statistics({"outcomes_m": outcomes})
    assert sorted(stats[("outcomes_m", "mean")]) == [2.0, 2.625]  # flags: 2 distinct values of 4, never linked
    assert sorted(stats[("outcomes_m", "difference")]) == [-0.625, 0.625]


def test_a_seed_copied_under_other_seeds_with_a_value_nudged_is_flagged(project, capsys):
    """Seeds 43 and 44 given seed 42's per-item outcomes, one value nudged by 1e-9. Their recorded summaries then
    contradict their outcomes (validate: invalid, never counted); a forger who also copied every summary is caught
    by the near-copy rule, which the ledger, the GPU rules, compare and validate apply to the counted runs."""
    from agentpost.evidence.validate import copied_seeds

    runs = seeds(project)
    original = run_store.read_outcomes((runs[42] / run_store.OUTCOMES_NAME).read_bytes())

    def copy_of_42(nudge):
        def edit(stored):
            stored.clear()
            stored.update(json.loads(json.dumps(original)))
            first = next(iter(stored.values()))
            first["arms"][next(iter(first["arms"]))][0] += nudge

        return edit

    receipts = [run_store.read_receipt(folder) for folder in runs.values()]
    assert copied_seeds(receipts) == []
    reseal(runs[43], edit_outcomes=copy_of_42(1e-9))
    reseal(runs[44], edit_outcomes=copy_of_42(2e-9))
    code, out = cli(capsys, "validate")
    assert code == 1 and f"INVALID {runs[43].as_posix()}: metrics.lm_nll" in out and str(runs[42]) not in out
    copied = [
        {**r, "metrics": {**r["metrics"], **{k: v for k, v in c["metrics"].items() if k.startswith("outcomes_")}}}
        for r, c in zip(receipts, [run_store.read_receipt(folder) for folder in runs.values()])
    ]
    assert copied_seeds(copied) == [[42, 43, 44]]


def copy_as_seed(source: Path, seed: int, nudge: float) -> Path:
    """Seed ``source`` copied wholly as ``seed``, as a forger would (issue 47): the seed in the receipt, its
    parameters and the notebook's injected cell and papermill record, the run key and the folder; one outcome
    nudged by ``nudge`` (its per-arm text re-rendered) so the metrics are not identical; everything resealed."""
    import shutil

    old_seed = json.loads((source / rc.RECEIPT_NAME).read_text())["seed"]
    folder = source.with_name(f"seed-{seed}-copy")
    shutil.copytree(source, folder)
    path = folder / rc.STORED_NOTEBOOK_NAME
    nb = json.loads(run_store.read_notebook_text(path))
    for cell in nb["cells"]:
        if "injected-parameters" in cell["metadata"].get("tags", []):
            text = "".join(cell["source"])
            cell["source"] = text.replace(f"seed = {old_seed}\n", f"seed = {seed}\n")
    nb["metadata"]["papermill"]["parameters"]["seed"] = seed
    text = json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    path.write_bytes(run_store.stored_notebook_bytes(text))

    def relabel(r):
        r["seed"], r["parameters"]["seed"] = seed, seed
        r["hashes"]["output_notebook"] = sha256_bytes(text.encode())

    def nudged(stored):
        first = stored[sorted(stored)[0]]
        first["arms"][sorted(first["arms"])[0]][0] += nudge

    reseal(folder, edit_receipt=relabel)
    reseal(folder, edit_outcomes=nudged)

    def keyed(r):
        r["run_key"] = rc.run_key_of(r)

    reseal(folder, edit_receipt=keyed)
    key = json.loads((folder / rc.RECEIPT_NAME).read_text())["run_key"]
    return folder.rename(folder.with_name(f"seed-{seed}-{key}"))


def test_a_seed_copied_wholly_as_two_more_seeds_is_never_three_replications(project, capsys):
    """The issue's case: seed 42 copied as seeds 47 and 48, one value nudged by 1e-9; before issue 47 the batch
    counted seven replications. Each copy validates alone; the batch names them and never counts them."""
    runs = seeds(project)
    copies = [copy_as_seed(runs[42], 47, 1e-9), copy_as_seed(runs[42], 48, 2e-9)]
    code, out = cli(capsys, "validate")
    assert code == 1 and "0 problem(s)" not in out
    assert "INVALID deltas/cpu: seeds [42, 47, 48] recorded identical metrics or near-identical" in out
    assert not [line for line in out.splitlines() if line.startswith(f"INVALID {copies[0].as_posix()}")], out
    code, out = cli(capsys, "compare", CHAPTER, "--profile", "cpu")
    assert "5 x 900" in out and "seeds [47, 48] recorded the same outcomes as seeds [42, 42]" in out  # left out
    cli(capsys, "ledger", "--claims-report", claims_report(project))
    assert (
        r"seeds \[\[42, 47, 48\]\] recorded identical metrics (copies); never counted"  # escaped on the page
        in (project / "book" / "generated" / "ledger.md").read_text()
    )


def test_near_copies_measured_against_the_items_spread():
    """Two arms: a reference that every seed scores alike (deterministic) and a trained arm. Seeds agreeing on the
    reference alone are replications; seeds agreeing on both within 2% of the spread are one run copied."""
    from agentpost.evidence.validate import copied_seeds, near_copies

    def receipt(seed, trained):
        arms = {"reference": [1.0, 2.0, 3.0, 4.0], "trained": trained}
        return {
            "seed": seed,
            "metrics": {
                "outcomes_m": {"kind": "outcomes", "metric": "m", "items": list("abcd"), "arms": arms, "facts": {}},
                "other": seed,
            },
        }

    honest = [receipt(1, [1.0, 2.0, 3.0, 4.0]), receipt(2, [1.5, 1.5, 3.5, 3.0]), receipt(3, [0.5, 2.5, 2.0, 4.5])]
    assert near_copies(honest) == [] and copied_seeds(honest) == []
    # trained at seed 1: mean |x - mean| = 1.0; nudged by 0.04 on one item (spread 0.99): 0.01 / 0.995 of it
    nudged = receipt(4, [1.04, 2.0, 3.0, 4.0])
    assert near_copies([*honest, nudged]) == [(1, 4)]
    assert copied_seeds([*honest, nudged]) == [[1, 4]]
    assert near_copies([*honest, receipt(5, [1.1, 2.0, 3.0, 4.0])]) == []  # 0.025 / 0.9875: not a copy
    other_items = receipt(6, [1.0, 2.0, 3.0, 4.0])
    other_items["metrics"]["outcomes_m"]["items"] = list("wxyz")  # a nested design: never compared
    assert near_copies([*honest, other_items]) == []


def test_an_older_receipt_schema_is_never_current(project):
    from agentpost.evidence.levels import Run
    from agentpost.evidence.validate import stale_inputs

    current = run_store.read_receipt(COMMITTED[0])
    assert "schema_version" not in stale_inputs(current)
    for version in (2, 3, 4):
        assert "schema_version" in stale_inputs({**current, "schema_version": version})
    run = Run(Path("x"), {}, stale=["schema_version", "imported_code"], certified_by=["cert.json"])
    assert run.current_stale == ["schema_version"]  # a certificate re-certifies code, never an older schema


def test_a_receipt_downgraded_to_schema_3_is_stale_or_invalid(project, capsys):
    """A schema 3 receipt has no imported-code list and cannot seal an outcomes file: resealed, it is invalid."""

    def downgrade(r):
        for key in ("imported_code", "notebook_code", "outcomes_sha256"):
            r.pop(key)
        r["schema_version"] = 3

    folder = seeds(project)[45]
    reseal(folder, edit_receipt=downgrade)
    code, out = cli(capsys, "validate", str(folder))
    assert code == 1 and "outcomes.parquet: present but the receipt seals none" in out


def test_a_run_rewritten_as_schema_4_validates_but_is_stale(project, capsys):
    """A consistent downgrade to schema 4 (the notebook and outcomes back in JSON, imported files by their bytes'
    sha256, resealed) loses the code-hash rules; it still validates, but is refused as current and not counted with
    the current seeds."""
    from agentpost.record.hashing import sha256_file

    folder = seeds(project)[46]
    receipt = json.loads((folder / rc.RECEIPT_NAME).read_text())
    outcomes = (folder / run_store.OUTCOMES_NAME).read_bytes()
    nb = json.loads(run_store.read_notebook_text(folder / rc.STORED_NOTEBOOK_NAME))
    nb, metrics = run_store.inflate(nb, receipt["metrics"], outcomes)
    text = json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    for name in (rc.STORED_NOTEBOOK_NAME, run_store.OUTCOMES_NAME):
        (folder / name).unlink()
    (folder / rc.NOTEBOOK_NAME).write_text(text)
    for key in ("notebook_code", "outcomes_sha256"):
        receipt.pop(key)
    receipt |= {
        "schema_version": 4,
        "metrics": metrics,
        "imported_code": {rel: sha256_file(rc.code_root() / rel) for rel in receipt["imported_code"]},
    }
    receipt["hashes"]["output_notebook"] = sha256_bytes(text.encode())
    (folder / rc.RECEIPT_NAME).write_text(rc.dump(rc.seal(receipt)))

    code, out = cli(capsys, "validate", str(folder))
    assert code == 0 and f"STALE {folder.as_posix()}: made with older code (schema_version" in out, out
    code, out = cli(capsys, "list")  # its configuration key differs too: the counted batch goes on without it
    assert "cpu: 4 ok seed(s) [42, 43, 44, 45]" in out


# ---------------------------------------------------------------- bad inputs, before any work


def test_a_claims_report_with_wrong_types_names_the_entry(project, capsys):
    bad = project / "bad-claims.json"
    bad.write_text(json.dumps({"deltas/C1": {"passed": "3", "failed": 0}}))
    for argv in (("ledger", "--claims-report", str(bad)), ("book", "--claims-report", str(bad))):
        code, out = cli(capsys, *argv)
        assert code == 2 and "entry 'deltas/C1' is {'passed': '3', 'failed': 0}" in out
    bad.write_text("[1, 2]")
    code, out = cli(capsys, "ledger", "--claims-report", str(bad))
    assert code == 2 and "it is not a mapping" in out
    assert not (project / "book" / "generated").exists()


def _tiny_profile(project: Path) -> None:
    from tests.e2e.conftest import TINY_PROFILE

    import yaml

    (project / "params" / "paired-protocol" / "tiny.yaml").write_text(yaml.safe_dump({**TINY_PROFILE, "seeds": [42]}))


def _state(project: Path) -> list[str]:
    return sorted(p.relative_to(project).as_posix() for p in (project / rc.RUNS_DIR).rglob("*"))


@pytest.mark.parametrize(
    "case",
    ["file-at-run-folder", "empty-grid", "long-tmpdir", "empty-data-folder"],
)
def test_bad_inputs_exit_2_before_any_run(project, capsys, monkeypatch, tmp_path, case):
    from agentpost.run.params import plan_runs

    _tiny_profile(project)
    argv = ["run", "paired-protocol", "--profile", "tiny"]
    if case == "file-at-run-folder":
        (spec,) = plan_runs(["paired-protocol"], "tiny")
        spec.folder.parent.mkdir(parents=True)
        spec.folder.write_text("not a folder")
        culprit = f"{spec.folder}: a file where a run folder goes"
    elif case == "empty-grid":
        argv += ["-p", "bigram_k_grid=[]"]
        culprit = "-p: parameter 'bigram_k_grid' is empty, but its default"
    elif case == "long-tmpdir":
        long = tmp_path / ("t" * 100)
        long.mkdir()
        monkeypatch.setenv("TMPDIR", str(long))
        import tempfile

        monkeypatch.setattr(tempfile, "tempdir", None)  # read $TMPDIR again
        culprit = "is too long for a kernel's sockets"
    else:
        empty = tmp_path / "empty-data"
        empty.mkdir()
        monkeypatch.setenv("AGENTPOST_DATA", str(empty))
        culprit = f"AGENTPOST_DATA={empty} holds no wikitext-2/ folder"
    before = _state(project)
    code, out = cli(capsys, *argv)
    assert code == 2 and culprit in out, out
    assert _state(project) == before  # nothing written, no run started


def test_the_kernels_connection_file_lies_in_the_runs_scratch_folder(tmp_path):
    """After a kill -9, reclaim_scratch removes the scratch folder, and with it the kernel's connection file."""
    from jupyter_client import KernelManager

    from agentpost.run.execute import kernel_config

    manager = KernelManager(config=kernel_config(str(tmp_path)))
    manager.write_connection_file()
    assert Path(manager.connection_file).parent == tmp_path
    assert json.loads(Path(manager.connection_file).read_text())["ip"].startswith(str(tmp_path))
    manager.cleanup_connection_file()


def test_a_dead_batchs_scratch_is_reclaimed(tmp_path, monkeypatch):
    import tempfile

    from agentpost.run.execute import SCRATCH_PREFIXES, reclaim_scratch

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = tmp_path / f"{SCRATCH_PREFIXES[1]}{2**22 + 1}-abcdefgh"  # above any pid_max: no such process
    dead.mkdir()
    (dead / "kernel.json").write_text("{}")
    alive = tmp_path / f"{SCRATCH_PREFIXES[1]}{os.getpid()}-abcdefgh"
    alive.mkdir()
    assert reclaim_scratch() == 1 and not dead.exists() and alive.exists()
