"""glue records a value that scrapbook, the receipts and myst-nb all read; the mime plugin silences only scraps."""

import json
from types import SimpleNamespace

import nbformat
import numpy as np
import pandas as pd
import pytest
import scrapbook

from agentpost.record import recording as g
from agentpost.evidence.mime import ScrapMimeRenderer


@pytest.fixture
def captured(monkeypatch):
    outputs = []

    def fake_display(bundle, raw, metadata):
        outputs.append(nbformat.v4.new_output("display_data", data=bundle, metadata=metadata))

    monkeypatch.setattr("IPython.display.display", fake_display)
    return outputs


def test_glue_bundle_is_read_by_scrapbook(tmp_path, captured):
    g.glue("test_nll_nats", np.float64(3.14159265))
    g.glue("verdict", "better")
    g.glue_table("table", pd.DataFrame({"seed": [1, 2], "nll": [1.5, 2.5]}))
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("x", outputs=captured)])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "nb.ipynb"
    nbformat.write(nb, path)
    scraps = scrapbook.read_notebook(str(path)).scraps
    assert scraps["test_nll_nats"].data == pytest.approx(3.14159265)
    assert scraps["verdict"].data == "better"
    assert scraps["table"].data == [{"seed": 1, "nll": 1.5}, {"seed": 2, "nll": 2.5}]
    assert g.read_scraps(json.loads(path.read_text()))["test_nll_nats"] == pytest.approx(3.14159265)
    first = captured[0]
    assert first["data"]["text/plain"] == "3.142"
    assert first["data"]["text/html"] == '<code class="agentpost-glue">test_nll_nats</code> = 3.142'
    assert first["metadata"]["scrapbook"] == {"name": "test_nll_nats", "data": True, "display": True, "mime_prefix": ""}


def test_glue_refuses_bad_names_and_values(captured):
    with pytest.raises(ValueError, match="identifier"):
        g.glue("not a name", 1)
    with pytest.raises(TypeError, match="cannot record"):
        g.glue("obj", object())


def test_glue_records_its_kind_beside_the_scrap_not_in_it(captured):
    g.glue("train_wall_s", 12.5, kind="timing")
    g.glue("loss", 0.5)
    g.glue_table("rows", pd.DataFrame({"a": [1]}), kind="deterministic")
    assert [g.glue_kind(out) for out in captured] == ["timing", "result", "deterministic"]
    assert captured[0]["data"][g.SCRAP_MIME] == {"name": "train_wall_s", "data": 12.5, "encoder": "json", "version": 1}
    assert captured[0]["metadata"]["scrapbook"]["name"] == "train_wall_s"  # scrapbook's own metadata unchanged
    assert g.glue_kind({"metadata": {"scrapbook": {}}}) == "result"  # glued before kinds were declared
    with pytest.raises(ValueError, match="kind must be one of result, deterministic, timing, machine, got 'wall'"):
        g.glue("x", 1, kind="wall")
    with pytest.raises(ValueError, match="kind must be one of"):
        g.glue_table("t", pd.DataFrame({"a": [1]}), kind="fast")


def test_table_check_reads_the_column_order_recorded_at_glue_time(captured):
    """Column names with spaces, pipes and unicode: the order comes from the glue-time metadata, not the text."""
    frame = pd.DataFrame(
        {
            "z after step 1": [0.5, 0.25],
            "a | b": [1, 2],
            "Δ loss (nats)": [-0.1, float("nan")],
            "arm": ["grpo", "graft"],
        }
    )  # NaN: stored as "nan", shown as NaN
    g.glue_table("gate_examples", frame)
    out = captured[0]
    assert out["metadata"]["agentpost"]["columns"] == list(frame.columns)
    # The notebook's JSON stores every row's keys sorted: the check must not depend on the data's key order.
    stored = json.loads(json.dumps(out, sort_keys=True))
    assert list(stored["data"][g.SCRAP_MIME]["data"][0]) == sorted(frame.columns)
    assert g.rendering_problem(stored["data"], stored["metadata"]) is None
    # A table glued before the columns were recorded: the order of its HTML header cells (unescaped), less a
    # header cell that is no column (pandas shows the columns' name as one).
    assert g.rendering_problem(stored["data"], {}) is None
    frame.columns.name = "policy"
    g.glue_table("named_columns", frame)
    assert "<th>policy</th>" in captured[1]["data"]["text/html"]
    assert g.rendering_problem(captured[1]["data"], {}) is None
    tampered = dict(stored["data"], **{"text/plain": stored["data"]["text/plain"].replace("0.25", "0.75")})
    assert g.rendering_problem(tampered, stored["metadata"]) == "the table shown differs from its data"
    wrong = {"agentpost": {"columns": ["arm", "a | b", "z after step 1"]}}
    assert "recorded columns" in g.rendering_problem(stored["data"], wrong)


def test_mime_plugin_swallows_only_scrap_payloads():
    assert ScrapMimeRenderer.handle_mime(None, SimpleNamespace(mime_type=g.SCRAP_MIME), False) == []
    assert ScrapMimeRenderer.handle_mime(None, SimpleNamespace(mime_type="text/plain"), False) is None
    assert ScrapMimeRenderer.handle_mime(None, SimpleNamespace(mime_type="application/json"), False) is None
