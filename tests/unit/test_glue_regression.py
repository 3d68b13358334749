"""The nbval glue-regression rule: tolerance from the measured kernel-path spread, strings from the measured set."""

import json
from types import SimpleNamespace

from agentpost.record.recording import SCRAP_MIME, format_value, value_html
from agentpost.evidence import spread as gr
from tests.notebooks import glue_regression


def _scrap(name, data):
    return {
        "output_type": "display_data",
        "data": {SCRAP_MIME: {"name": name, "data": data, "encoder": "json", "version": 1}, "text/plain": str(data)},
    }


def test_flatten_names_nested_values_like_the_spread_benchmark():
    assert gr.flatten({"a": {"b": 1.0, "c": [2, "x"]}}) == {"a.b": 1.0, "a.c[0]": 2, "a.c[1]": "x"}


def test_glued_reads_scraps_from_outputs_including_json_strings():
    outs = [
        _scrap("nll", {"sst": 6.1}),
        {"output_type": "stream", "text": "hi"},
        {"output_type": "display_data", "data": {SCRAP_MIME: json.dumps({"name": "n", "data": 3})}},
    ]
    assert gr.glued_with_kind(outs) == {"nll.sst": (6.1, "result"), "n": (3, "result")}


def test_number_within_three_times_measured_spread_passes(monkeypatch):
    spread = {"test_nll.sst": {"spread": 0.02}}
    monkeypatch.setattr(gr, "measured_spread", lambda chapter: spread)
    # tolerance = 3 x 0.02 = 0.06
    assert gr.check_value("kite", "test_nll.sst", 6.10, 6.159) is None
    msg = gr.check_value("kite", "test_nll.sst", 6.10, 6.161)
    assert msg and "tolerance 0.06" in msg and "kernel-path spread 0.02" in msg


def test_unmeasured_number_must_match_to_relative_precision(monkeypatch):
    monkeypatch.setattr(gr, "measured_spread", lambda chapter: {})
    assert gr.check_value("x", "count", 1000.0, 1000.0005) is None  # |diff| 5e-4 <= 1e-6 * 1000 = 1e-3
    assert "no measured spread" in gr.check_value("x", "count", 1000.0, 1000.002)
    assert gr.check_value("x", "zero", 0.0, 5e-7) is None  # ATOL 1e-6
    assert gr.check_value("x", "zero", 0.0, 2e-6) is not None


def test_strings_match_committed_or_a_value_seen_on_a_kernel_path(monkeypatch):
    spread = {"verdict": {"values": ["better", "underpowered"]}}
    monkeypatch.setattr(gr, "measured_spread", lambda chapter: spread)
    assert gr.check_value("c", "verdict", "better", "better") is None
    assert gr.check_value("c", "verdict", "better", "underpowered") is None
    assert "worse" in gr.check_value("c", "verdict", "better", "worse")


def test_the_items_of_a_list_share_the_spread_of_their_pattern(monkeypatch):
    monkeypatch.setattr(gr, "measured_spread", lambda chapter: {"outcomes_nll.arms.sst[*]": {"spread": 0.1}})
    assert gr.pattern("outcomes_nll.arms.sst[12]") == "outcomes_nll.arms.sst[*]"
    assert gr.check_value("kite", "outcomes_nll.arms.sst[12]", 5.0, 5.29) is None
    assert "0.3" in gr.check_value("kite", "outcomes_nll.arms.sst[12]", 5.0, 5.31)


def _kinded(name, data, kind):
    """An output as glue(name, data, kind=kind) shows it."""
    out = _scrap(name, data)
    out["data"]["text/plain"] = format_value(data)
    out["data"]["text/html"] = value_html(name, format_value(data))
    return {**out, "metadata": {"scrapbook": {"name": name}, "agentpost": {"kind": kind}}}


def test_the_declared_kind_decides_what_is_compared_not_the_name(monkeypatch):
    monkeypatch.setattr(gr, "measured_spread", lambda chapter: {"prop1_mse_graft": {"spread": 0.1}})
    assert gr.check_value("kite", "decode_ms_per_token", 1.0, 100.0, "timing") is None
    assert gr.check_value("kite", "run_environment.device.name", "AMD EPYC", "Intel Xeon", "machine") is None
    assert gr.check_value("graft", "prop1_mse_graft", 0.5, 0.55) is None  # within 3 x measured spread
    assert "prop1_mse_graft" in gr.check_value("graft", "prop1_mse_graft", 0.5, 0.9)  # _mse is not a timing
    assert "no measured spread" in gr.check_value("graft", "prop1_mse_graft", 0.5, 0.55, "deterministic")
    outs = [_kinded("wall_s", 3.0, "timing"), _scrap("legacy", 1)]
    assert gr.glued_with_kind(outs) == {"wall_s": (3.0, "timing"), "legacy": (1, "result")}


def test_cell_check_reads_kinds_from_the_executed_outputs():
    committed = [_scrap("notebook_wall_s", 10.0), _scrap("loss", 0.5)]  # glued before kinds were declared
    executed = [
        _kinded("notebook_wall_s", 99.0, "timing"),
        _kinded("loss", 0.5, "result"),
        _kinded("run_environment", {"device": {"kind": "cpu"}}, "machine"),
    ]
    assert glue_regression.cell_problems("c", committed, executed) == []
    executed.append(_kinded("new_metric", 1.0, "result"))
    assert glue_regression.cell_problems("c", committed, executed) == [
        "new_metric: recorded by this run, not in the committed notebook (refresh it)"
    ]
    assert glue_regression.cell_problems("c", committed, executed[:1]) == [
        "loss: recorded in the committed notebook, not by this run"
    ]
    assert glue_regression.cell_problems("c", [_scrap("facts", {"a": [1, 2], "b": 3})], []) == [
        "facts: recorded in the committed notebook, not by this run"
    ]  # one line per glued value, not per leaf


def test_notebook_checks_run_on_the_executed_outputs():
    import nbformat

    from agentpost.evidence.validate import notebook_problems

    params = nbformat.v4.new_code_cell("seed = 42", metadata={"tags": ["parameters"]})
    setup = nbformat.v4.new_code_cell("show_device()")
    body = nbformat.v4.new_code_cell('glue("loss", 0.5)')
    committed = nbformat.v4.new_notebook(cells=[params, nbformat.v4.new_markdown_cell("text"), setup, body])
    cell = lambda num, outputs, skip=False: SimpleNamespace(
        cell_num=num,
        test_outputs=outputs,  # noqa: E731
        options={"skip": skip},
    )
    machine = _kinded("run_environment", {"device": {"kind": "cpu"}}, "machine")
    loss = _kinded("loss", 0.5, "result")
    nb = glue_regression.executed_notebook(committed, [cell(0, []), cell(1, [machine]), cell(2, [loss])])
    assert not committed.cells[2].outputs and nb.cells[2].outputs == [machine]
    assert notebook_problems(nb) == []
    no_device = glue_regression.executed_notebook(committed, [cell(0, []), cell(1, []), cell(2, [loss])])
    assert [p.field for p in notebook_problems(no_device)] == ["device"]
    assert glue_regression.executed_notebook(committed, [cell(0, []), cell(2, [loss])]) is None  # a cell did not run
