"""End to end: parameter checks, runs, cache, failures, receipts, validation (paired-protocol at a tiny size)."""

import json
import shutil

import pytest

from tests.e2e.conftest import TINY, agentpost


def _runs(root):
    return sorted((root / "book" / "runs").glob("*/*/seed-*")) if (root / "book" / "runs").exists() else []


@pytest.mark.parametrize(
    "args,message",
    [
        (["-p", "no_such_param=1"], "unknown parameter 'no_such_param'"),
        (["-p", "n_boot=many"], "parameter 'n_boot' must be int"),
        (["-p", "train_fraction=[1]"], "parameter 'train_fraction' must be float"),
        (["--seeds", ","], "seed list is empty"),
        (["--seeds", "1,x"], "seeds must be integers"),
        (["--profile", "nope"], "no profile 'nope'"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(project, args, message):
    before = _runs(project)
    result = agentpost(project, "run", "paired-protocol", *args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert _runs(project) == before


def test_missing_data_and_unknown_chapter_exit_2(tmp_path, project):
    before = _runs(project)
    empty = tmp_path / "nodata"
    empty.mkdir()
    result = agentpost(project, "run", "paired-protocol", data=empty)
    assert result.returncode == 2 and "data set 'wikitext-2' not found" in result.stderr
    result = agentpost(project, "run", "no-such-chapter")
    assert result.returncode == 2 and "unknown chapter" in result.stderr
    result = agentpost(project, "run", "opsd")
    assert result.returncode == 2 and "not started" in result.stderr
    assert _runs(project) == before


@pytest.fixture(scope="module")
def batch(project):
    (project / "book" / "runs" / "paired-protocol" / "smoke" / ".tmp-seed-1-interrupted").mkdir(parents=True)
    result = agentpost(project, "run", "paired-protocol", "--seeds", "1,2,3", "--jobs", "2", *TINY)
    return project, result


def test_batch_runs_writes_receipts_and_validates(batch):
    project, result = batch
    assert result.returncode == 0, result.stdout + result.stderr
    runs = [r for r in _runs(project) if r.name.split("-")[1] in {"1", "2", "3"}]
    assert len(runs) == 3
    assert not list((project / "book" / "runs").glob("*/*/.tmp-*")), "interrupted leftovers must be cleared"
    receipt = json.loads((runs[0] / "receipt.json").read_text())
    assert receipt["status"] == "ok" and receipt["seed"] == 1 and receipt["parameters"]["train_fraction"] == 0.05
    assert receipt["metrics"]["paired_verdict"] in {"better", "worse", "no detectable difference", "underpowered"}
    assert set(receipt["hashes"]) == {"source_notebook", "parameters", "code_tree", "data", "output_notebook"}
    assert "wikitext-2/test.txt" in receipt["hashes"]["data"]
    assert receipt["peak_memory"]["host_rss_bytes"] > 10 * 2**20
    assert "runs:" in result.stderr and "seed" in result.stdout  # progress bar and summary table
    check = agentpost(project, "validate")
    assert check.returncode == 0, check.stdout


def test_second_call_is_cached(batch):
    project, _ = batch
    again = agentpost(project, "run", "paired-protocol", "--seeds", "1,2,3", *TINY)
    assert again.returncode == 0
    assert again.stdout.count("cached") == 3


def test_receipts_are_desensitized(batch):
    import getpass
    import os
    import socket

    project, _ = batch
    for run in _runs(project):
        for name in ("receipt.json", "notebook.ipynb"):
            text = (run / name).read_text()
            for secret in (str(project), os.path.expanduser("~"), os.environ["PATH"]):
                assert secret not in text, (name, secret)
            host = socket.gethostname()
            if len(host) >= 4:  # a 2-3 letter host name also occurs inside base64 figures; it cannot be scanned for
                assert host not in text
            assert "/work/" not in text and "/home/" not in text and "/tmp/" not in text
            if getpass.getuser() != "root":
                assert getpass.getuser() not in text


def test_editing_a_metric_fails_validation_and_names_it(batch, tmp_path):
    project, _ = batch
    run = _runs(project)[0]
    copy = tmp_path / run.name
    shutil.copytree(run, copy)
    receipt = json.loads((copy / "receipt.json").read_text())
    receipt["metrics"]["test_nll_trigram_nats"] -= 0.5
    (copy / "receipt.json").write_text(json.dumps(receipt))
    result = agentpost(project, "validate", str(copy))
    assert result.returncode == 1
    assert "metrics.test_nll_trigram_nats" in result.stdout and "receipt_sha256" in result.stdout

    shutil.rmtree(copy)
    shutil.copytree(run, copy)
    nb = (copy / "notebook.ipynb").read_text()
    verdict = json.loads((copy / "receipt.json").read_text())["metrics"]["paired_verdict"]
    (copy / "notebook.ipynb").write_text(nb.replace(f'"data": "{verdict}"', '"data": "EDITED"'))
    result = agentpost(project, "validate", str(copy))
    assert result.returncode == 1
    assert "hashes.output_notebook" in result.stdout and "metrics.paired_verdict" in result.stdout


def test_a_failing_notebook_is_recorded_and_others_continue(project):
    result = agentpost(project, "run", "paired-protocol", "--seeds", "7", *TINY, "-p", "train_fraction=0.0")
    assert result.returncode == 1
    failed = [r for r in _runs(project) if r.name.startswith("seed-7-")]
    assert len(failed) == 1
    receipt = json.loads((failed[0] / "receipt.json").read_text())
    assert receipt["status"] == "failed"
    assert receipt["error"]["ename"] == "ValueError" and "fraction" in receipt["error"]["evalue"]
    assert "FAILED paired-protocol seed 7" in result.stdout


def test_validate_on_a_fresh_checkout_and_a_missing_path(tmp_path):
    from tests.e2e.conftest import make_project

    fresh = make_project(tmp_path)
    result = agentpost(fresh, "validate")
    assert result.returncode == 0 and "0 run(s) checked" in result.stdout
    result = agentpost(fresh, "validate", str(tmp_path / "nope"))
    assert result.returncode == 2 and "no such path" in result.stderr
