"""glue records a value that scrapbook, the receipts and myst-nb all read; the mime plugin silences only scraps."""

import json
from types import SimpleNamespace

import nbformat
import numpy as np
import pandas as pd
import pytest
import scrapbook

from agentpost.evidence import recording as g
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


def test_mime_plugin_swallows_only_scrap_payloads():
    assert ScrapMimeRenderer.handle_mime(None, SimpleNamespace(mime_type=g.SCRAP_MIME), False) == []
    assert ScrapMimeRenderer.handle_mime(None, SimpleNamespace(mime_type="text/plain"), False) is None
    assert ScrapMimeRenderer.handle_mime(None, SimpleNamespace(mime_type="application/json"), False) is None
