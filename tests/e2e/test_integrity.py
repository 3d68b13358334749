"""The tamper suite: every derivable field of a run, edited and resealed with the receipt's own seal, is caught.

Each case copies a valid tiny-profile run, edits it as a forger with the code would (then recomputes the output
notebook's hash and reseals the receipt with :func:`agentpost.evidence.receipt.seal`), and asserts that
``agentpost validate`` fails and names the field. The count of caught cases is printed (run with ``-s``).
Also here: a forgery (a CPU run relabelled as A100 evidence), swapped seed folders, and the cache
refusing to reuse a run that does not validate.
"""

import shutil

import pytest

from tests.e2e.conftest import load_run, reseal_run, agentpost, run_folders

A100 = {
    "kind": "cuda",
    "name": "NVIDIA A100-SXM4-80GB",
    "count": 1,
    "memory_bytes": 85899345920,
    "driver": "550.54.15",
    "cuda": "12.4",
    "capability": "8.0",
    "machine": "x86_64",
}


def _outputs(nb: dict, name: str) -> list[dict]:
    return [
        o
        for c in nb["cells"]
        for o in c.get("outputs", [])
        if o.get("metadata", {}).get("scrapbook", {}).get("name") == name
    ]


def _cell(nb: dict, tag: str) -> dict:
    return next(c for c in nb["cells"] if tag in c["metadata"].get("tags", []))


# ---------------------------------------------------------------- the edits: (field validate must name, edit)


def metric_in_receipt(r, nb):
    r["metrics"]["test_nll_trigram_nats"] -= 0.5


def metric_in_both(r, nb):
    r["metrics"]["test_nll_trigram_nats"] -= 0.5
    _outputs(nb, "test_nll_trigram_nats")[0]["data"]["application/scrapbook.scrap.json+json"]["data"] -= 0.5


def metric_deleted_in_both(r, nb):
    del r["metrics"]["test_nll_trigram_nats"]
    for c in nb["cells"]:
        c["outputs"] = [o for o in c.get("outputs", []) if o not in _outputs(nb, "test_nll_trigram_nats")]


def glued_text(r, nb):
    _outputs(nb, "outcomes_test_nll")[0]["data"]["text/plain"] += " (edited)"


def metric_added_in_receipt(r, nb):
    r["metrics"]["trigram_beats_paper"] = True


def seed_and_parameters_seed(r, nb):
    r["seed"] = r["parameters"]["seed"] = 43


def run_key(r, nb):
    r["run_key"] = "0123456789abcdef"


def code_hash(r, nb):
    r["hashes"]["code_tree"] = "0" * 64


def data_hash(r, nb):
    r["hashes"]["data"]["wikitext-2/test.txt"] = "0" * 64


def source_hash(r, nb):
    r["hashes"]["source_notebook"] = "0" * 64


def parameter_hash(r, nb):
    r["hashes"]["parameters"] = "0" * 64


def parameters_and_their_hash(r, nb):
    from agentpost.evidence.receipt import parameter_hash as ph

    r["parameters"]["n_boot"] = 4000
    r["hashes"]["parameters"] = ph(r["parameters"])


def injected_parameters(r, nb):
    cell = _cell(nb, "injected-parameters")
    cell["source"] = "".join(cell["source"]).replace("n_boot = 200", "n_boot = 4000")


def wall_time(r, nb):
    r["timing"]["wall_s"] = round(r["timing"]["wall_s"] / 10, 2)


def start_time(r, nb):
    r["timing"]["start"] = "2020-01-01T00:00:00+00:00"


def device(r, nb):
    r["device"]["name"] = "NVIDIA H200"


def packages(r, nb):
    r["packages"]["torch"] = "2.13.0+cu128"


def status(r, nb):
    r["status"] = "failed"


def error_on_an_ok_run(r, nb):
    r["error"] = {"cell_index": 3, "ename": "ValueError", "evalue": "x"}


def kind_without_overrides(r, nb):
    r["kind"] = "ad-hoc"


def overrides_on_a_profile_run(r, nb):
    r["overrides"] = {"n_boot": 200}


