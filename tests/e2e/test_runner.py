"""End to end: runs, cache, failures, ad-hoc runs, receipts, validation (paired-protocol, tiny). The bad inputs
are a table of their own: tests/e2e/test_bad_input.py."""

import hashlib
import json
import shutil

from agentpost.evidence import run_store
from tests.e2e.conftest import TINY, agentpost, load_run, run_folders


def test_batch_runs_writes_receipts_and_validates(tiny_runs):
    project, result = tiny_runs
    assert result.returncode == 0, result.stdout + result.stderr
    runs = run_folders(project / "book" / "runs" / "paired-protocol" / "tiny")
    assert [r.name.split("-")[1] for r in runs if r.parent.name == "tiny"] == ["42", "43", "44"]
    assert not list((project / "book" / "runs").rglob(".tmp-*")), "interrupted leftovers must be cleared"
    receipt = json.loads((runs[0] / "receipt.json").read_text())
    assert receipt["status"] == "ok" and receipt["seed"] == 42 and receipt["kind"] == "profile"
    assert receipt["parameters"]["train_fraction"] == 0.05 and receipt["overrides"] == {}
    outcomes = receipt["metrics"]["outcomes_test_nll"]  # one run = one subsample: per-article NLL of both arms,
    assert outcomes["kind"] == "outcomes-in-file" and outcomes["n_items"] == 60  # stored once, in outcomes.parquet
    stored = run_store.read_outcomes((runs[0] / "outcomes.parquet").read_bytes())["outcomes_test_nll"]
    assert set(stored["arms"]) == {"add_k_bigram", "interpolated_trigram"} and len(stored["items"]) == 60
    assert receipt["outcomes_sha256"] == hashlib.sha256((runs[0] / "outcomes.parquet").read_bytes()).hexdigest()
    assert set(receipt["hashes"]) == {"source_notebook", "parameters", "code_tree", "data", "output_notebook"}
    assert "wikitext-2/test.txt" in receipt["hashes"]["data"]
    used = receipt["imported_code"]  # the project files the run's kernel had imported, each hashed
    assert "agentpost/record/outcomes.py" in used and all(p.startswith(("agentpost/", "kernels/")) for p in used)
    assert "agentpost/run/batch.py" not in used  # the runner's own modules are not the run's code
    assert "agentpost_imported_code" not in json.dumps(load_run(runs[0])[1])  # the receipt's, not the page's
    assert receipt["peak_memory"]["host_rss_bytes"] > 10 * 2**20
    assert receipt["metrics"]["run_environment"]["device"] == receipt["device"]  # what the notebook itself printed
    assert "runs:" in result.stderr and "seed" in result.stdout  # progress bar and summary table
    assert "paired-protocol/42: cell 1/" in result.stderr  # per-run progress: cells executed of total
    assert "without encryption" not in result.stderr  # kernels talk over IPC, not unencrypted TCP
    check = agentpost(project, "validate")
    assert check.returncode == 0, check.stdout


def test_second_call_is_cached(tiny_runs):
    project, _ = tiny_runs
    again = agentpost(project, "run", "paired-protocol", "--profile", "tiny")
    assert again.returncode == 0
    assert again.stdout.count("cached") == 3


def test_receipts_are_desensitized(tiny_runs):
    import getpass
    import os
    import socket

    project, _ = tiny_runs
    for run in run_folders(project):
        for text in ((run / "receipt.json").read_text(), json.dumps(load_run(run)[1])):
            for secret in (str(project), os.path.expanduser("~"), os.environ["PATH"]):
                assert secret not in text, secret
            host = socket.gethostname()
            if len(host) >= 4:  # a 2-3 letter host name also occurs inside base64 figures; it cannot be scanned for
                assert host not in text
            assert "/work/" not in text and "/home/" not in text and "/tmp/" not in text
            if getpass.getuser() != "root":
                assert getpass.getuser() not in text


def test_editing_a_metric_fails_validation_and_names_it(tiny_runs, tmp_path):
    project, _ = tiny_runs
    run = run_folders(project / "book" / "runs" / "paired-protocol" / "tiny")[0]
    copy = tmp_path / "paired-protocol" / "tiny" / run.name
    shutil.copytree(run, copy)
    receipt = json.loads((copy / "receipt.json").read_text())
    receipt["metrics"]["test_nll_trigram_nats"] -= 0.5
    (copy / "receipt.json").write_text(json.dumps(receipt))
    result = agentpost(project, "validate", str(copy))
    assert result.returncode == 1
    assert "metrics.test_nll_trigram_nats" in result.stdout and "receipt_sha256" in result.stdout

    shutil.rmtree(copy)
    shutil.copytree(run, copy)
    _, nb = load_run(copy)
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            scrap = out.get("data", {}).get("application/scrapbook.scrap.json+json")
            if scrap and scrap["name"] == "this_run_articles_trigram_better":
                scrap["data"] += 1
    (copy / "notebook.ipynb.gz").write_bytes(run_store.stored_notebook_bytes(json.dumps(nb)))
    result = agentpost(project, "validate", str(copy))
    assert result.returncode == 1
    assert "hashes.output_notebook" in result.stdout and "metrics.this_run_articles_trigram_better" in result.stdout


def _page_state(project):
    pages = sorted((project / "book" / "generated").rglob("*.md"))
    return {p.relative_to(project).as_posix(): p.read_text() for p in pages}


