"""The bad-input catalogue: every row is an input a user can give, the exit code it must get, the
culprit its one-line message must name, and the promise that nothing was written (the project tree is byte-for-byte
unchanged, no empty folder included). The table can only grow.

Rows run the command line in-process against a small throwaway project (``AGENTPOST_ROOT``), so the whole table
takes seconds; the inputs that need a real process (a closed pipe) are at the end.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from tests.e2e.conftest import DATA, REPO

PP = "paired-protocol"
PROFILE = Path("params") / PP


@dataclass(frozen=True)
class Row:
    id: str
    argv: tuple[str, ...]
    code: int
    culprit: str  # the message (stderr, or stdout for validate's findings) must contain it
    setup: Callable[[Path], dict] | None = None  # mutates the project; returns environment overrides
    absent: str | None = None  # a wrong message this row once gave; must not come back
    writes: bool = False  # the command does its work (the ledger's pages) and then names the culprit


def run(*args: str) -> tuple[str, ...]:
    return ("run", PP, *args)


def profile(text: str | bytes, name: str = "bad") -> Callable[[Path], dict]:
    """A profile file ``params/paired-protocol/<name>.yaml`` holding ``text``."""

    def setup(project: Path) -> dict:
        path = project / PROFILE / f"{name}.yaml"
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
        return {}

    return setup


def notebook(edit: Callable[[bytes], bytes]) -> Callable[[Path], dict]:
    def setup(project: Path) -> dict:
        path = project / "notebooks" / f"{PP}.ipynb"
        path.write_bytes(edit(path.read_bytes()))
        return {}

    return setup


def parameters_line(old: str, new: str) -> Callable[[Path], dict]:
    """Replace one line's start in the parameters cell (the notebook stays valid JSON)."""
    return notebook(lambda b: b.replace(json.dumps(old)[1:-1].encode(), json.dumps(new)[1:-1].encode(), 1))


def env(**values: str) -> Callable[[Path], dict]:
    return lambda project: {k: v.format(project=project) for k, v in values.items()}


def data_copy(edit_test_txt: Callable[[bytes], bytes]) -> Callable[[Path], dict]:
    """A data folder whose wikitext-2/test.txt is edited (the other files linked to the shared ones)."""

    def setup(project: Path) -> dict:
        data = project.parent / "data" / "wikitext-2"
        data.mkdir(parents=True)
        for f in ("SOURCE.md", "train.txt", "valid.txt"):
            (data / f).symlink_to(DATA / "wikitext-2" / f)
        (data / "test.txt").write_bytes(edit_test_txt((DATA / "wikitext-2" / "test.txt").read_bytes()))
        return {"AGENTPOST_DATA": str(data.parent)}

    return setup


def run_folder(receipt: bytes | None, nb: bytes | None) -> Callable[[Path], dict]:
    """A run folder outside the project (``<tmp>/run``) holding the given receipt and notebook bytes."""

    def setup(project: Path) -> dict:
        folder = project.parent / "run"
        folder.mkdir()
        if receipt is not None:
            (folder / "receipt.json").write_bytes(receipt)
        if nb is not None:
            (folder / "notebook.ipynb").write_bytes(nb)
        return {}

    return setup


def data_folder(source_md: Callable[[bytes], bytes] = lambda b: b, test_txt: str = "link") -> Callable[[Path], dict]:
    """A wikitext-2 folder linked to the shared one, with an edited SOURCE.md and ``test.txt`` a link, a folder,
    a FIFO or its first 3000 bytes."""

    def setup(project: Path) -> dict:
        data = project.parent / "data" / "wikitext-2"
        data.mkdir(parents=True)
        for f in ("train.txt", "valid.txt"):
            (data / f).symlink_to(DATA / "wikitext-2" / f)
        (data / "SOURCE.md").write_bytes(source_md((DATA / "wikitext-2" / "SOURCE.md").read_bytes()))
        {
            "link": lambda p: p.symlink_to(DATA / "wikitext-2" / "test.txt"),
            "folder": Path.mkdir,
            "fifo": os.mkfifo,
            "short": lambda p: p.write_bytes((DATA / "wikitext-2" / "test.txt").read_bytes()[:3000]),
        }[test_txt](data / "test.txt")
        return {"AGENTPOST_DATA": str(data.parent)}

    return setup