def profile(r, nb):
    r["profile"] = "smoke"


def chapter(r, nb):
    r["chapter"] = "kite"


def schema_field_removed(r, nb):
    del r["peak_memory"]


def notebook_cell_source(r, nb):
    cell = next(
        c for c in nb["cells"] if c["cell_type"] == "code" and 'glue("test_nll_trigram_nats"' in "".join(c["source"])
    )
    cell["source"] = "".join(cell["source"]) + "\n# edited"


CASES = [
    ("metrics.test_nll_trigram_nats", metric_in_receipt),
    ("metrics.test_nll_trigram_nats", metric_in_both),
    ("metrics.test_nll_trigram_nats", metric_deleted_in_both),
    ("metrics.outcomes_test_nll", glued_text),
    ("metrics.trigram_beats_paper", metric_added_in_receipt),
    ("folder", seed_and_parameters_seed),
    ("run_key", run_key),
    ("run_key", code_hash),
    ("run_key", data_hash),
    ("hashes.source_notebook", source_hash),
    ("hashes.parameters", parameter_hash),
    ("parameters", parameters_and_their_hash),
    ("notebook.injected_parameters", injected_parameters),
    ("timing.wall_s", wall_time),
    ("timing", start_time),
    ("device", device),
    ("packages", packages),
    ("status", status),
    ("status", error_on_an_ok_run),
    ("kind", kind_without_overrides),
    ("kind", overrides_on_a_profile_run),
    ("parameters", profile),
    ("chapter/profile", chapter),  # kite has no profile tiny: the receipt names no catalogue profile
    ("peak_memory", schema_field_removed),
    ("hashes.source_notebook", notebook_cell_source),
]


@pytest.fixture(scope="module")
def seed_runs(tiny_runs):
    project, result = tiny_runs
    assert result.returncode == 0, result.stdout + result.stderr
    runs = {
        int(r.name.split("-")[1]): r
        for r in run_folders(project / "book" / "runs" / "paired-protocol" / "tiny")
        if r.parent.name == "tiny"
    }
    return project, runs


def _validate(project, *paths) -> dict[str, str]:
    """``agentpost validate`` once over many folders; returns each folder's INVALID lines."""
    out = agentpost(project, "validate", *map(str, paths)).stdout
    return {str(p): "\n".join(line for line in out.splitlines() if line.startswith(f"INVALID {p}")) for p in paths}


def test_tamper_suite(seed_runs, tmp_path):
    project, runs = seed_runs
    original = runs[42]
    folders = []
    for i, (_, edit) in enumerate(CASES):
        copy = tmp_path / f"case{i:02d}-{edit.__name__}" / "paired-protocol" / "tiny" / original.name
        shutil.copytree(original, copy)
        r, nb = load_run(copy)
        edit(r, nb)
        reseal_run(copy, r, nb)
        folders.append(copy)
    found = _validate(project, *folders)
    caught = [
        (field, edit.__name__) for (field, edit), copy in zip(CASES, folders) if f": {field}: " in found[str(copy)]
    ]
    missed = [
        (field, edit.__name__, found[str(copy)])
        for (field, edit), copy in zip(CASES, folders)
        if (field, edit.__name__) not in caught
    ]
    print(f"\ntamper suite: {len(caught)}/{len(CASES)} resealed edits caught and named")
    assert not missed, missed


def test_forged_gpu_evidence_is_refused(seed_runs, tmp_path):
    """Issue 10's forgery: the tiny CPU runs copied to the a100 profile, relabelled with an A100, resealed."""
    project, runs = seed_runs
    forged_root = project / "book" / "runs" / "paired-protocol" / "a100"
    try:
        for run in runs.values():
            copy = forged_root / run.name
            shutil.copytree(run, copy)
            r, _ = load_run(copy)
            r["profile"], r["device"] = "a100", dict(A100)
            reseal_run(copy, r)
        out = agentpost(project, "validate", str(forged_root)).stdout
        for field in ("parameters", "run_key", "device"):
            assert f": {field}: " in out, (field, out)
        assert (
            "paired-protocol/a100: counts as GPU evidence" not in out
            and "paired-protocol/a100: not GPU evidence" in out
        )
    finally:
        shutil.rmtree(forged_root, ignore_errors=True)