def test_an_adhoc_run_is_kept_apart(tiny_runs, tmp_path):
    project, _ = tiny_runs
    report = tmp_path / "claims.json"
    report.write_text("{}")
    assert agentpost(project, "ledger", "--claims-report", str(report)).returncode == 0
    pages, listing = _page_state(project), agentpost(project, "list").stdout
    result = agentpost(project, "run", "paired-protocol", "--profile", "tiny", "--seeds", "42", "-p", "n_boot=100")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "ad-hoc" in result.stdout
    adhoc = run_folders(project / "book" / "runs" / "paired-protocol" / "tiny" / "ad-hoc")
    assert len(adhoc) == 1 and json.loads((adhoc[0] / "receipt.json").read_text())["overrides"] == {"n_boot": 100}
    after = agentpost(project, "list").stdout
    tiny_line = [line for line in listing.splitlines() if line.startswith("paired-protocol")]
    assert tiny_line == [line for line in after.splitlines() if line.startswith("paired-protocol")]
    assert "ad-hoc runs" in after and "paired-protocol/tiny+overrides: 1 run(s), seeds [42]" in after
    assert agentpost(project, "ledger", "--claims-report", str(report)).returncode == 0
    assert _page_state(project) == pages, "an ad-hoc run must not change the ledger or the evidence pages"

    # A missing claims report is refused before anything is removed.
    missing = agentpost(project, "ledger", "--claims-report", str(tmp_path / "missing.json"))
    assert missing.returncode == 2 and "no claims report" in missing.stderr
    assert _page_state(project) == pages


def test_a_failing_notebook_is_recorded_and_others_continue(project):
    tiny = [x for pair in zip(TINY[::2], TINY[1::2]) if not pair[1].startswith("train_fraction=") for x in pair]
    result = agentpost(project, "run", "paired-protocol", "--seeds", "7", *tiny, "-p", "train_fraction=0.0")
    assert result.returncode == 1
    failed = [r for r in run_folders(project) if r.name.startswith("seed-7-")]
    assert len(failed) == 1 and failed[0].parent.name == "ad-hoc"
    receipt = json.loads((failed[0] / "receipt.json").read_text())
    assert receipt["status"] == "failed" and receipt["kind"] == "ad-hoc"
    assert receipt["error"]["ename"] == "ValueError" and "fraction" in receipt["error"]["evalue"]
    assert "FAILED paired-protocol seed 7" in result.stdout
    check = agentpost(project, "validate", str(failed[0]))
    assert check.returncode == 0, check.stdout  # a failed run is recorded faithfully


def test_validate_on_a_fresh_checkout(tmp_path):
    """No runs recorded yet is not an error (naming a folder without runs is: tests/e2e/test_bad_input.py)."""
    from tests.e2e.conftest import make_project

    fresh = make_project(tmp_path)
    result = agentpost(fresh, "validate")
    assert result.returncode == 0 and "0 run(s) checked" in result.stdout


def test_each_seed_is_a_distinct_replication(tiny_runs):
    """One run = one seed = one training subsample: every arm's per-item outcomes differ between any two seeds,
    and `agentpost compare` computes the declared comparison over the three runs."""
    project, _ = tiny_runs
    receipts = [run_store.read_receipt(r) for r in run_folders(project / "book" / "runs" / "paired-protocol" / "tiny")]
    outcomes = [
        r["metrics"]["outcomes_test_nll"] for r in receipts if r["kind"] == "profile" and r["seed"] in (42, 43, 44)
    ]
    assert len(outcomes) == 3
    for arm in ("add_k_bigram", "interpolated_trigram"):
        per_seed = [tuple(o["arms"][arm]) for o in outcomes]
        assert len(set(per_seed)) == len(per_seed), arm
    assert len({o["facts"]["add_k_bigram"]["checkpoint"] for o in outcomes}) == 3  # three training subsamples
    result = agentpost(project, "compare", "paired-protocol", "--profile", "tiny")
    assert result.returncode == 0, result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("trigram_vs_bigram"))
    assert "3 x 60" in line, result.stdout
    plan = agentpost(project, "plan", "paired-protocol", "--profile", "tiny")
    assert plan.returncode == 0, plan.stderr
    assert "trigram_vs_bigram (C3, headline; margin 0.02): pilot 3 seeds x 60 items" in plan.stdout
    after = plan.stdout.split("pilot 3 seeds", 1)[1]
    # a design, or why none is in range (too few seeds, or the shared items' variance)
    assert " items per seed -> MDE " in after or "raise --max-seeds" in after or "shared items' variance" in after


def test_a_run_that_does_not_validate_is_named_last_and_fails_the_command(tmp_path):
    """A notebook that does not record its device makes runs ``agentpost validate`` rejects: ``run`` says so at
    the end, naming the run and the reason, and exits 1 although the notebook itself ran."""
    import nbformat

    from tests.e2e.conftest import make_project

    project = make_project(tmp_path)
    path = project / "notebooks" / "paired-protocol.ipynb"
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        cell.source = "\n".join(line for line in cell.source.splitlines() if not line.startswith("show_device()"))
    nbformat.write(nb, path)
    result = agentpost(project, "run", "paired-protocol", "--profile", "tiny", "--seeds", "42")
    assert result.returncode == 1, result.stdout + result.stderr
    assert " ok " in result.stdout.splitlines()[2]  # the run itself succeeded
    tail = result.stderr.strip().splitlines()
    assert tail[-1].startswith("====") and "INVALID: 1 run(s) just made do not validate" in result.stderr
    assert any("seed-42-" in line and "device: the notebook did not record its device" in line for line in tail)
