"""The public data sets through 🤗 ``datasets`` (agentpost.data.hf): the same rows as before, and the hub fallback.

The row hashes below were taken after checking, on the shared data, that the ``datasets`` loaders return exactly
what the earlier plain-Python loaders returned (same rows, order and types; the comparison ran once against the
old code before it was deleted). Tests never reach the hub: the fallback is driven by a fake ``load_dataset`` and,
for the offline error, by ``HF_HUB_OFFLINE=1`` in a fresh process.
"""

import copy
import functools
import hashlib
import json
import os
import subprocess
import sys

import pytest

from agentpost.data import gsm8k, hf, registry, stabletoolbench, wikitext2


def _hash(obj) -> str:
    return hashlib.sha256(json.dumps(obj, ensure_ascii=False).encode()).hexdigest()[:16]


@pytest.mark.parametrize(
    "split, count, digest", [("train", 7473, "6fd0d1ef548efbbc"), ("test", 1319, "65ae5a5b62654eaf")]
)
def test_gsm8k_problems_rows_order_and_types(split, count, digest):
    rows = gsm8k.problems(split)
    assert type(rows) is tuple and len(rows) == count
    assert all(
        type(r) is dict and list(r) == ["question", "answer"] and all(type(v) is str for v in r.values()) for r in rows
    )
    assert _hash([[r["question"], r["answer"]] for r in rows]) == digest


@pytest.mark.parametrize("split, file", [("train", "train.txt"), ("validation", "valid.txt"), ("test", "test.txt")])
def test_wikitext_split_is_the_file_text_exactly(split, file):
    text = wikitext2.read_split(split)
    size, digest = registry.checksums("wikitext-2")[file]
    assert type(text) is str and len(text.encode("utf-8")) == size
    assert hashlib.sha256(text.encode("utf-8")).hexdigest() == digest  # byte-for-byte the file SOURCE.md describes
    assert len(wikitext2.articles(split)) == {"train": 600, "validation": 60, "test": 60}[split]


def test_stabletoolbench_queries_rows_order_and_types():
    queries = stabletoolbench.load_queries()
    assert len(queries) == 765 and all(type(q.query_id) is int and type(q.targets) is tuple for q in queries)
    assert (
        _hash([[q.group, q.query_id, q.text, list(q.targets), list(q.candidates)] for q in queries])
        == "375a81aa8516f6d2"
    )


def test_local_rows_cache_lives_in_the_project_cache_not_the_data_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTPOST_CACHE", str(tmp_path))
    rows = hf.local_rows(registry.data_file("gsm8k", "test.jsonl"), "json")
    assert len(rows) == 1319 and rows.cache_files
    assert all(f["filename"].startswith(str(tmp_path / "datasets")) for f in rows.cache_files)


def _source_md_table(name: str) -> dict:
    return {f: v for f, v in registry.checksums(name).items() if f in registry.DATASETS[name]}


@pytest.mark.parametrize("name", sorted(registry.HUB_SOURCES))
def test_hub_pins_equal_the_data_sets_source_md(name):
    pinned = {f: (size, digest) for f, (_split, size, digest) in registry.HUB_SOURCES[name].files.items()}
    assert pinned == _source_md_table(name)


@functools.lru_cache(maxsize=None)
def _hub_rows_from_local(name: str) -> dict[str, list[dict]]:
    """What the hub copy holds, made from the local files in the hub's row format (no network): openai/gsm8k rows
    are the JSON objects; Salesforce/wikitext rows are lines with their newline, blank lines as ""."""
    out = {}
    for filename, (split, _size, _digest) in registry.HUB_SOURCES[name].files.items():
        text = registry.data_file(name, filename).read_text(encoding="utf-8")
        if name == "gsm8k":
            out[split] = [json.loads(line) for line in text.splitlines()]
        else:
            out[split] = [{"text": line if line.strip() else ""} for line in text.splitlines(keepends=True)]
    return out


@pytest.mark.parametrize("name", sorted(registry.HUB_SOURCES))
def test_hub_rows_rebuild_the_local_files_with_their_pinned_checksums(name):
    rows = _hub_rows_from_local(name)
    for filename, (split, size, digest) in registry.HUB_SOURCES[name].files.items():
        data = hf.REBUILD[name](rows[split])
        assert (len(data), hashlib.sha256(data).hexdigest()) == (size, digest), filename


