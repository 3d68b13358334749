"""Receipt model, keys, data checksums, profile names, glued-text rendering, claims report and ledger swap."""

import json

import pytest
from pydantic import ValidationError

from agentpost.catalogue import chapter
from agentpost.errors import UsageError
from agentpost.evidence import receipt as rc
from agentpost.record.recording import SCRAP_MIME, _order_like, format_value, rendering_problem, value_html

FIELDS = dict(
    chapter="kite",
    profile="smoke",
    kind="profile",
    seed=42,
    status="ok",
    run_key="k",
    error=None,
    overrides={},
    parameters={"lr": 0.01, "seed": 42},
    hashes={
        "source_notebook": "s",
        "parameters": "p",
        "code_tree": "c",
        "data": {"w/t.txt": "d"},
        "output_notebook": "o",
    },
    packages={"torch": "2.13.0", "torch_cuda": None},
    device={"kind": "cpu", "name": "x"},
    timing={"start": "2026-01-01T00:00:00+00:00", "end": "2026-01-01T00:00:10+00:00", "wall_s": 10},
    peak_memory={"host_rss_bytes": 1},
    metrics={"m": 1.5},
    imported_code={"agentpost/x.py": "h"},
    notebook_code="n",
    outcomes_sha256=None,
)


def test_receipt_is_typed_sealed_and_has_a_schema():
    r = rc.build(**FIELDS, backend="local")
    assert r.schema_version == rc.SCHEMA_VERSION and r.timing.wall_s == 10.0
    assert rc.seal(r.as_dict())["receipt_sha256"] == r.receipt_sha256  # the seal is over the JSON form
    with pytest.raises(ValidationError, match="seed"):
        rc.build(**{**FIELDS, "seed": "42"}, backend="local")  # strict: no silent coercion
    with pytest.raises(ValidationError, match="surprise"):
        rc.build(**FIELDS, backend="local", surprise=1)
    schema = rc.json_schema()
    assert set(schema["required"]) == set(rc.Receipt.model_fields)
    assert schema["properties"]["kind"]["enum"] == ["profile", "ad-hoc"]
    with pytest.raises(ValidationError):
        r.seed = 43  # frozen


def test_keys_follow_the_hashing_rules():
    d = rc.build(**FIELDS, backend="local").as_dict()
    hashes = {"source_notebook": "s", "parameters": "p", "code_tree": "c", "data": {"w/t.txt": "d"}}
    assert rc.input_hashes_of(d) == hashes
    assert rc.run_key_of(d) == rc.run_key("kite", "smoke", "profile", 42, hashes)
    assert len(rc.run_key_of(d)) == 16
    other_seed = {**d, "seed": 43}
    assert rc.run_key_of(other_seed) != rc.run_key_of(d)
    assert rc.configuration_key(other_seed) == rc.configuration_key(d)  # seeds share a configuration
    assert rc.configuration_key({**d, "kind": "ad-hoc"}) != rc.configuration_key(d)
    # An edit elsewhere in the tree (another code_tree) keeps the configuration of runs that list their imported code;
    # a change of an imported file, or a receipt without the list (schema 3), does not.
    elsewhere = {**other_seed, "hashes": {**d["hashes"], "code_tree": "c2"}}
    assert rc.configuration_key(elsewhere) == rc.configuration_key(d)
    assert rc.configuration_key({**elsewhere, "imported_code": {"agentpost/x.py": "h2"}}) != rc.configuration_key(d)
    old = {k: v for k, v in d.items() if k not in ("imported_code", "notebook_code", "outcomes_sha256")} | {
        "schema_version": 3
    }
    assert rc.configuration_key({**elsewhere, "imported_code": {}}) != rc.configuration_key(old)
    # Schema 5 keys the notebook by its code cells: another source hash (prose edited) keeps the configuration, a
    # code edit (another notebook_code) does not.
    prose = {**d, "hashes": {**d["hashes"], "source_notebook": "s2"}}
    assert rc.configuration_key(prose) == rc.configuration_key(d)
    assert rc.configuration_key({**d, "notebook_code": "n2"}) != rc.configuration_key(d)
    assert rc.run_key("kite", "smoke", "ad-hoc", 42, hashes) != rc.run_key("kite", "smoke", "profile", 42, hashes)
    # The parameter hash leaves out the seed, and only the seed.
    assert rc.parameter_hash({"lr": 0.01, "seed": 1}) == rc.parameter_hash({"lr": 0.01, "seed": 2})
    assert rc.parameter_hash({"lr": 0.01}) != rc.parameter_hash({"lr": 0.02})
    assert rc.run_folder("kite", "smoke", "profile", 42, "ab").as_posix() == "kite/smoke/seed-42-ab"
    assert rc.run_folder("kite", "smoke", "ad-hoc", 42, "ab").as_posix() == "kite/smoke/ad-hoc/seed-42-ab"


