"""The project's small tool-use causal LM (Qwen3 architecture with grouped-query attention).

Trained by ``python -m agentpost.models.train_tool_lm`` (WikiText-2 pretraining, then fine-tuning on the
synthetic-format tool traces of :mod:`agentpost.data.tool_traces`); the checkpoint, its config, the shared
tokenizer's files and ``receipt.json`` live in :data:`DEFAULT_DIR` and load with ``from_pretrained``.
"""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

DEFAULT_DIR = Path(__file__).parent / "assets" / "tool-lm"
TRAIN_COMMAND = "python -m agentpost.models.train_tool_lm"

#: Architecture of the committed checkpoint: ~3.8 M parameters, 15 MB in fp32 with tied embeddings.
_DEFAULTS = dict(
    vocab_size=4096,
    hidden_size=256,
    intermediate_size=688,
    num_hidden_layers=4,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=4096,
    rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
    tie_word_embeddings=True,
    rms_norm_eps=1e-6,
    initializer_range=0.02,
)


def _special_ids() -> dict:
    from agentpost.models.tokenizer import SPECIAL_TOKENS

    return {"pad_token_id": SPECIAL_TOKENS.index("<pad>"), "eos_token_id": SPECIAL_TOKENS.index("<eos>")}


def tool_lm_config(**overrides) -> transformers.Qwen3Config:
    """Qwen3 config of the tool LM; GQA (fewer KV heads than query heads) is required."""
    kwargs = {**_DEFAULTS, **_special_ids(), **overrides}
    heads, kv = kwargs["num_attention_heads"], kwargs["num_key_value_heads"]
    if not (0 < kv < heads and heads % kv == 0):
        raise ValueError(
            f"need grouped-query attention: 0 < num_key_value_heads < num_attention_heads and dividing it; "
            f"got {kv} KV heads for {heads} query heads"
        )
    return transformers.Qwen3Config(**kwargs)


def tiny_random_lm(seed: int = 0, *, attn_implementation: str = "eager", **overrides) -> transformers.Qwen3ForCausalLM:
    """Same architecture, tiny and randomly initialised (for fast tests): 2 layers, hidden 64, 4 heads, 2 KV heads."""
    small = dict(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
    )
    config = tool_lm_config(**{**small, **overrides})
    config._attn_implementation = attn_implementation
    torch.manual_seed(seed)
    return transformers.Qwen3ForCausalLM(config).eval()


def load_tool_lm(
    path: str | Path = DEFAULT_DIR, *, attn_implementation: str = "eager", dtype: torch.dtype = torch.float32
):
    """(model, tokenizer) from a saved checkpoint folder, model in eval mode.

    ``eager`` attention is the default so that attention probabilities are available (ActKV scores them)."""
    path = Path(path)
    if not (path / "config.json").is_file() or not any(path.glob("*.safetensors")):
        raise FileNotFoundError(
            f"no tool-LM checkpoint (config.json + *.safetensors) at {path}; train it with `{TRAIN_COMMAND}`"
        )
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast

    model = AutoModelForCausalLM.from_pretrained(str(path), attn_implementation=attn_implementation, dtype=dtype)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(str(path))
    return model.eval(), tokenizer
