"""The receipt of a model the project trains itself, ``receipt.json`` beside its weights: one head in every such
receipt (what the artifact is, the script and command that made it, the sha256 of each data file it read, its
architecture, its weights' file, size and sha256, the package versions), then the trainer's own facts.

Written by :mod:`agentpost.models.train_arith_lm` and :mod:`agentpost.models.train_tool_lm`. The tokenizer, the
MaD-RL GRU and annotation LM and the DeltaS hybrid LM still write their own layout: their modules are imported by
chapter notebooks, so moving them here re-certifies those chapters (and the DeltaS notebook reads its committed
receipt's ``weights_sha256``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentpost.record.environment import package_versions
from agentpost.record.hashing import sha256_file

#: The Hugging Face config fields a receipt's ``architecture`` records.
ARCHITECTURE_KEYS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "max_position_embeddings",
    "tie_word_embeddings",
)


def weights_entry(weights: Path) -> dict[str, Any]:
    """The receipt's ``checkpoint``: the weights' file name, size in bytes and sha256."""
    return {"file": weights.name, "bytes": weights.stat().st_size, "sha256": sha256_file(weights)}


def write_model_receipt(
    out_dir: Path,
    *,
    artifact: str,
    script: str,
    command: str,
    data: dict[str, Path],
    config: Any,
    checkpoint: dict[str, Any],
    **facts: Any,
) -> dict[str, Any]:
    """Write ``out_dir/receipt.json`` (the head above, then ``facts``) and return it. ``data``: the data files read
    (name -> path, hashed here); ``config``: the model's Hugging Face config; ``checkpoint``: :func:`weights_entry`
    (or :func:`agentpost.models.trainer.save_checkpoint`'s return, the same entry)."""
    receipt = {
        "artifact": artifact,
        "script": script,
        "command": command,
        "data": {k: sha256_file(p) for k, p in sorted(data.items())},
        "architecture": {k: getattr(config, k) for k in ARCHITECTURE_KEYS},
        **facts,
        "checkpoint": checkpoint,
        "versions": package_versions(),
    }
    Path(out_dir, "receipt.json").write_text(json.dumps(receipt, indent=2) + "\n")
    return receipt
