"""Prose that cannot go stale (issue 44, ``agentpost.evidence.prose``): every chapter's results part types no result
number, and no chapter, profile file or catalogue gap says that something has or has not run against what its runs
and GPU receipts show. The rules first, on hand-written markdown; then the contract over every started chapter."""

import json

import nbformat
import pytest

from agentpost.catalogue import Chapter, Claim, Comparison, chapter, chapters
from agentpost.evidence.prose import (
    Quote,
    declared_numbers,
    gpu_receipt_items,
    markdown_lines,
    missing_evidence,
    not_run_claims,
    profiles_with_runs,
    prose_only,
    typed_numbers,
    unknown_glue_references,
)
from agentpost.run.params import load_profile, notebook_defaults
from tests.unit.test_chapter_contract import glued_names

STARTED = [c for c in chapters() if c.started]

#: The reviewed exceptions to the typed-number rule: numbers that are neither results nor declared anywhere the
#: rule looks (a data set's size, a number the paper states that the catalogue does not quote, a method constant
#: written out, a dated exploratory record). An entry that lets nothing through fails the contract: keep it short.
QUOTES = (
    Quote(
        "paired-protocol",
        "**Data.** WikiText-2 (tokenized, CC BY-SA 3.0):",
        "the data set's own sizes (articles per split, training vocabulary), fixed by the data, not by a run",
        block=True,
    ),
    Quote("paired-protocol", "the 60 test articles", "WikiText-2's test split: the items, fixed by the data"),
    Quote("paired-protocol", "The same 60 articles", "WikiText-2's test split: the items, fixed by the data"),
    Quote("muser", "2013-02-28 to 2013-09-01", "MovieTweetings' crawl window, a fact of the data set (its SOURCE.md)"),
    Quote("muser", "in 2013", "MovieTweetings' crawl year, and the year-only item text it gives its movies"),
    Quote(
        "graft",
        "| room, step limit, updates, tokens per move |",
        "the headroom pilot that chose the room: a dated exploratory record (its command is given; not re-run, no "
        "receipt), not evidence for any claim",
        block=True,
    ),
)


# --- the rules, on hand-written markdown ------------------------------------------------------------------------


def _chapter(**kw) -> Chapter:
    base = dict(
        id="toy",
        title="Toy",
        arxiv=None,
        spec=None,
        order=1,
        datasets=(),
        synthetic=False,
        claims=(Claim("C1", "The paper reports 97.4 on ALFWorld."),),
        gaps=("Runs for 150 steps.", "Here: our drift gains 0.68 nats."),
        comparisons=(Comparison("c", "C1", "m", "a", "b", False, 0.02, "2% of perplexity", bounds=(0.0, 1.0)),),
    )
    return Chapter(**{**base, **kw})


def _cells(*sources: str) -> list[dict]:
    return [{"cell_type": "markdown", "source": s} for s in sources]


CARD = "# Toy paper\n\nThe paper's headline: 65.97 at 8 GPUs.\n\n## Claims\n\n1. **C1** 3.97x faster.\n"
METHOD = "## The method\n\nA worked example gives 0.405 and 112704.\n\n## Ambiguities\n\n| 1 | 0.2 |\n"


def _findings(results: str, parameters=(), quotes=()):
    lines = markdown_lines(_cells(CARD, METHOD, results))
    findings, unused = typed_numbers(lines, declared_numbers(_chapter(), lines, parameters), quotes)
    return [f.number for f in findings], unused


def test_the_parts_of_a_chapter():
    lines = markdown_lines(_cells(CARD, METHOD, "## Diagnostic\n\ntext\n\n## What this shows\n\nmore"))
    parts = {line.raw: line.part for line in lines}
    assert parts["1. **C1** 3.97x faster."] == "paper"
    assert parts["A worked example gives 0.405 and 112704."] == "method" and parts["| 1 | 0.2 |"] == "method"
    assert parts["## Diagnostic"] == "results" and parts["more"] == "results"