def profile_link(target: str) -> Callable[[Path], dict]:
    def setup(project: Path) -> dict:
        (project / PROFILE / "bad.yaml").symlink_to(target)
        return {}

    return setup


def claims_file(text: str) -> Callable[[Path], dict]:
    """A claims report ``<tmp>/claims.json`` holding ``text``."""

    def setup(project: Path) -> dict:
        (project.parent / "claims.json").write_text(text)
        return {}

    return setup


def file_at_run_folder(project: Path) -> dict:
    """A file where the first smoke run's folder goes (issue 47: it ran 38 s, then NotADirectoryError)."""
    from agentpost.run.params import plan_runs

    _fresh_caches()
    folder = plan_runs([PP], "smoke")[0].folder
    folder.parent.mkdir(parents=True)
    folder.write_text("not a folder\n")
    return {}


def long_tmpdir(project: Path) -> dict:
    """A $TMPDIR of 130 characters (issue 47: ZMQError "File name too long" after the run started)."""
    long = project.parent / ("t" * (130 - len(str(project.parent)) - 1))
    long.mkdir()
    return {"TMPDIR": str(long)}  # read again: _fresh_caches


def empty_data_folder(project: Path) -> dict:
    (project.parent / "empty-data").mkdir()
    return {"AGENTPOST_DATA": str(project.parent / "empty-data")}


#: A profile file's name that once reached the book as live HTML (issue 47).
HOSTILE_NAME = "x\n```{raw} html\n<img src=x onerror=alert(1)>\n```\n"


def _twice(row: bytes) -> Callable[[bytes], bytes]:
    return lambda b: b.replace(row, row + b"\n" + row, 1)


TEST_ROW = b"| test.txt | 1256449 | d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0 | 6f3fc88e4cd88456ea892971f9f12243e8428624 |"


def runs_root_is_a_file(project: Path) -> dict:
    (project / "book").mkdir(exist_ok=True)
    (project / "book" / "runs").write_text("not a folder\n")
    return {}


def read_only_runs(project: Path) -> dict:
    (project / "book" / "runs").mkdir(parents=True)
    (project / "book" / "runs").chmod(0o500)
    return {}


def stored_receipt(receipt: bytes, where: str = "paired-protocol/smoke/seed-1-x") -> Callable[[Path], dict]:
    """A run folder under the project's runs root holding ``receipt`` (and an empty notebook), plus a claims
    report ``<tmp>/claims.json`` for the ledger."""

    def setup(project: Path) -> dict:
        folder = project / "book" / "runs" / where
        folder.mkdir(parents=True)
        (folder / "receipt.json").write_bytes(receipt)
        (folder / "notebook.ipynb").write_bytes(NB_JSON)
        (project.parent / "claims.json").write_text("{}")
        return {}

    return setup


NB_JSON = json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode()

