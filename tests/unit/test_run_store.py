"""A run folder's compact form: code hashes that ignore prose, outcomes in a columnar file read back bit for bit,
figures kept as their hash, notebooks gzipped deterministically (agentpost.record.hashing, .run_store)."""

import copy
import json
import math

import pytest

from agentpost.evidence import run_store
from agentpost.record.hashing import code_hash, notebook_code_hash, sha256_bytes, sha256_json
from agentpost.record.outcomes import outcomes_payload
from agentpost.record.recording import SCRAP_MIME
from agentpost.evidence.receipt import changed_code, code_root

CODE = '''"""Module docstring."""
import math


def f(x):
    """Return x + 1."""
    return x + 1  # one more
'''


def test_code_hash_ignores_docstrings_comments_and_layout_but_not_code():
    same = [
        "import math\n\ndef f(x):\n    return (x + 1)\n",
        '"""Other words."""\nimport math\n\n\n\ndef f(x):\n    """Another docstring."""\n    # a comment\n    return x+1\n',
    ]
    assert all(code_hash(s) == code_hash(CODE) for s in same)
    changed = [
        CODE.replace("x + 1", "x + 2"),
        CODE.replace("import math", "import cmath"),
        CODE.replace('    """Return x + 1."""\n', '    """Return x + 1."""\n    x = float(x)\n'),
    ]
    assert len({code_hash(s) for s in changed} | {code_hash(CODE)}) == 4
    assert code_hash("%time x = 1\n") != code_hash("%time x = 2\n")  # IPython magics: by their text


def _cell(kind, source, tags=()):
    cell = {"cell_type": kind, "source": source, "metadata": {"tags": list(tags)}}
    if kind == "code":
        cell["outputs"] = []
    return cell


def test_notebook_code_hash_reads_code_cells_and_tags_not_prose_outputs_or_papermill_cells():
    nb = {"cells": [_cell("markdown", "# Title"), _cell("code", "n = 3", ["parameters"]), _cell("code", "y = n * 2")]}
    prose = copy.deepcopy(nb)
    prose["cells"][0]["source"] = "# Another title, other words"
    prose["cells"][2]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "6"}]
    executed = copy.deepcopy(nb)
    executed["cells"].insert(2, _cell("code", "n = 5", ["injected-parameters"]))
    assert notebook_code_hash(nb) == notebook_code_hash(prose) == notebook_code_hash(executed)
    moved = copy.deepcopy(nb)
    moved["cells"][1]["metadata"]["tags"] = []
    edited = copy.deepcopy(nb)
    edited["cells"][2]["source"] = "y = n * 3"
    assert len({notebook_code_hash(x) for x in (nb, moved, edited)}) == 3


def test_a_docstring_edit_stales_nothing_and_a_code_edit_stales_that_file(tmp_path, monkeypatch):
    (tmp_path / "agentpost").mkdir()
    path = tmp_path / "agentpost" / "m.py"
    path.write_text(CODE)
    monkeypatch.setattr("agentpost.evidence.receipt.code_root", lambda: tmp_path)
    imported = {"agentpost/m.py": code_hash(CODE)}
    path.write_text(CODE.replace("Return x + 1.", "Add one.").replace("# one more", ""))
    assert changed_code(imported) == []
    path.write_text(CODE.replace("x + 1", "x - 1"))
    assert changed_code(imported) == ["agentpost/m.py"]


def test_only_the_graft_runs_import_the_graft_training_code():
    """An edit to agentpost/graft/train.py can stale only GRAFT's runs: no other chapter's run imported it."""
    from agentpost.evidence.receipt import run_dirs, runs_root

    importers = set()
    for folder in run_dirs(runs_root()):
        receipt = json.loads((folder / "receipt.json").read_text())
        if "agentpost/graft/train.py" in receipt.get("imported_code", {}):
            importers.add(receipt["chapter"])
    assert importers == {"graft"}
    assert (code_root() / "agentpost" / "graft" / "train.py").is_file()


def _run(values_a, values_b, items):
    facts = {
        arm: {"checkpoint": "c0", "data_version": "d0", "updates": 3, "max_new_tokens": None} for arm in ("a", "b")
    }
    payload = outcomes_payload("nll", {"a": values_a, "b": values_b}, items=items, facts=facts)
    scrap = {"name": "outcomes_nll", "data": payload, "encoder": "json", "version": 1}
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "source": "",
                "metadata": {},
                "outputs": [
                    {
                        "output_type": "display_data",
                        "metadata": {"scrapbook": {"name": "outcomes_nll", "data": True}},
                        "data": {SCRAP_MIME: scrap, "text/plain": "summary"},
                    },
                    {
                        "output_type": "display_data",
                        "metadata": {},
                        "data": {"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"},
                    },
                ],
            }
        ]
    }
    return nb, {"outcomes_nll": payload, "loss": 0.5}


def test_outcomes_leave_the_notebook_and_the_receipt_and_read_back_bit_for_bit():
    awkward = [0.1 + 0.2, -0.0, 1e-300, 5e-324, 1.7976931348623157e308, math.pi, 1 / 3]
    nb, metrics = _run(awkward, [x / 2 for x in awkward], [f"item-{i}" for i in range(len(awkward))])
    stored_nb, stored, data = run_store.compact(nb, metrics)
    assert run_store.is_reference(stored["outcomes_nll"]) and stored["loss"] == 0.5
    assert stored["outcomes_nll"]["n_items"] == 7 and stored["outcomes_nll"]["arms"] == ["a", "b"]
    assert "item-0" not in json.dumps(stored_nb) and "item-0" not in json.dumps(stored)
    figure = stored_nb["cells"][0]["outputs"][1]
    assert "image/png" not in figure["data"] and figure["metadata"]["agentpost"][run_store.FIGURE_KEY] == sha256_bytes(
        b"iVBORw0KGgo="
    )
    back_nb, back = run_store.inflate(stored_nb, stored, data)
    assert sha256_json(back) == sha256_json(metrics)  # canonical JSON: every float to its last bit, -0.0 kept
    assert [math.copysign(1, x) for x in back["outcomes_nll"]["arms"]["a"]] == [math.copysign(1, x) for x in awkward]
    assert back_nb["cells"][0]["outputs"][0]["data"][SCRAP_MIME]["data"] == metrics["outcomes_nll"]
    assert run_store.compact(nb, metrics)[2] == data  # the same outcomes give the same file


def test_a_missing_or_partial_outcomes_file_is_an_error_not_a_silent_gap():
    nb, metrics = _run([1.0], [2.0], ["x"])
    stored_nb, stored, _ = run_store.compact(nb, metrics)
    with pytest.raises(FileNotFoundError):
        run_store.inflate(stored_nb, stored, None)
    _, _, other = run_store.compact(*_renamed(nb, metrics))
    with pytest.raises(KeyError, match="outcomes_nll"):
        run_store.inflate(stored_nb, stored, other)


def _renamed(nb, metrics):
    return nb, {"outcomes_other": metrics["outcomes_nll"]}


def test_the_stored_notebook_is_gzip_without_a_timestamp():
    text = json.dumps({"cells": []})
    assert run_store.stored_notebook_bytes(text) == run_store.stored_notebook_bytes(text)
    assert run_store.stored_notebook_bytes(text)[:2] == b"\x1f\x8b"
