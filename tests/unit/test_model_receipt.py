"""The one receipt of a model the project trains (agentpost.models.receipt): its head, hashed by hand."""

from __future__ import annotations

import json
from types import SimpleNamespace

from agentpost.models.receipt import ARCHITECTURE_KEYS, weights_entry, write_model_receipt

ABC_SHA256 = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"  # sha256(b"abc"), FIPS 180-2


def test_head_then_facts_written_beside_the_weights(tmp_path):
    (tmp_path / "train.txt").write_bytes(b"abc")
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"abc")
    config = SimpleNamespace(**{k: i for i, k in enumerate(ARCHITECTURE_KEYS)}, unrelated=1)
    receipt = write_model_receipt(
        tmp_path,
        artifact="a tiny LM",
        script="agentpost/models/x.py",
        command="python -m agentpost.models.x",
        data={"tiny/train.txt": tmp_path / "train.txt"},
        config=config,
        checkpoint=weights_entry(weights),
        parameters=3,
    )
    assert json.loads((tmp_path / "receipt.json").read_text()) == receipt
    assert list(receipt)[:5] == ["artifact", "script", "command", "data", "architecture"]
    assert receipt["data"] == {"tiny/train.txt": ABC_SHA256}
    assert receipt["architecture"] == {k: i for i, k in enumerate(ARCHITECTURE_KEYS)}  # only the listed fields
    assert receipt["checkpoint"] == {"file": "model.safetensors", "bytes": 3, "sha256": ABC_SHA256}
    assert receipt["parameters"] == 3
    assert {"python", "torch", "transformers", "tokenizers", "numpy"} <= set(receipt["versions"])
