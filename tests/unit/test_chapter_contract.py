"""Contracts between each started chapter's catalogue entry, committed notebook and smoke profile."""

import ast

import nbformat
import pytest
import yaml

from agentpost.catalogue import chapters
from agentpost.record.recording import SCRAP_MIME
from agentpost.catalogue.params import (
    load_profile,
    notebook_defaults,
    notebook_parameters,
    parse_seeds,
    profile_parameters,
)

STARTED = [c for c in chapters() if c.started]


def glued_names(notebook) -> set[str]:
    """Names of every value recorded in the notebook's committed outputs (glue, glue_table, glue_paired, ...)."""
    nb = nbformat.read(notebook, as_version=4)
    return {
        out["data"][SCRAP_MIME]["name"]
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if SCRAP_MIME in out.get("data", {})
    }


def test_some_chapters_are_started():
    assert {"actkv", "kite", "toolsearcher"} <= {c.id for c in STARTED}


@pytest.mark.parametrize("chapter", STARTED, ids=lambda c: c.id)
def test_every_claim_metric_is_glued_in_the_committed_notebook(chapter):
    glued = glued_names(chapter.notebook)
    missing = {f"{claim.id}: {m}" for claim in chapter.claims for m in claim.metrics if m not in glued}
    assert not missing, f"{chapter.id}: catalogue metrics not glued in notebooks/{chapter.id}.ipynb: {sorted(missing)}"


@pytest.mark.parametrize("chapter", STARTED, ids=lambda c: c.id)
def test_parameters_cell_defaults_equal_the_smoke_profile(chapter):
    defaults = notebook_defaults(chapter.notebook)
    smoke = (yaml.safe_load(chapter.profile_path("smoke").read_text()) or {}).get("parameters", {})
    assert defaults.pop("seed", None) == 42, f"{chapter.id}: the parameters cell needs seed = 42"
    differ = {
        k: (defaults.get(k, "<absent>"), smoke.get(k, "<absent>"))
        for k in set(defaults) | set(smoke)
        if k not in defaults
        or k not in smoke
        or defaults[k] != smoke[k]
        or type(defaults[k]) is bool
        and type(smoke[k]) is not bool
    }
    assert not differ, f"{chapter.id}: notebook default vs params/{chapter.id}/smoke.yaml: {differ}"


@pytest.mark.parametrize("profile", [(c, p) for c in STARTED for p in c.profiles], ids=lambda cp: f"{cp[0].id}/{cp[1]}")
def test_every_committed_profile_satisfies_its_notebooks_declared_ranges(profile):
    """smoke, a100 and a100-hub alike: names, types, (range: ...) and (choices: ...) of the parameters cell, and
    the seed list, exactly as ``agentpost run`` checks them before a run."""
    chapter, name = profile
    defaults, declared = notebook_parameters(chapter.notebook)
    profile_parameters(chapter, name, {}, defaults, declared)
    parse_seeds(None, load_profile(chapter, name).get("seeds"), f"{chapter.id}/{name}")


@pytest.mark.parametrize("chapter", STARTED, ids=lambda c: c.id)
def test_declared_ranges_admit_the_notebook_defaults(chapter):
    defaults, declared = notebook_parameters(chapter.notebook)
    outside = {k: why for k, d in declared.items() if (why := d.problem(defaults[k]))}
    assert not outside, f"{chapter.id}: notebook defaults outside their declared ranges: {outside}"


@pytest.mark.parametrize("chapter", STARTED, ids=lambda c: c.id)
def test_committed_outputs_carry_no_widget_progress_warning(chapter):
    """tqdm's "IProgress not found" notice would be published in the book; agentpost makes notebook bars plain text."""
    nb = nbformat.read(chapter.notebook, as_version=4)
    noisy = [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if "IProgress not found" in str(out.get("text", ""))
    ]
    assert not noisy, f"{chapter.id}: cells {noisy} publish tqdm's IProgress warning"


@pytest.mark.parametrize("chapter", STARTED, ids=lambda c: c.id)
def test_committed_widget_views_come_with_their_static_view(chapter):
    """The book drops widget views (``_config.yml``), so every widget view in a committed output must be a "Turn it by
    hand" display carrying its static view (``agentpost.book.walkthrough``), never e.g. a tqdm widget bar; and no
    widget state is stored (it would be embedded in the page)."""
    nb = nbformat.read(chapter.notebook, as_version=4)
    bare = [
        i
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if "application/vnd.jupyter.widget-view+json" in out.get("data", {})
        and 'class="agentpost-walkthrough"' not in str(out["data"].get("text/html", ""))
    ]
    assert not bare, f"{chapter.id}: cells {bare} publish a widget view without a static view"
    assert "widgets" not in nb.metadata, f"{chapter.id}: the committed notebook stores widget state"