ROWS = [
    # ---- the command's own arguments
    Row("no-chapter", ("run",), 2, "CHAPTER"),
    Row("unknown-command", ("bogus",), 2, "bogus"),
    Row("jobs-not-a-number", run("--jobs", "x"), 2, "--jobs"),
    Row("jobs-zero", run("--jobs", "0"), 2, "--jobs"),
    Row("unknown-backend", run("--backend", "nope"), 2, "'nope'"),
    # ---- backend options (each belongs to one backend)
    Row("address-without-ray", run("--address", "auto"), 2, "--address is for --backend ray, not local"),
    Row("partition-without-slurm", run("--partition", "gpu"), 2, "--partition is for --backend slurm, not local"),
    Row("time-without-slurm", run("--backend", "ray", "--time", "30"), 2, "--time is for --backend slurm, not ray"),
    Row(
        "address-malformed",
        run("--backend", "ray", "--address", "nonsense"),
        2,
        "--address must be auto, ray://HOST:PORT or HOST:PORT, got 'nonsense'",
    ),
    Row("time-zero", run("--backend", "slurm", "--time", "0"), 2, "--time must be at least 1 minute, got 0"),
    Row("time-not-a-number", run("--backend", "slurm", "--time", "soon"), 2, "--time"),
    Row("slurm-without-sbatch", run("--backend", "slurm"), 2, "sbatch is not on PATH", env(PATH="/nonexistent")),
    Row(
        "profile-resources-unknown",
        run("--profile", "bad"),
        2,
        "unknown resources ['gpus']",
        profile("seeds: [1]\nresources: {gpus: 1}\n"),
    ),
    Row(
        "profile-retries-negative",
        run("--profile", "bad"),
        2,
        "max_retries must be an integer from 0 to 10",
        profile("seeds: [1]\nmax_retries: -1\n"),
    ),
    Row("chapter-twice", run(PP), 2, "named more than once: paired-protocol"),
    Row("unknown-chapter", ("run", "no-such-chapter"), 2, "no-such-chapter"),
    Row("chapter-not-started", ("run", "opsd"), 2, "opsd"),
    # ---- profiles
    Row("profile-unknown", run("--profile", "nope"), 2, "'nope' is not a profile"),
    Row("profile-path-relative", run("--profile", "../../../elsewhere/prof"), 2, "is not a profile name"),
    Row("profile-path-absolute", run("--profile", "/etc/passwd"), 2, "is not a profile name"),
    Row("profile-bare-number", run("--profile", "bad"), 2, "bad.yaml: must be a YAML mapping", profile("42\n")),
    Row("profile-invalid-yaml", run("--profile", "bad"), 2, "bad.yaml: invalid YAML", profile("seeds: [1, 2\n")),
    Row(
        "profile-a-list",
        run("--profile", "bad"),
        2,
        "must be a YAML mapping",
        profile("[42, 43]\n"),
        absent="unknown profile keys",
    ),
    Row(
        "profile-a-string", run("--profile", "bad"), 2, "must be a YAML mapping", profile("hello\n"), absent="'h', 'e'"
    ),
    Row(
        "profile-parameters-a-list",
        run("--profile", "bad"),
        2,
        "`parameters:` must be a mapping",
        profile("seeds: [1]\nparameters: [1, 2]\n"),
    ),
    Row("profile-not-utf8", run("--profile", "bad"), 2, "bad.yaml: not UTF-8", profile(b"seeds: [1]\n# caf\xe9\n")),
    Row("profile-unknown-key", run("--profile", "bad"), 2, "unknown profile keys ['seed']", profile("seed: 1\n")),
    Row("profile-timeout-text", run("--profile", "bad"), 2, "`timeout_s:`", profile("seeds: [1]\ntimeout_s: soon\n")),
    Row("profile-timeout-negative", run("--profile", "bad"), 2, "`timeout_s:`", profile("seeds: [1]\ntimeout_s: -1\n")),
    Row(
        "profile-seeds-a-string",
        run("--profile", "bad"),
        2,
        "seeds must be a list of integers",
        profile("seeds: abc\n"),
        absent="empty",
    ),
    Row("profile-seeds-empty", run("--profile", "bad"), 2, "seed list is empty", profile("seeds: []\n")),
    Row(
        "profile-seed-negative",
        run("--profile", "bad"),
        2,
        "seeds [-5] are outside the seed range",
        profile("seeds: [-5]\n"),
    ),
    Row("profile-seeds-duplicate", run("--profile", "bad"), 2, "duplicate seeds", profile("seeds: [1, 1]\n")),
    Row(
        "profile-value-wrong-type",
        run("--profile", "bad"),
        2,
        "parameter 'n_boot' must be int",
        profile("seeds: [1]\nparameters: {n_boot: x}\n"),
    ),
    Row(
        "profile-value-out-of-range",
        run("--profile", "bad"),
        2,
        "bad.yaml: parameter 'train_fraction' = 7",
        profile("seeds: [1]\nparameters: {train_fraction: 7}\n"),
    ),
    # ---- -p overrides
    Row("param-unknown", run("-p", "no_such_param=1"), 2, "unknown parameter 'no_such_param'", absent="seed,"),
    Row("param-seed", run("-p", "seed=5"), 2, "'seed' is set by the seed list"),
    Row("param-wrong-type", run("-p", "n_boot=many"), 2, "parameter 'n_boot' must be int"),
    Row("param-list-for-float", run("-p", "train_fraction=[1]"), 2, "parameter 'train_fraction' must be float"),
    Row("param-unparsable", run("-p", "n_boot=[1,"), 2, "-p n_boot"),
    Row("param-no-equals", run("-p", "n_boot"), 2, "KEY=VALUE"),
    Row("param-no-key", run("-p", "=3"), 2, "KEY=VALUE"),
    Row("param-above-range", run("-p", "train_fraction=5"), 2, "'train_fraction' = 5: 5 is outside its range 0..1"),
    Row("param-below-range", run("-p", "n_boot=-3"), 2, "'n_boot' = -3: -3 is outside its range 1.."),
    Row("param-element-type", run("-p", "bigram_k_grid=[a]"), 2, "'bigram_k_grid' must be list of float"),
    Row("param-element-range", run("-p", "bigram_k_grid=[0.1, -1]"), 2, "'bigram_k_grid' = [0.1, -1]"),
    # ---- seeds
    Row("seeds-empty", run("--seeds", ","), 2, "seed list is empty"),
    Row("seeds-not-integers", run("--seeds", "1,x"), 2, "seeds must be integers, got 'x'"),
    Row("seeds-negative", run("--seeds=-1"), 2, "seeds [-1] are outside the seed range 0..4294967295"),
    Row("seeds-huge", run("--seeds", "4294967296"), 2, "seeds [4294967296] are outside"),
    # ---- the notebook
    Row(
        "notebook-expression",
        run(),
        2,
        "paired-protocol.ipynb: parameter 'n_boot' = 2 * 2000 is not a literal",
        parameters_line("n_boot = 4000", "n_boot = 2 * 2000"),
    ),
    Row(
        "notebook-bad-declaration",
        run(),
        2,
        "paired-protocol.ipynb: parameter 'n_boot': write its declaration",
        notebook(lambda b: b.replace(b"(range: 1..)", b"(range: many)", 1)),
    ),
    Row(
        "notebook-bad-bound",
        run(),
        2,
        "the bound 'x' of its declared range",
        notebook(lambda b: b.replace(b"(range: 1..)", b"(range: x..)", 1)),
    ),
    Row(
        "notebook-truncated",
        run(),
        2,
        "paired-protocol.ipynb: not a readable notebook",
        notebook(lambda b: b[: len(b) // 2]),
    ),
    Row("notebook-empty", run(), 2, "paired-protocol.ipynb: not a readable notebook", notebook(lambda b: b"")),
    Row(
        "notebook-no-parameters-cell",
        run(),
        2,
        "paired-protocol.ipynb: expected exactly one cell tagged 'parameters'",
        notebook(lambda b: NB_JSON),
    ),
    # ---- data
    Row("data-missing", run(), 2, "data set 'wikitext-2' not found", env(AGENTPOST_DATA="{project}/notebooks")),
    Row(
        "data-truncated",
        run("--profile", "smoke"),
        2,
        "wikitext-2/test.txt has 3000 bytes; wikitext-2/SOURCE.md records 1256449",
        data_copy(lambda b: b[:3000]),
    ),
    Row(
        "data-wrong-content",
        run("--profile", "smoke"),
        2,
        "wikitext-2/test.txt has sha256",
        data_copy(lambda b: b"x" * len(b)),
    ),
    # ---- environment: a root that is named must exist
    Row("data-root-missing", ("list",), 2, "AGENTPOST_DATA=/nonexistent", env(AGENTPOST_DATA="/nonexistent")),
    Row("project-root-missing", ("list",), 2, "AGENTPOST_ROOT=/nonexistent", env(AGENTPOST_ROOT="/nonexistent")),
    Row(
        "project-root-not-a-checkout",
        ("list",),
        2,
        "is not an agentpost checkout",
        env(AGENTPOST_ROOT="{project}/params"),
    ),
    # ---- where runs are written
    Row("runs-folder-is-a-file", run(), 2, "cannot write runs to", runs_root_is_a_file),
    # ---- validate
    Row("validate-missing-path", ("validate", "/no/such/run"), 2, "no such path: /no/such/run"),
    Row("validate-empty-folder", ("validate", "params"), 2, "no run folder"),
    Row("validate-bare-receipt", ("validate", "{tmp}/run/receipt.json"), 2, "no run folder", run_folder(b"{}", None)),
    Row(
        "validate-corrupt-receipt",
        ("validate", "{tmp}/run"),
        1,
        "receipt.json: not JSON",
        run_folder(b'{"schema_version": 2, "chap', NB_JSON),
    ),
    Row(
        "validate-receipt-not-utf8",
        ("validate", "{tmp}/run"),
        1,
        "receipt.json: not JSON",
        run_folder(b"\xff\xfe{}", NB_JSON),
    ),
    Row(
        "validate-receipt-a-list",
        ("validate", "{tmp}/run"),
        1,
        "receipt.json: not a JSON object",
        run_folder(b"[1, 2]", NB_JSON),
    ),
    Row(
        "validate-notebook-missing",
        ("validate", "{tmp}/run"),
        1,
        "needs receipt.json and notebook.ipynb",
        run_folder(b"{}", None),
    ),
    # ---- refresh and ledger
    Row("refresh-unknown-chapter", ("refresh", "nosuch"), 2, "unknown chapter 'nosuch'"),
    Row("refresh-not-started", ("refresh", "opsd"), 2, "opsd: no notebook yet"),
    Row(
        "refresh-truncated-notebook",
        ("refresh", PP),
        2,
        "paired-protocol.ipynb: not a readable notebook",
        notebook(lambda b: b[:100]),
    ),
    Row("ledger-missing-report", ("ledger", "--claims-report", "/no/such/report.json"), 2, "no claims report"),
    Row(
        "ledger-report-not-json",
        ("ledger", "--claims-report", "{tmp}/run/receipt.json"),
        2,
        "is not JSON",
        run_folder(b"{oops", None),
    ),
    # ---- a malformed receipt under the runs root: named (folder and why), everything else still listed
    Row(
        "list-receipt-empty-object", ("list",), 2, "seed-1-x/receipt.json (schema_version: None", stored_receipt(b"{}")
    ),
    Row(
        "list-receipt-chapter-a-list",
        ("list",),
        2,
        "seed-1-x/receipt.json",
        stored_receipt(b'{"schema_version": 3, "chapter": ["a"]}'),
    ),
    Row(
        "list-receipt-profile-a-number",
        ("list",),
        2,
        "seed-1-x/receipt.json",
        stored_receipt(b'{"schema_version": 3, "chapter": "kite", "profile": 7}'),
    ),
    Row(
        "list-receipt-hostile-folder",
        ("list",),
        2,
        "receipt.json (receipt.json: not JSON",
        stored_receipt(b"{", "<x>/`y`/seed-1"),
    ),
    Row(
        "validate-receipt-chapter-a-list",
        ("validate",),
        1,
        "seed-1-x: chapter: Input should be a valid string",
        stored_receipt(b'{"schema_version": 3, "chapter": ["a"]}'),
    ),
    Row(
        "validate-receipt-profile-a-number",
        ("validate",),
        1,
        "seed-1-x: profile: Input should be a valid string",
        stored_receipt(b'{"schema_version": 3, "chapter": "kite", "profile": 7}'),
    ),
    Row(
        "validate-receipt-huge-version",
        ("validate",),
        1,
        "schema_version: 'xxxxxxxx",
        stored_receipt(json.dumps({"schema_version": "x" * 10**6}).encode()),
        absent="x" * 100,
    ),
    # ---- YAML and numbers: YAML 1.2 numbers, no aliases, no duplicate keys, finite values, ASCII seeds
    Row(
        "profile-seeds-alias-bomb",
        run("--profile", "bad"),
        2,
        "aliases (*name) are not allowed",
        profile("seeds: [&a [1, 1, 1, 1, 1, 1, 1, 1], [*a, *a, *a, *a, *a, *a, *a, *a]]\n"),
    ),
    Row(
        "profile-duplicate-key",
        run("--profile", "bad"),
        2,
        "duplicate key 'seeds'",
        profile("seeds: [1]\nseeds: [2]\n"),
    ),
    Row(
        "profile-num-gpus-nan",
        run("--profile", "bad"),
        2,
        "resources.num_gpus must be",
        profile("seeds: [1]\nresources: {num_gpus: .nan}\n"),
    ),
    Row(
        "profile-value-nan",
        run("--profile", "bad"),
        2,
        "parameter 'train_fraction' = nan: NaN",
        profile("seeds: [1]\nparameters: {train_fraction: .nan}\n"),
    ),
    Row(
        "profile-a-link-outside",
        run("--profile", "bad"),
        2,
        "bad.yaml: not a regular file of the repository",
        profile_link("/etc/passwd"),
        absent="root:",
    ),
    Row(
        "profile-deep-nesting",
        run("--profile", "bad"),
        2,
        "bad.yaml: invalid YAML: nested more than 50 levels",
        profile("seeds: " + "[" * 5000 + "]" * 5000 + "\n"),
    ),
    Row("param-nan", run("-p", "train_fraction=.nan"), 2, "parameter 'train_fraction' = nan: NaN"),
    Row(
        "param-inf", run("-p", "bigram_k_grid=[0.1, .inf]"), 2, "parameter 'bigram_k_grid' = [0.1, inf]: inf is refused"
    ),
    Row("param-twice", run("-p", "n_boot=10", "-p", "n_boot=20"), 2, "-p n_boot is given more than once"),
    Row("param-5000-digits", run("-p", "n_boot=" + "9" * 5000), 2, "-p n_boot: the value", absent="9" * 100),
    Row(
        "param-5000-deep",
        run("-p", "bigram_k_grid=" + "[" * 5000 + "]" * 5000),
        2,
        "-p bigram_k_grid: the value",
        absent="[" * 100,
    ),
    Row("seeds-arabic-digits", run("--seeds", "٤٣"), 2, "seeds must be integers, got '٤٣'"),
    Row("seeds-underscore", run("--seeds", "4_3"), 2, "seeds must be integers, got '4_3'"),
    Row("seeds-plus", run("--seeds", "+44"), 2, "seeds must be integers, got '+44'"),
    Row(
        "seeds-10000-one-duplicate",
        run("--seeds", ",".join(map(str, [*range(10_000), 5]))),
        2,
        "duplicate seeds [5]",
        absent="9999",
    ),
    # ---- data files and their SOURCE.md
    Row(
        "data-source-md-not-utf8",
        run("--profile", "smoke"),
        2,
        "wikitext-2/SOURCE.md is not UTF-8",
        data_folder(lambda b: b + b"\xff\xfe"),
    ),
    Row(
        "data-source-md-row-twice",
        run("--profile", "smoke"),
        2,
        "wikitext-2/SOURCE.md lists test.txt twice",
        data_folder(_twice(TEST_ROW)),
    ),
    Row(
        "data-file-a-folder",
        run("--profile", "smoke"),
        2,
        "wikitext-2/test.txt is not a regular file",
        data_folder(test_txt="folder"),
    ),
    Row(
        "data-file-a-fifo",
        run("--profile", "smoke"),
        2,
        "wikitext-2/test.txt is not a regular file",
        data_folder(test_txt="fifo"),
    ),
    Row(
        "data-and-source-md-edited-together",
        run("--profile", "smoke"),
        2,
        "but the repository pins 1256449 bytes",
        data_folder(
            lambda b: b.replace(
                TEST_ROW,
                TEST_ROW.replace(b"1256449", b"3000").replace(
                    b"d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0",
                    hashlib.sha256((DATA / "wikitext-2" / "test.txt").read_bytes()[:3000]).hexdigest().encode(),
                ),
            ),
            "short",
        ),
    ),
    Row(
        "ledger-receipt-chapter-a-list",
        ("ledger", "--claims-report", "{tmp}/claims.json"),
        2,
        "seed-1-x/receipt.json",
        stored_receipt(b'{"schema_version": 3, "chapter": ["a"]}'),
        writes=True,
    ),
    # ---- issue 47: names checked where listed, stray receipts, pre-flight checks before any run
    Row(
        "compare-profile-name-markup",
        ("compare", PP),
        2,
        "a chapter or profile name must be",
        profile("seeds: [1]\n", HOSTILE_NAME),
    ),
    Row("run-profile-name-markup", run(), 2, "params/paired-protocol/'x\\n```{raw} html", profile("", HOSTILE_NAME)),
    Row("list-stray-receipt", ("list",), 2, "(folder: stray receipt", stored_receipt(b"{}", "")),
    Row(
        "validate-stray-receipt",
        ("validate",),
        1,
        "runs/paired-protocol: folder: stray receipt",
        stored_receipt(b"{}", PP),
    ),
    Row(
        "ledger-claims-report-wrong-types",
        ("ledger", "--claims-report", "{tmp}/claims.json"),
        2,
        "entry 'paired-protocol/C1' is {'passed': '3'",
        claims_file('{"paired-protocol/C1": {"passed": "3", "failed": 0}}'),
    ),
    Row("run-file-at-run-folder", run(), 2, "a file where a run folder goes", file_at_run_folder),
    Row("run-empty-grid", run("-p", "bigram_k_grid=[]"), 2, "parameter 'bigram_k_grid' is empty", None),
    Row("run-tmpdir-too-long", run(), 2, "is too long for a kernel's sockets", long_tmpdir),
    Row("refresh-tmpdir-too-long", ("refresh", PP), 2, "is too long for a kernel's sockets", long_tmpdir),
    Row("run-data-folder-empty", run(), 2, "empty-data holds no wikitext-2/ folder", empty_data_folder),
]


def test_the_catalogue_only_grows():
    assert len(ROWS) >= 40 and len({r.id for r in ROWS}) == len(ROWS)


def make_small_project(dest: Path) -> Path:
    """The paired-protocol chapter's notebook and every profile, with the repository's configuration."""
    dest.mkdir()
    shutil.copy(REPO / "pyproject.toml", dest / "pyproject.toml")
    shutil.copytree(REPO / "params", dest / "params")
    (dest / "notebooks").mkdir()
    shutil.copy(REPO / "notebooks" / f"{PP}.ipynb", dest / "notebooks")
    return dest


def tree_state(root: Path) -> dict[str, str]:
    """Every folder and file under ``root`` with its content's hash: "nothing written" is this staying equal."""
    state = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        state[rel] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "dir"
    return state


def _fresh_caches() -> None:
    """The library caches the project root, its configuration and what it read; a row's project is new."""
    from agentpost import project
    from agentpost.catalogue import chapters
    from agentpost.data import registry
    from agentpost.evidence import receipt

    for cached in (project.project_root, project.config, chapters, receipt.source_notebook, receipt.code_tree_hash):
        cached.cache_clear()
    for value in vars(registry).values():
        if isinstance(value, functools._lru_cache_wrapper):
            value.cache_clear()
    import tempfile

    tempfile.tempdir = None  # $TMPDIR is read again (a row sets it)


@pytest.mark.parametrize("row", ROWS, ids=[r.id for r in ROWS])
def test_bad_input(row, tmp_path, monkeypatch, capsys):
    from agentpost.cli import main

    project = make_small_project(tmp_path / "project")
    monkeypatch.setenv("AGENTPOST_ROOT", str(project))
    monkeypatch.setenv("AGENTPOST_DATA", str(DATA))
    for key, value in (row.setup(project) if row.setup else {}).items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(project)
    _fresh_caches()
    before = tree_state(tmp_path)
    argv = [a.format(tmp=tmp_path) for a in row.argv]
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own usage errors
        code = exit_.code
    finally:
        _fresh_caches()
    out, err = capsys.readouterr()
    message = err + out
    assert code == row.code, message
    assert row.culprit in message, message
    if row.absent:
        assert row.absent not in message, message
    assert "Traceback" not in message and "unexpected error" not in message
    if row.code == 2:
        assert len([line for line in err.splitlines() if line.startswith("agentpost")]) <= 1 or "usage:" in err
    if row.id.startswith("list-"):
        assert "paired-protocol" in out  # the other chapters and runs are still listed
    if not row.writes:
        assert tree_state(tmp_path) == before, "nothing may be written"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_read_only_runs_folder(tmp_path, monkeypatch, capsys):
    from agentpost.cli import main

    project = make_small_project(tmp_path / "project")
    read_only_runs(project)
    monkeypatch.setenv("AGENTPOST_ROOT", str(project))
    monkeypatch.setenv("AGENTPOST_DATA", str(DATA))
    _fresh_caches()
    before = tree_state(tmp_path)
    try:
        assert main(["run", PP]) == 2
    finally:
        _fresh_caches()
        (project / "book" / "runs").chmod(0o700)
    assert "cannot write runs to" in capsys.readouterr().err
    assert tree_state(tmp_path) == before


def test_a_closed_pipe_is_quiet(tmp_path):
    """`agentpost list | head`: the reader leaves early; no BrokenPipeError traceback, the exit code of SIGPIPE."""
    project = make_small_project(tmp_path / "project")
    env = {**os.environ, "AGENTPOST_ROOT": str(project), "AGENTPOST_DATA": str(DATA)}
    shell = f"{sys.executable} -m agentpost list | true"  # the reader is gone before the first line is written
    result = subprocess.run(["bash", "-o", "pipefail", "-c", shell], env=env, capture_output=True, text=True)
    assert result.stderr == ""
    assert result.returncode == 141


def test_a_failing_refresh_names_the_cell_and_keeps_the_notebook(tmp_path, monkeypatch, capsys):
    """`agentpost refresh` of a notebook whose cell fails: exit 1, one line naming the cell and the error, the
    committed notebook unchanged (no traceback, no temporary file left)."""
    from agentpost.cli import main

    project = make_small_project(tmp_path / "project")
    parameters_line("train_fraction = 0.5", "train_fraction = 0.0")(project)
    monkeypatch.setenv("AGENTPOST_ROOT", str(project))
    monkeypatch.setenv("AGENTPOST_DATA", str(DATA))
    _fresh_caches()
    before = tree_state(project)
    try:
        code = main(["refresh", PP])
    finally:
        _fresh_caches()
    err = capsys.readouterr().err
    assert code == 1, err
    said = [line for line in err.splitlines() if line.startswith("agentpost")]
    assert len(said) == 1 and "ValueError" in said[0] and "notebooks/paired-protocol.ipynb is unchanged" in said[0], err
    assert "Traceback" not in err
    assert tree_state(project) == before