def _dataset(tmp_path, monkeypatch, content: bytes, listed: bytes | None = None, pin: bool = True):
    """A wikitext-2 folder whose files hold ``content`` and whose SOURCE.md lists ``listed``; with ``pin`` the
    repository's pinned checksums are those of ``listed`` too (a data set the checkout was written for)."""
    import hashlib

    from agentpost.data import registry

    folder = tmp_path / "wikitext-2"
    folder.mkdir()
    listed = content if listed is None else listed
    rows = "\n".join(
        f"| {f} | {len(listed)} | {hashlib.sha256(listed).hexdigest()} | blob |"
        for f in registry.DATASETS["wikitext-2"]
    )
    (folder / "SOURCE.md").write_text(
        f"# x\n\n## Files\n| file | bytes | sha256 | git blob |\n|---|---|---|---|\n{rows}\n\n## Other\n| a | 1 | {'0' * 64} |\n"
    )
    for f in registry.DATASETS["wikitext-2"]:
        (folder / f).write_bytes(content)
    monkeypatch.setenv("AGENTPOST_DATA", str(tmp_path))
    if pin:
        pinned = {f: (len(listed), hashlib.sha256(listed).hexdigest()) for f in registry.DATASETS["wikitext-2"]}
        monkeypatch.setitem(registry.PINNED, "wikitext-2", pinned)
    registry._parse_source.cache_clear()
    return registry, folder


def test_data_edited_with_its_source_md_is_refused_by_the_pinned_checksums(tmp_path, monkeypatch):
    registry, folder = _dataset(tmp_path, monkeypatch, b"abc\n", pin=False)
    with pytest.raises(
        registry.DataChecksumError,
        match=r"wikitext-2/test.txt matches wikitext-2/SOURCE.md .* but the "
        r"repository pins 1256449 bytes",
    ):
        registry.data_file("wikitext-2", "test.txt")


def test_bad_source_md_and_unreadable_data_name_the_file(tmp_path, monkeypatch):
    import os

    registry, folder = _dataset(tmp_path, monkeypatch, b"abc\n")
    source = (folder / "SOURCE.md").read_text()
    row = next(line for line in source.splitlines() if line.startswith("| test.txt"))
    (folder / "SOURCE.md").write_text(source.replace(row, row + "\n" + row))
    with pytest.raises(registry.DataChecksumError, match=r"wikitext-2/SOURCE.md lists test.txt twice \(line"):
        registry.data_file("wikitext-2", "test.txt")
    registry._parse_source.cache_clear()
    (folder / "SOURCE.md").write_bytes(b"caf\xe9\n")
    with pytest.raises(registry.DataChecksumError, match=r"wikitext-2/SOURCE.md is not UTF-8"):
        registry.data_file("wikitext-2", "test.txt")
    registry._parse_source.cache_clear()
    (tmp_path / "again").mkdir()
    _dataset(tmp_path / "again", monkeypatch, b"abc\n")
    folder = tmp_path / "again" / "wikitext-2"
    (folder / "test.txt").unlink()
    os.mkfifo(folder / "test.txt")
    with pytest.raises(registry.DataMissingError, match=r"wikitext-2/test.txt is not a regular file"):
        registry.data_file("wikitext-2", "test.txt")
    (folder / "test.txt").unlink()
    (folder / "test.txt").mkdir()
    with pytest.raises(registry.DataMissingError, match=r"wikitext-2/test.txt is not a regular file"):
        registry.data_file("wikitext-2", "test.txt")