@pytest.mark.parametrize("chapter", STARTED, ids=lambda c: c.id)
def test_one_seed_one_run(chapter):
    """A papermill run is one replication: no chapter trains a list of comparison seeds inside one run, and every
    declared comparison reads an outcomes metric the committed notebook records, for arms it records."""
    sources = [chapter.notebook.read_text()] + [p.read_text() for p in chapter.profile_path("x").parent.glob("*.yaml")]
    assert not any("seeds_for_comparison" in s for s in sources), chapter.id
    nb = nbformat.read(chapter.notebook, as_version=4)
    recorded = {
        out["data"][SCRAP_MIME]["name"]: out["data"][SCRAP_MIME]["data"]
        for cell in nb.cells
        if cell.cell_type == "code"
        for out in cell.get("outputs", [])
        if SCRAP_MIME in out.get("data", {})
    }
    for c in chapter.comparisons:
        data = recorded.get(f"outcomes_{c.metric}")
        assert data is not None, f"{chapter.id}/{c.id}: the notebook records no outcomes_{c.metric}"
        assert {c.a, c.b} <= set(data["arms"]), f"{chapter.id}/{c.id}: arms {c.a}, {c.b} not in {sorted(data['arms'])}"


def test_every_chapter_declares_a_headline_comparison():
    assert all(any(c.headline for c in ch.comparisons) for ch in STARTED), [
        ch.id for ch in STARTED if not any(c.headline for c in ch.comparisons)
    ]


def _body(cell) -> list:
    try:
        return ast.parse(cell.source).body
    except SyntaxError:
        return []


def _calls(cell, names: set[str]) -> bool:
    """Whether the cell calls one of ``names`` (as a bare function) anywhere."""
    return any(
        isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in names
        for statement in _body(cell)
        for n in ast.walk(statement)
    )


@pytest.mark.parametrize("chapter", STARTED, ids=lambda c: c.id)
def test_set_up_cell_records_the_device(chapter):
    """``agentpost validate`` refuses a run whose notebook did not record its device: the set-up cell (before any
    cell that records a value) calls ``show_device()`` unconditionally, once."""
    code = [c for c in nbformat.read(chapter.notebook, as_version=4).cells if c.cell_type == "code"]
    calling = [
        i
        for i, c in enumerate(code)
        if "show_device()" in [ast.unparse(s.value) for s in _body(c) if isinstance(s, ast.Expr)]
    ]
    assert len(calling) == 1, (
        f"{chapter.id}: {len(calling)} top-level show_device() calls in "
        f"notebooks/{chapter.id}.ipynb; its set-up cell needs one"
    )
    earlier = [i for i in range(calling[0]) if _calls(code[i], {"glue", "glue_table", "glue_figure", "glue_paired"})]
    assert not earlier, f"{chapter.id}: code cells {earlier} record values before the set-up cell calls show_device()"


@pytest.mark.parametrize("chapter", STARTED, ids=lambda c: c.id)
def test_recorded_outcomes_have_a_measured_kernel_path_spread(chapter):
    """nbval lets a glued number move by its measured spread between CPU kernel paths (book/spread/<id>.json); a
    per-item outcome without one is held to 1e-6 and fails on another instruction set or thread count."""
    import json

    from agentpost.project import project_root
    from agentpost.evidence.spread import glued_with_kind, pattern

    path = project_root() / "book" / "spread" / f"{chapter.id}.json"
    remedy = f"measure it: python benchmarks/kernel_path_spread.py {chapter.id}"
    assert path.is_file(), f"{chapter.id}: no kernel-path spread; {remedy}"
    measured = json.loads(path.read_text())["values"]
    nb = nbformat.read(chapter.notebook, as_version=4)
    leaves = {name for cell in nb.cells if cell.cell_type == "code" for name in glued_with_kind(cell.get("outputs"))}
    outcomes = sorted(n for n in leaves if n.startswith("outcomes_"))
    missing = [n for n in outcomes if pattern(n) not in measured]
    assert outcomes and not missing, (
        f"{chapter.id}: {len(missing)} outcome values without a spread, e.g. {missing[:3]}; {remedy}"
    )
