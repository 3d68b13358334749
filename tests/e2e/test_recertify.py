"""End to end: what stales a run, re-certification, new seeds joining a re-certified batch, and the migration of a
schema 4 run (the paired-protocol chapter at its tiny size, in a throwaway project of its own: its notebook is
edited here)."""

import copy
import hashlib
import json

import nbformat
import pytest

from agentpost.evidence import run_store
from agentpost.record.hashing import sha256_file
from agentpost.evidence.receipt import code_root
from tests.e2e.conftest import agentpost, load_run, make_project, reseal_run, run_folders

pytestmark = pytest.mark.slow  # about two minutes on 2 cores


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    project = make_project(tmp_path_factory.mktemp("recertify"))
    made = agentpost(project, "run", "paired-protocol", "--profile", "tiny", "--jobs", "2")
    assert made.returncode == 0, made.stdout + made.stderr
    return project


def _edit_notebook(project, edit) -> None:
    path = project / "notebooks" / "paired-protocol.ipynb"
    nb = nbformat.read(path, as_version=4)
    edit(nb)
    nbformat.write(nb, path)


def _code_cell(nb, needle: str):
    return next(c for c in nb.cells if c.cell_type == "code" and needle in c.source)


def _lines(result, prefix: str) -> list[str]:
    return [line for line in result.stdout.splitlines() if line.startswith(prefix)]


def test_prose_comments_and_docstrings_stale_nothing_a_code_edit_stales_and_recertify_makes_it_current(project):
    def prose(nb):
        nb.cells[0].source += "\n\nA sentence added to the introduction."
        _code_cell(nb, "record_outcomes(").source += "  # a comment changes no number"

    _edit_notebook(project, prose)
    check = agentpost(project, "validate")
    assert check.returncode == 0 and not _lines(check, "STALE"), check.stdout

    _edit_notebook(
        project,
        lambda nb: setattr(
            _code_cell(nb, "record_outcomes("), "source", _code_cell(nb, "record_outcomes(").source + "\n_unused = 1"
        ),
    )
    check = agentpost(project, "validate")
    assert len(_lines(check, "STALE")) == 3 and "source_notebook" in check.stdout, check.stdout
    assert "stale" in agentpost(project, "list").stdout

    before = agentpost(project, "compare", "paired-protocol", "--profile", "tiny").stdout
    done = agentpost(project, "recertify", "paired-protocol", "--profile", "tiny", "--seeds", "42")
    assert done.returncode == 0 and "re-certified: seeds [42] reproduce" in done.stdout, done.stdout + done.stderr
    (cert,) = (project / "book" / "runs" / "paired-protocol" / "tiny" / "certificates").glob("*.json")
    body = json.loads(cert.read_text())
    assert body["seeds"][0]["seed"] == 42 and body["seeds"][0]["values_compared"] > 100
    assert body["from_code"]["notebook_code"] != body["to_code"]["notebook_code"]
    check = agentpost(project, "validate")
    assert check.returncode == 0 and not _lines(check, "STALE"), check.stdout
    assert len(_lines(check, "RE-CERTIFIED")) == 3  # seeds 43, 44 and the old run of 42 (the re-run counts now)
    listing = agentpost(project, "list").stdout
    assert "3 ok seed(s) [42, 43, 44]" in listing and "stale" not in listing, listing
    assert (
        agentpost(project, "compare", "paired-protocol", "--profile", "tiny").stdout.splitlines()[1:]
        == before.splitlines()[1:]
    )  # the same verdicts, from the same seeds

    joined = agentpost(project, "run", "paired-protocol", "--profile", "tiny", "--seeds", "45")
    assert joined.returncode == 0, joined.stdout + joined.stderr
    assert "4 ok seed(s) [42, 43, 44, 45]" in agentpost(project, "list").stdout  # a new seed joins the batch

    tampered = json.loads(cert.read_text()) | {"to_configuration": "0" * 64}
    cert.write_text(json.dumps(tampered))
    check = agentpost(project, "validate")
    assert check.returncode == 1 and "certificate was edited after sealing" in check.stdout
    assert _lines(check, "STALE")  # a broken certificate links nothing
    cert.write_text(json.dumps(body))


def test_recertify_refuses_when_a_value_moves_and_names_it(project):
    _edit_notebook(
        project,
        lambda nb: setattr(
            _code_cell(nb, "record_outcomes("),
            "source",
            _code_cell(nb, "record_outcomes(").source + "\nglue('extra', 1.0)",
        ),
    )
    certs = project / "book" / "runs" / "paired-protocol" / "tiny" / "certificates"
    before = sorted(certs.glob("*.json"))
    moved = agentpost(project, "recertify", "paired-protocol", "--profile", "tiny", "--seeds", "43")
    assert moved.returncode == 1, moved.stdout + moved.stderr
    assert "extra: recorded by the re-run, not by the old run" in moved.stdout and "NOT re-certified" in moved.stdout
    assert sorted(certs.glob("*.json")) == before
    bad = agentpost(project, "recertify", "paired-protocol", "--profile", "tiny", "--seeds", "7")
    assert bad.returncode == 2 and "seeds [7] are not stale seeds" in bad.stderr


def _as_schema_4(run) -> dict:
    """The run as schema 4 wrote it: outcomes inline, a plain notebook, imported files by their bytes."""
    receipt, stored = load_run(run)
    nb, metrics = run_store.inflate(stored, receipt["metrics"], (run / "outcomes.parquet").read_bytes())
    text = json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
    (run / "notebook.ipynb.gz").unlink()
    (run / "outcomes.parquet").unlink()
    (run / "notebook.ipynb").write_text(text)
    old = {k: v for k, v in receipt.items() if k not in ("notebook_code", "outcomes_sha256")}
    old.update(
        schema_version=4,
        metrics=metrics,
        imported_code={rel: sha256_file(code_root() / rel) for rel in receipt["imported_code"]},
        hashes={**receipt["hashes"], "output_notebook": hashlib.sha256(text.encode()).hexdigest()},
    )
    reseal_run(run, old)
    return copy.deepcopy(metrics)


def test_migrate_turns_a_schema_4_run_into_schema_5_keeping_its_values_bit_for_bit(project):
    run = run_folders(project / "book" / "runs" / "paired-protocol" / "tiny")[-1]
    metrics = _as_schema_4(run)
    assert agentpost(project, "validate", str(run)).returncode == 0  # schema 4 still reads and validates
    done = agentpost(project, "migrate", str(run))
    assert done.returncode == 0 and "1 migrated to schema 5" in done.stdout, done.stdout + done.stderr
    receipt = json.loads((run / "receipt.json").read_text())
    assert receipt["schema_version"] == 5 and not (run / "notebook.ipynb").exists()
    back = run_store.inflate(None, receipt["metrics"], (run / "outcomes.parquet").read_bytes())[1]
    assert json.dumps(back, sort_keys=True) == json.dumps(metrics, sort_keys=True)
    assert agentpost(project, "validate", str(run)).returncode == 0
    again = agentpost(project, "migrate", str(run))
    assert again.returncode == 0 and "1 already current" in again.stdout