def test_a_typed_result_is_found_and_a_glued_one_is_not():
    found, _ = _findings("## Diagnostic\n\nSST reaches 6.0512 nats where dense reaches {glue:text}`nll_dense:.4f`.")
    assert found == ["6.0512"]


def test_declared_numbers_pass():
    """Parameters (also inside strings), seeds, margins and bounds, the paper card and Claims, the catalogue's claims
    and its gaps other than ours; a percentage of a declared fraction."""
    found, _ = _findings(
        "## Diagnostic\n\nAt 64 updates in Room-15x15 over seeds 42-44, margin 0.02 (2%), bounded by 1; the paper's "
        "65.97, 3.97x and 97.4, for 150 steps; 25% of the trace.",
        parameters=[{"updates": 64, "env": "MiniHack-Room-15x15-v0", "ratio": 0.25}, [42, 43, 44]],
    )
    assert found == []
    found, _ = _findings("## Diagnostic\n\nOur drift gains 0.68 nats and the kernel 0.405.")
    assert found == ["0.68", "0.405"], "numbers of our own gaps and of the method part are not declarations"


def test_what_is_not_prose_is_not_counted():
    text = (
        "## Diagnostic\n\nBy eq. 9, Table 24, eqs. 9–10, issue 31 and Proposition 1, with $p=0.9$ and `lr = 0.37`, "
        "a 90% CI and 80% power, see [the run](https://example.org/run/2026-12-04) in Qwen3-4B, GPT-5 and nle 1.0.2."
        "\n\n$$x = 0.123$$\n\n```\n0.777\n```\n"
    )
    assert _findings(text)[0] == []
    assert prose_only("a {glue:text}`x:.3f` b") == "a " + " " * len("{glue:text}`x:.3f`") + " b"


def test_number_words_from_four_up_count():
    found, _ = _findings("## Diagnostic\n\nOne seed, two arms, three runs; five tasks and six skills; eight GPUs.")
    assert found == ["five", "six"], "8 is the paper card's"


def test_a_count_of_seeds_must_be_a_profiles():
    """ "Five tasks" passes when 5 is declared anywhere; "five seeds" states what ran, so only a profile's seed count
    (listed or run) passes."""
    lines = markdown_lines(_cells(CARD, METHOD, "## Diagnostic\n\nThree seeds, a 5-seed pilot, 84 seeds; 8 seeds."))
    declared = declared_numbers(_chapter(), lines, [{"updates": 5, "other": 84}])
    findings, _ = typed_numbers(lines, declared, seed_counts={3, 84})
    assert [f.number for f in findings] == ["5", "8"], "8 is the paper card's, yet no profile has eight seeds"
    assert typed_numbers(lines, declared)[0] == [], "without seed counts, declared values pass"


def test_a_quote_lets_its_numbers_through_and_an_unused_quote_is_reported():
    text = "## Diagnostic\n\nA pilot read 0.117 and 0.54.\n\n| pilot | 0.25 |\n| row | 0.33 |\n\nThen 0.91."
    used = Quote("toy", "read 0.117", "a pilot")
    table = Quote("toy", "| pilot |", "a table", block=True)
    stale = Quote("toy", "no such words", "stale")
    found, unused = _findings(text, quotes=[used, table, stale])
    assert found == ["0.54", "0.91"] and unused == [stale]


def test_a_statement_that_a_profile_has_not_run_is_checked_against_the_runs():
    ran = {"cpu": 84}
    check = lambda text, itself=None: not_run_claims(text, ["smoke", "cpu", "a100"], ran, {}, "kite", itself)  # noqa: E731
    assert check("The `cpu` profile has not been run.")
    assert check("The cpu profile (params/kite/cpu.yaml) has not been run yet.")
    assert check("Sized from the pilot; not run yet.", itself="cpu"), "a profile's own description speaks of itself"
    assert not check("The `a100` profile has not been run."), "a100 has no runs: true, so not a finding"
    assert not check("The `cpu` profile ran; the `a100` profile has not been run.")
    assert not check("The divergence ablation is not run.")


