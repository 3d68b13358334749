"""Loader of the GPU profile's policy model (a Qwen2.5/Qwen3 instruct model from the Hugging Face hub).

The smoke profile never calls it. Where the weights cannot be reached (no network, ``HF_HUB_OFFLINE=1`` without a
local copy, a wrong name) it raises :class:`HubModelUnavailable` saying what to do, instead of a long hub traceback.
"""

from __future__ import annotations

import os


class HubModelUnavailable(RuntimeError):
    """The requested hub model's weights are not reachable from this machine."""


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def load_policy_model(name: str, *, dtype: str = "auto", device_map: str | None = None):
    """(tokenizer, causal LM) for hub id ``name``; offline mode only looks in the local cache."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError("load_policy_model needs a hub model id such as 'Qwen/Qwen2.5-0.5B-Instruct'")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    offline = _offline()
    try:
        tok = AutoTokenizer.from_pretrained(name, local_files_only=offline)
        model = AutoModelForCausalLM.from_pretrained(name, dtype=dtype, device_map=device_map,
                                                     local_files_only=offline)
    except (OSError, ValueError) as err:
        where = "HF_HUB_OFFLINE is set and the local hub cache has no copy" if offline else \
            "the hub could not be reached or has no such repository"
        raise HubModelUnavailable(
            f"cannot load policy model {name!r}: {where}. The a100 profile needs its weights: run once with network "
            f"access (or `huggingface-cli download {name}`), or set the profile's `hub_model` to a local folder. "
            f"Underlying error: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
        ) from err
    return tok, model
