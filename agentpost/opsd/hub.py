"""The a100-hub profile's weight check: Qwen3 weights from the Hugging Face hub, verified before any work.

Where the weights cannot be reached (``HF_HUB_OFFLINE=1`` without a local copy, no network, a wrong name)
:func:`require_hub_model` raises :class:`HubModelUnavailable` saying what to do, instead of a hub traceback.
"""

from __future__ import annotations

import os
from pathlib import Path


class HubModelUnavailable(RuntimeError):
    """The requested hub model's weights are not reachable from this machine."""


def require_hub_model(name: str) -> Path:
    """Local folder holding ``name``'s config and safetensors weights (downloaded unless offline)."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError("require_hub_model needs a hub model id such as 'Qwen/Qwen3-0.6B'")
    if Path(name).is_dir():
        path = Path(name)
    else:
        from huggingface_hub import snapshot_download

        offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")
        try:
            path = Path(snapshot_download(name, local_files_only=offline,
                                          allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model"]))
        except Exception as err:  # the hub raises several unrelated types for "not reachable"
            where = "HF_HUB_OFFLINE is set and the local hub cache has no copy" if offline else \
                "the hub could not be reached or has no such repository"
            raise HubModelUnavailable(
                f"cannot use hub model {name!r}: {where}. The a100-hub profile needs its weights: run once with "
                f"network access (`huggingface-cli download {name}`), or set `hub_model` to a local folder; the "
                f"offline profiles (smoke, a100) use the project's own model. ({type(err).__name__})") from err
    if not (path / "config.json").is_file() or not any(path.glob("*.safetensors")):
        raise HubModelUnavailable(f"hub model {name!r} at {path} has no config.json + *.safetensors weights")
    return path