def test_a_statement_that_a_gpu_item_has_not_run_is_checked_against_the_receipts(tmp_path):
    folder = tmp_path / "2026-12-04-h200"
    folder.mkdir()
    items = [{"name": "bench-kite-latency", "status": "done"}, {"name": "bench-deltas-kernel", "status": "stopped"}]
    (folder / "gpu_all.json").write_text(json.dumps({"items": items}))
    (folder / "bench-actkv-kernels.log").write_text("ran by hand\n")
    receipts = gpu_receipt_items(tmp_path)
    assert receipts == {"bench-kite-latency": folder.as_posix(), "bench-actkv-kernels": folder.as_posix()}
    check = lambda text: not_run_claims(text, [], {}, receipts, "kite")  # noqa: E731
    assert check("The GPU profile is ready in `benchmarks/gpu_all.sh --only bench-kite-latency` but was not run.")
    assert check("- `bench-actkv-kernels` is ready and has not been run.")
    assert not check("The drift's cost (`bench-deltas-kernel`) has not been run.")


def test_cited_evidence_must_exist(tmp_path):
    receipts = {"bench-kite-latency": "benchmarks/receipts/2026-12-04-h200"}
    check = lambda text: missing_evidence(text, {"cpu": 84}, receipts, "kite")  # noqa: E731
    assert not check("Its runs are committed in `book/runs/kite/cpu/`; `bench-kite-latency` ran on an H200.")
    assert not check("Its log is in `benchmarks/receipts/2026-12-04-h200/`.")
    assert check("Its runs are in `book/runs/kite/a100/`.")
    assert check("Its log is in `benchmarks/receipts/2027-01-01-b200/`.")
    assert check("`bench-kite-prefill` ran once on an H200.")
    assert not check("`bench-kite-prefill` has not run.")


def test_a_glue_reference_must_name_a_recorded_value():
    """Plain names against the notebook's own glue; verdict citations against the chapter's own verdicts notebook,
    its profiles, declared comparisons and fields (kite: profiles smoke, cpu, a100; comparison sst_vs_dense_kv)."""
    verdicts = "../book/generated/verdicts/{}.ipynb::{}"
    markdown = (
        "{glue:text}`nll:.3f` and {glue}`n_items`, {glue:text}`gone:.2f`; "
        f"{{glue:text}}`{verdicts.format('kite', 'cpu_sst_vs_dense_kv_verdict:s')}`, "
        f"{{glue:text}}`{verdicts.format('kite', 'cpu_sst_vs_dense_kv_pvalue:.3f')}`, "
        f"{{glue:text}}`{verdicts.format('kite', 'gpu_sst_vs_dense_kv_verdict:s')}`, "
        f"{{glue:text}}`{verdicts.format('actkv', 'cpu_sst_vs_dense_kv_verdict:s')}`"
    )
    assert unknown_glue_references(markdown, {"nll", "n_items"}, chapter("kite")) == [
        "gone:.2f",
        verdicts.format("kite", "cpu_sst_vs_dense_kv_pvalue:.3f"),
        verdicts.format("kite", "gpu_sst_vs_dense_kv_verdict:s"),
        verdicts.format("actkv", "cpu_sst_vs_dense_kv_verdict:s"),
    ]


def test_profiles_with_runs_counts_ok_profile_seeds(tmp_path):
    def run(name, **fields):
        folder = tmp_path / "kite" / name
        folder.mkdir(parents=True)
        base = dict(chapter="kite", profile="cpu", kind="profile", seed=42, status="ok")
        (folder / "receipt.json").write_text(json.dumps({**base, **fields}))

    run("cpu/seed-42-a")
    run("cpu/seed-43-b", seed=43)
    run("cpu/seed-44-c", seed=44, status="failed")
    run("smoke/ad-hoc/seed-42-d", profile="smoke", kind="ad-hoc")
    assert profiles_with_runs("kite", tmp_path) == {"cpu": 2}


