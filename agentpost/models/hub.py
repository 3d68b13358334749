"""Hub weights for the ``a100-hub`` profiles (Qwen2.5 / Qwen3 instruct models from the Hugging Face hub).

No smoke or offline ``a100`` profile calls this module (LoRA wrapping, :func:`with_lora`, lives here too). Where the weights cannot be reached (no network,
``HF_HUB_OFFLINE=1`` without a local copy, a wrong name) every function raises :class:`HubModelUnavailable` saying
what to do, before any work starts, instead of a long hub traceback. A local folder with ``config.json`` and
safetensors weights is accepted wherever a hub id is.
"""

from __future__ import annotations

from pathlib import Path

from agentpost.project import hub_offline


class HubModelUnavailable(RuntimeError):
    """The requested hub model's weights are not reachable from this machine."""


def _check_name(name) -> str:
    if not isinstance(name, str) or not name.strip():
        raise ValueError("a hub model id such as 'Qwen/Qwen3-0.6B' (or a local folder) is needed")
    return name


def _unavailable(name: str, err: Exception) -> HubModelUnavailable:
    where = (
        "HF_HUB_OFFLINE is set and the local hub cache has no copy"
        if hub_offline()
        else "the hub could not be reached or has no such repository"
    )
    detail = str(err).splitlines()[0] if str(err) else ""
    return HubModelUnavailable(
        f"cannot load hub model {name!r}: {where}. An a100-hub profile needs its weights: run once with network "
        f"access (`huggingface-cli download {name}`), or set the profile's `hub_model` to a local folder; the "
        f"offline profiles (smoke, a100) use the project's own models. ({type(err).__name__}: {detail})"
    )


def require_hub_model(name: str) -> Path:
    """Local folder holding ``name``'s config and safetensors weights (downloaded unless offline)."""
    _check_name(name)
    if Path(name).is_dir():
        path = Path(name)
    else:
        from huggingface_hub import snapshot_download

        try:
            path = Path(
                snapshot_download(
                    name, local_files_only=hub_offline(), allow_patterns=["*.json", "*.safetensors", "*.txt", "*.model"]
                )
            )
        except Exception as err:  # the hub raises several unrelated types for "not reachable"
            raise _unavailable(name, err) from err
    if not (path / "config.json").is_file() or not any(path.glob("*.safetensors")):
        raise HubModelUnavailable(f"hub model {name!r} at {path} has no config.json + *.safetensors weights")
    return path


def load_hub_model(name: str, *, dtype="auto", device_map: str | None = None, attn_implementation: str | None = None):
    """(tokenizer, causal LM) for hub id or local folder ``name``; offline mode only looks in the local cache.
    ``dtype``: a torch dtype or its name; ``attn_implementation``: e.g. ``"eager"`` where attention weights are read."""
    _check_name(name)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    local_only = hub_offline()
    extra = {"attn_implementation": attn_implementation} if attn_implementation else {}
    try:
        tok = AutoTokenizer.from_pretrained(name, local_files_only=local_only)
        model = AutoModelForCausalLM.from_pretrained(
            name, dtype=dtype, device_map=device_map, local_files_only=local_only, **extra
        )
    except (OSError, ValueError) as err:
        raise _unavailable(name, err) from err
    return tok, model


#: Linear layers of a Qwen2/Qwen3 decoder block that receive LoRA adapters.
LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def with_lora(model, *, rank: int, alpha: float, targets=LORA_TARGETS):
    """``model`` wrapped by ``peft`` with LoRA adapters (dropout 0, so a forward pass is deterministic) on
    ``targets``; only the adapter tensors require gradients, and at creation B = 0, so the wrapped model computes
    exactly what the base model does."""
    if not (isinstance(rank, int) and rank >= 1) or alpha <= 0:
        raise ValueError(f"LoRA needs an integer rank >= 1 and alpha > 0, got rank={rank!r}, alpha={alpha!r}")
    from peft import LoraConfig, get_peft_model

    return get_peft_model(
        model,
        LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=0.0, target_modules=list(targets), task_type="CAUSAL_LM"),
    )
