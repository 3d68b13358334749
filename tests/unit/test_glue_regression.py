"""The nbval glue-regression rule: tolerance from the measured kernel-path spread, strings from the measured set."""

import json

from agentpost.evidence.recording import SCRAP_MIME
from tests.notebooks import glue_regression as gr


def _scrap(name, data):
    return {"output_type": "display_data", "data": {SCRAP_MIME: {"name": name, "data": data, "encoder": "json",
                                                                 "version": 1}, "text/plain": str(data)}}


def test_flatten_names_nested_values_like_the_spread_benchmark():
    assert gr.flatten({"a": {"b": 1.0, "c": [2, "x"]}}) == {"a.b": 1.0, "a.c[0]": 2, "a.c[1]": "x"}


def test_glued_reads_scraps_from_outputs_including_json_strings():
    outs = [_scrap("nll", {"sst": 6.1}), {"output_type": "stream", "text": "hi"},
            {"output_type": "display_data", "data": {SCRAP_MIME: json.dumps({"name": "n", "data": 3})}}]
    assert gr.glued(outs) == {"nll.sst": 6.1, "n": 3}


def test_number_within_three_times_measured_spread_passes(monkeypatch):
    spread = {"test_nll.sst": {"spread": 0.02, "values": {"native": 6.10, "avx2": 6.12}}}
    monkeypatch.setattr(gr, "measured_spread", lambda chapter: spread)
    # tolerance = 3 x 0.02 = 0.06
    assert gr.check_value("kite", "test_nll.sst", 6.10, 6.159) is None
    msg = gr.check_value("kite", "test_nll.sst", 6.10, 6.161)
    assert msg and "tolerance 0.06" in msg and "kernel-path spread 0.02" in msg


def test_unmeasured_number_must_match_to_relative_precision(monkeypatch):
    monkeypatch.setattr(gr, "measured_spread", lambda chapter: {})
    assert gr.check_value("x", "count", 1000.0, 1000.0005) is None      # |diff| 5e-4 <= 1e-6 * 1000 = 1e-3
    assert "no measured spread" in gr.check_value("x", "count", 1000.0, 1000.002)
    assert gr.check_value("x", "zero", 0.0, 5e-7) is None                # ATOL 1e-6
    assert gr.check_value("x", "zero", 0.0, 2e-6) is not None


def test_strings_match_committed_or_a_value_seen_on_a_kernel_path(monkeypatch):
    spread = {"verdict": {"same": False, "values": {"native": "better", "avx2": "underpowered"}}}
    monkeypatch.setattr(gr, "measured_spread", lambda chapter: spread)
    assert gr.check_value("c", "verdict", "better", "better") is None
    assert gr.check_value("c", "verdict", "better", "underpowered") is None
    assert "worse" in gr.check_value("c", "verdict", "better", "worse")


def test_timings_and_machine_facts_are_not_compared(monkeypatch):
    monkeypatch.setattr(gr, "measured_spread", lambda chapter: {})
    assert gr.check_value("kite", "decode_ms_per_token", 1.0, 100.0) is None
    assert gr.check_value("kite", "prefill_time_ratio_sst_vs_dense_flops_longest", 0.5, 0.9) is None
    assert gr.check_value("kite", "run_environment.device.name", "AMD EPYC", "Intel Xeon") is None
    assert gr.check_value("kite", "test_nll_sst_nats", 6.0, 6.5) is not None