def test_source_md_checksums_are_parsed_and_enforced(tmp_path, monkeypatch):
    registry, folder = _dataset(tmp_path, monkeypatch, b"abc\n")
    assert set(registry.checksums("wikitext-2")) == {"train.txt", "valid.txt", "test.txt"}  # only the Files table
    assert registry.data_file("wikitext-2", "test.txt") == folder / "test.txt"
    (folder / "test.txt").write_bytes(b"ab")
    with pytest.raises(
        registry.DataChecksumError, match=r"wikitext-2/test.txt has 2 bytes; wikitext-2/SOURCE.md records 4"
    ):
        registry.data_file("wikitext-2", "test.txt")
    (folder / "test.txt").write_bytes(b"abd\n")
    with pytest.raises(registry.DataChecksumError, match=r"wikitext-2/test.txt has sha256"):
        registry.data_file("wikitext-2", "test.txt")


def test_a_bad_data_file_is_a_usage_error_before_any_run(tmp_path, monkeypatch):
    from agentpost.run.params import check_data

    _dataset(tmp_path, monkeypatch, b"abc\n", listed=b"abcd\n")
    with pytest.raises(UsageError, match=r"paired-protocol: data file wikitext-2/train.txt has 4 bytes"):
        check_data(chapter("paired-protocol"))


@pytest.mark.parametrize("name", ["../../../elsewhere/prof", "/etc/passwd", "smoke/../a100", "Smoke", "", "nope"])
def test_profile_names_are_identifiers_of_existing_profiles(name):
    from agentpost.catalogue.params import load_profile

    with pytest.raises(UsageError, match="known profiles in params/paired-protocol/: a100, smoke"):
        load_profile(chapter("paired-protocol"), name)


def test_duplicate_chapters_are_refused_before_any_work():
    from agentpost.run.params import plan_runs

    with pytest.raises(UsageError, match="named more than once: paired-protocol"):
        plan_runs(["paired-protocol", "kite", "paired-protocol"], "smoke")


def test_plan_computes_keys_once_and_marks_overrides_adhoc():
    from agentpost.run.params import plan_runs

    profile_runs = plan_runs(["paired-protocol"], "smoke")
    adhoc = plan_runs(["paired-protocol"], "smoke", overrides=["n_boot=100"])
    assert [s.seed for s in profile_runs] == [42, 43, 44] and {s.kind for s in profile_runs} == {"profile"}
    assert {s.kind for s in adhoc} == {"ad-hoc"} and adhoc[0].overrides == {"n_boot": 100}
    assert adhoc[0].folder.parent.name == "ad-hoc" and adhoc[0].run_key != profile_runs[0].run_key
    assert profile_runs[0].run_key == rc.run_key("paired-protocol", "smoke", "profile", 42, profile_runs[0].hashes)
    assert profile_runs[0].hashes == profile_runs[1].hashes  # one configuration, hashed once


def _bundle(name, data, text, html=None):
    return {SCRAP_MIME: {"name": name, "data": data}, "text/plain": text, "text/html": html or value_html(name, text)}


def test_glued_text_must_render_its_data():
    assert rendering_problem(_bundle("x", 0.123456, "0.1235")) is None
    assert "shows '0.2'" in rendering_problem(_bundle("x", 0.123456, "0.2"))
    assert "HTML" in rendering_problem(_bundle("x", 1, "1", html=value_html("x", "2")))
    # Notebook JSON stores dict keys sorted; the text keeps the order the value had when it was glued.
    stored = {"a": 1, "b": {"d": 2.0, "c": "x"}}
    assert _order_like(stored, "{b: {c: x, d: 2}, a: 1}") == {"b": {"c": "x", "d": 2.0}, "a": 1}
    assert rendering_problem(_bundle("x", stored, "{b: {c: x, d: 2}, a: 1}")) is None
    assert rendering_problem(_bundle("x", stored, "{b: {c: x, d: 3}, a: 1}")) is not None
    import pandas as pd

    from agentpost.record.recording import table_text

    table = {SCRAP_MIME: {"name": "t", "data": [{"a": 1, "b": 0.5}, {"a": 2, "b": 0.25}]}, "text/html": "<table>"}
    columns = {"agentpost": {"columns": ["b", "a"]}}  # recorded by glue_table (tests/unit/test_glue.py)
    table["text/plain"] = table_text(pd.DataFrame({"b": [0.5, 0.25], "a": [1, 2]}))
    assert rendering_problem(table, columns) is None
    table["text/plain"] = table_text(pd.DataFrame({"b": [0.5, 0.75], "a": [1, 2]}))
    assert rendering_problem(table, columns) == "the table shown differs from its data"
    assert format_value({"k": [1.0, "s", None]}) == "{k: [1, s, None]}"