@pytest.fixture
def gsm8k_hub_rows():
    return copy.deepcopy(_hub_rows_from_local("gsm8k"))


@pytest.fixture
def no_local_data(tmp_path, monkeypatch):
    """A machine without ../shared/data: no candidate folder exists; the project cache is empty; the hub client
    refuses every call unless a test fakes it (tests never reach the hub)."""
    import datasets

    def never(*args, **kwargs):
        raise AssertionError("a test reached for the hub")

    monkeypatch.setattr(datasets, "load_dataset", never)
    monkeypatch.setattr(registry, "_candidates", lambda name: [tmp_path / "nowhere" / name])
    monkeypatch.setenv("AGENTPOST_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache" / "data"


def _fake_hub(monkeypatch, splits, calls):
    import datasets

    def load_dataset(repo, config, cache_dir):
        calls.append((repo, config, cache_dir))
        return splits

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)


def test_local_data_never_takes_the_hub(monkeypatch):
    monkeypatch.setattr(
        hf, "from_hub", lambda name: pytest.fail("the hub fallback was taken although local data exists")
    )
    calls = []
    _fake_hub(monkeypatch, {}, calls)
    assert registry.dataset_dir("gsm8k").joinpath("SOURCE.md").is_file() and not calls


def test_without_local_data_the_hub_copy_is_rebuilt_checked_and_reused(gsm8k_hub_rows, no_local_data, monkeypatch):
    rows, calls = gsm8k_hub_rows, []
    _fake_hub(monkeypatch, rows, calls)
    folder = registry.dataset_dir("gsm8k")
    assert folder == no_local_data / "gsm8k" and calls == [("openai/gsm8k", "main", str(hf.datasets_cache()))]
    pinned = {f: (size, digest) for f, (_split, size, digest) in registry.HUB_SOURCES["gsm8k"].files.items()}
    assert registry.checksums("gsm8k") == pinned
    path = registry.data_file("gsm8k", "test.jsonl")  # checked against the SOURCE.md written beside the rebuilt files
    assert path.parent == folder and len(path.read_text().splitlines()) == 1319
    assert registry.dataset_dir("gsm8k") == folder and len(calls) == 1  # the second time: from the cache, no hub


def test_a_hub_copy_that_differs_from_source_md_is_refused_and_not_kept(gsm8k_hub_rows, no_local_data, monkeypatch):
    rows = gsm8k_hub_rows
    rows["test"] = rows["test"][:-1]
    _fake_hub(monkeypatch, rows, [])
    with pytest.raises(
        registry.DataChecksumError, match=r"openai/gsm8k \(main\) split 'test' rebuilds gsm8k/test.jsonl"
    ):
        registry.dataset_dir("gsm8k")
    assert not (no_local_data / "gsm8k").exists() and not list(no_local_data.glob(".gsm8k.tmp-*"))


def test_an_unreachable_hub_is_a_data_missing_error_naming_the_way_out(no_local_data, monkeypatch):
    import datasets

    def unreachable(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'Salesforce/wikitext' on the Hub")

    monkeypatch.setattr(datasets, "load_dataset", unreachable)
    with pytest.raises(
        registry.DataMissingError, match=r"wikitext-2' not found locally .*Salesforce/wikitext .*AGENTPOST_DATA"
    ):
        registry.data_file("wikitext-2", "test.txt")


def test_offline_without_local_data_fails_clearly_before_any_download(tmp_path):
    """A fresh process with HF_HUB_OFFLINE=1, no shared data and empty caches: one clear error, nothing fetched."""
    env = {k: v for k, v in os.environ.items() if k not in ("AGENTPOST_DATA",)}
    env.update(
        AGENTPOST_ROOT=str(tmp_path / "checkout"),
        AGENTPOST_CACHE=str(tmp_path / "cache"),
        HF_HOME=str(tmp_path / "hf"),
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
    )
    code = (
        "from agentpost.data import gsm8k\n"
        "from agentpost.data.registry import DataMissingError\n"
        "try:\n    gsm8k.problems('test')\nexcept DataMissingError as err:\n    print(err)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "gsm8k' not found locally" in out.stdout and "HF_HUB_OFFLINE is set" in out.stdout
    assert "AGENTPOST_DATA" in out.stdout
    assert not (tmp_path / "cache" / "data" / "gsm8k").exists()