# --- the contract over every started chapter ---------------------------------------------------------------------


def _declared(chapter, lines) -> set[float]:
    profiles = [load_profile(chapter, p) for p in chapter.profiles]
    parameters = [notebook_defaults(chapter.notebook)]
    parameters += [p.get("parameters") or {} for p in profiles] + [p.get("seeds") or [] for p in profiles]
    return declared_numbers(chapter, lines, parameters)


def _seed_counts(chapter) -> set[int]:
    """How many seeds each profile lists, and how many each profile ran."""
    listed = {len(load_profile(chapter, p).get("seeds") or []) for p in chapter.profiles}
    return listed | set(profiles_with_runs(chapter.id).values())


@pytest.mark.parametrize("chapter", STARTED, ids=lambda c: c.id)
def test_results_are_glued_not_typed(chapter):
    lines = markdown_lines(nbformat.read(chapter.notebook, as_version=4).cells)
    quotes = [q for q in QUOTES if q.chapter == chapter.id]
    findings, unused = typed_numbers(lines, _declared(chapter, lines), quotes, _seed_counts(chapter))
    assert not findings, (
        f"{chapter.id}: numbers typed in the results part of notebooks/{chapter.id}.ipynb; glue each one "
        "({glue:text}`name`), cite the ledger's verdict glue, or say in words where it is read; a number that is no "
        "result goes in QUOTES with its reason:\n" + "\n".join(map(str, findings))
    )
    assert not unused, f"{chapter.id}: QUOTES that let no number through (stale exceptions): {unused}"


@pytest.mark.parametrize("chapter", STARTED, ids=lambda c: c.id)
def test_every_glue_reference_names_a_recorded_value(chapter):
    """A reference to a value the notebook no longer records (renamed, dropped) would print nothing in the book."""
    nb = nbformat.read(chapter.notebook, as_version=4)
    markdown = "\n\n".join(c.source for c in nb.cells if c.cell_type == "markdown")
    unknown = unknown_glue_references(markdown, glued_names(chapter.notebook), chapter)
    assert not unknown, f"{chapter.id}: glue references to values nothing records: {unknown}"


def test_every_quote_names_a_started_chapter():
    assert {q.chapter for q in QUOTES} <= {c.id for c in STARTED}


@pytest.fixture(scope="module")
def gpu_items():
    return gpu_receipt_items()


@pytest.mark.parametrize("chapter", STARTED, ids=lambda c: c.id)
def test_no_prose_says_a_run_is_missing_that_exists(chapter, gpu_items):
    """The notebook's markdown, each profile file (its description and comments speak of that profile unless they
    name another) and the catalogue's gaps: nothing said not to have run has runs or receipts, and every run folder,
    receipt folder or GPU item cited as having run exists."""
    ran = profiles_with_runs(chapter.id)
    nb = nbformat.read(chapter.notebook, as_version=4)
    texts = [("notebook", "\n\n".join(c.source for c in nb.cells if c.cell_type == "markdown"), None)]
    texts += [(f"params/{chapter.id}/{p}.yaml", chapter.profile_path(p).read_text(), p) for p in chapter.profiles]
    texts += [("catalogue gap", gap, None) for gap in chapter.gaps]
    problems = [
        f"{where}: {problem}"
        for where, text, itself in texts
        for problem in not_run_claims(text, chapter.profiles, ran, gpu_items, chapter.id, itself)
        + missing_evidence(text, ran, gpu_items, chapter.id)
    ]
    assert not problems, f"{chapter.id}: prose contradicts the runs and receipts:\n" + "\n".join(problems)


def test_the_committed_gpu_receipts_are_found(gpu_items):
    """The first GPU run (one H200, 2026-12-04) left receipts for the ActKV kernels and the KITE latency benchmark."""
    assert {"bench-actkv-kernels", "bench-kite-latency"} <= set(gpu_items)