def test_claims_report_is_read_not_produced(tmp_path):
    from agentpost.evidence.levels import read_claims_report

    with pytest.raises(UsageError, match="no claims report at .*missing.json"):
        read_claims_report(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(UsageError, match="not JSON"):
        read_claims_report(tmp_path / "bad.json")
    (tmp_path / "ok.json").write_text(json.dumps({"kite/C1": {"passed": 1, "failed": 0}}))
    assert read_claims_report(tmp_path / "ok.json") == {"kite/C1": {"passed": 1, "failed": 0}}
    import agentpost.evidence.ledger as ledger
    import inspect

    assert "subprocess" not in inspect.getsource(ledger) and "pytest" not in inspect.getsource(ledger)


def test_ledger_pages_are_swapped_in_whole(tmp_path):
    from agentpost.evidence.ledger import _swap_in

    out, tmp = tmp_path / "generated", tmp_path / ".generated.tmp"
    (out / "evidence").mkdir(parents=True)
    (out / "evidence" / "old.md").write_text("old")
    (tmp / "evidence").mkdir(parents=True)
    (tmp / "evidence" / "new.md").write_text("new")
    _swap_in(tmp, out)
    assert [p.name for p in (out / "evidence").iterdir()] == ["new.md"] and not tmp.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["generated"]


def test_show_device_records_the_receipts_device_facts(monkeypatch):
    from agentpost.record import environment

    shown = []
    monkeypatch.setattr(
        "agentpost.record.recording._display",
        lambda bundle, name, data, **recorded: shown.append({**bundle, "recorded": recorded}),
    )
    environment.show_device()
    assert shown[0]["recorded"] == {"kind": "machine"}  # never compared with another machine's (glue_regression.py)
    scrap = shown[0][SCRAP_MIME]
    assert scrap["name"] == environment.GLUE_NAME
    assert scrap["data"]["device"] == environment.device_info()
    assert scrap["data"]["packages"] == environment.package_versions()
    assert scrap["data"]["cuda_event_ms"] is None or scrap["data"]["cuda_event_ms"] > 0
    assert "torch_cuda" in scrap["data"]["packages"]


def test_the_parent_reads_the_notebook_once(monkeypatch):
    import nbformat

    from agentpost.run.cache import cached_result
    from agentpost.run.params import plan_runs

    reads = []
    real = nbformat.read
    monkeypatch.setattr(nbformat, "read", lambda *a, **k: reads.append(a[0]) or real(*a, **k))
    rc.source_notebook.cache_clear()
    specs = plan_runs(["paired-protocol"], "smoke")
    for spec in specs:
        cached_result(spec)
    assert len(reads) == 1, reads


def test_only_a_whole_unselected_test_run_writes_the_default_claims_report():
    from types import SimpleNamespace

    from agentpost.evidence.claims_plugin import _default_report
    from agentpost.evidence.levels import CLAIMS_REPORT
    from agentpost.project import project_root

    def config(args, keyword="", markexpr=""):
        options = {"keyword": keyword, "markexpr": markexpr}
        return SimpleNamespace(args=args, rootpath=project_root(), getoption=options.__getitem__)

    tests = str(project_root() / "tests")
    assert _default_report(config([tests])) == project_root() / CLAIMS_REPORT
    assert _default_report(config([])) == project_root() / CLAIMS_REPORT
    assert _default_report(config([tests + "/unit/test_glue.py"])) is None
    assert _default_report(config([tests], keyword="glue")) is None
    assert _default_report(config([tests], markexpr="claim")) is None
    assert _default_report(config([str(project_root() / "notebooks")])) is None