def test_a_consistent_relabel_still_lacks_the_cuda_facts(seed_runs, tmp_path):
    """A forger who relabels the device in the receipt and in everything the notebook shows makes valid runs, but
    not GPU evidence: the CUDA facts a CPU run cannot produce are missing."""
    from agentpost.record.recording import format_value, value_html
    from tests.e2e.conftest import make_project

    project, runs = seed_runs
    other = make_project(tmp_path)
    for run in runs.values():
        copy = other / "book" / "runs" / "paired-protocol" / "tiny" / run.name
        shutil.copytree(run, copy)
        r, nb = load_run(copy)
        bundle = _outputs(nb, "run_environment")[0]["data"]
        facts = bundle["application/scrapbook.scrap.json+json"]["data"]
        r["device"] = facts["device"] = r["metrics"]["run_environment"]["device"] = dict(A100)
        bundle["text/plain"] = format_value(facts)
        bundle["text/html"] = value_html("run_environment", bundle["text/plain"])
        reseal_run(copy, r, nb)
    result = agentpost(other, "validate")
    assert result.returncode == 0, result.stdout  # every hash is consistent: hashes cannot tell
    line = next(line for line in result.stdout.splitlines() if line.startswith("paired-protocol/tiny:"))
    assert "not GPU evidence" in line and "seeds [42, 43, 44] recorded no CUDA event timing" in line
    if r["packages"]["torch_cuda"] is None:
        assert "seeds [42, 43, 44] record no CUDA build of torch" in line


def test_swapped_seed_folders_are_caught(seed_runs, tmp_path):
    project, runs = seed_runs
    base = tmp_path / "paired-protocol" / "tiny"
    base.mkdir(parents=True)
    shutil.copytree(runs[42], base / runs[43].name)
    shutil.copytree(runs[43], base / runs[42].name)
    found = _validate(project, base / runs[42].name, base / runs[43].name)
    assert all(": folder: " in lines for lines in found.values()), found


def test_cache_reuses_only_runs_that_validate(seed_runs):
    project, runs = seed_runs
    run = runs[44]
    r, _ = load_run(run)
    r["metrics"]["test_nll_trigram_nats"] -= 0.5
    reseal_run(run, r)
    again = agentpost(project, "run", "paired-protocol", "--profile", "tiny", "--seeds", "44")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "cached" not in again.stdout and " ok " in again.stdout
    assert agentpost(project, "validate", str(run)).returncode == 0, "the re-run replaced the tampered run"


def test_the_kernel_reports_the_code_it_imported_and_a_foreign_copy_fails_the_run(tmp_path, monkeypatch):
    """The probe after the last cell names the library files the kernel loaded; a kernel that imports `agentpost`
    from another folder than the one the runner hashes (a patched copy on PYTHONPATH) fails instead of recording
    the checkout's hash for code that did not run."""
    import nbformat

    from agentpost.run.execute import ForeignCode, execute_papermill

    source = tmp_path / "probe.ipynb"
    nbformat.write(
        nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("import agentpost.evidence.escape")]), source
    )
    used = execute_papermill(source, tmp_path / "out.ipynb")
    assert {"agentpost/__init__.py", "agentpost/evidence/escape.py"} <= set(used)
    assert "agentpost_imported_code" not in (tmp_path / "out.ipynb").read_text()
    copy = tmp_path / "patched"
    (copy / "agentpost" / "evidence").mkdir(parents=True)
    (copy / "agentpost" / "__init__.py").write_text("")
    (copy / "agentpost" / "evidence" / "__init__.py").write_text("")
    (copy / "agentpost" / "evidence" / "escape.py").write_text("PATCHED = True\n")
    monkeypatch.setenv("PYTHONPATH", str(copy))
    with pytest.raises(ForeignCode, match="patched"):
        execute_papermill(source, tmp_path / "out2.ipynb")
