"""A small hybrid LM: gated-DeltaNet layers interleaved with full-attention layers (the layout of Qwen3.5 / Qwen3-Next,
whose full-attention KV is what DeltaS evicts), as a Hugging Face ``PreTrainedModel``.

Layers follow transformers' ``models/qwen3_next/modeling_qwen3_next.py`` in semantics, scaled down:

* ``Qwen3NextGatedDeltaNet``: q/k/v projections through a depthwise causal conv (kernel ``conv_kernel``) and SiLU,
  L2-normalised q and k, write strength ``beta = sigmoid(b)``, log-decay ``g = -exp(A_log) * softplus(a + dt_bias)``,
  the gated delta rule (here :func:`agentpost.deltas.rule.chunk_gated_delta`, the project's chunked form), then an
  RMSNorm of the output gated by ``SiLU(z)``;
* ``Qwen3NextAttention`` (without its output gate): multi-head attention with per-head q/k RMSNorm and RoPE.

Streaming: ``model(input_ids, state=...)`` continues a :class:`HybridState` (per linear layer the delta-rule state and
the conv's last inputs; per attention layer the post-RoPE keys, values and their **original positions**), so feeding
a sequence chunk by chunk gives the same logits as feeding it whole. :meth:`HybridState.keep` evicts attention KV
entries; the attention mask is built from positions (a query at position ``p`` sees every cached entry at a position
``<= p``), so kept entries keep their positions and RoPE phases (the paper leaves positions open; we keep the original
ones).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel
from transformers.utils import ModelOutput

from agentpost.deltas.rule import chunk_gated_delta

LAYER_TYPES = ("linear_attention", "full_attention")


class HybridConfig(PretrainedConfig):
    """Sizes of the hybrid LM; ``layer_types`` lists ``linear_attention`` / ``full_attention`` per layer."""

    model_type = "agentpost_deltas_hybrid"

    def __init__(
        self,
        vocab_size: int = 4096,
        hidden_size: int = 128,
        intermediate_size: int = 384,
        layer_types=("linear_attention", "full_attention", "linear_attention", "full_attention"),
        linear_num_heads: int = 2,
        linear_head_dim: int = 64,
        conv_kernel: int = 4,
        num_attention_heads: int = 4,
        head_dim: int = 32,
        rope_theta: float = 10000.0,
        rms_norm_eps: float = 1e-6,
        chunk_size: int = 64,
        initializer_range: float = 0.02,
        key_shift: bool = False,
        partial_rotary_factor: float = 1.0,
        **kwargs,
    ):
        kwargs.setdefault("tie_word_embeddings", False)
        super().__init__(**kwargs)
        bad = [t for t in layer_types if t not in LAYER_TYPES]
        if bad or not layer_types:
            raise ValueError(f"layer_types must be a non-empty list of {LAYER_TYPES}; got {list(layer_types)}")
        for name, value in (
            ("hidden_size", hidden_size),
            ("linear_num_heads", linear_num_heads),
            ("linear_head_dim", linear_head_dim),
            ("num_attention_heads", num_attention_heads),
            ("head_dim", head_dim),
            ("chunk_size", chunk_size),
            ("conv_kernel", conv_kernel),
        ):
            if value < 1:
                raise ValueError(f"HybridConfig.{name} must be >= 1, got {value}")
        if head_dim % 2:
            raise ValueError(f"HybridConfig.head_dim must be even (RoPE), got {head_dim}")
        self.vocab_size, self.hidden_size, self.intermediate_size = vocab_size, hidden_size, intermediate_size
        self.layer_types = list(layer_types)
        self.linear_num_heads, self.linear_head_dim, self.conv_kernel = linear_num_heads, linear_head_dim, conv_kernel
        self.num_attention_heads, self.head_dim, self.rope_theta = num_attention_heads, head_dim, rope_theta
        self.rms_norm_eps, self.chunk_size, self.initializer_range = rms_norm_eps, chunk_size, initializer_range
        if not 0 < partial_rotary_factor <= 1 or int(head_dim * partial_rotary_factor) % 2:
            raise ValueError(
                f"HybridConfig.partial_rotary_factor must be in (0, 1] with an even number of rotated "
                f"dims, got {partial_rotary_factor} of head_dim {head_dim}"
            )
        self.key_shift, self.partial_rotary_factor = bool(key_shift), float(partial_rotary_factor)

    @property
    def num_hidden_layers(self) -> int:
        return len(self.layer_types)


@dataclass
class LinearState:
    """A gated-DeltaNet layer's carry: delta-rule state ``S`` ``[B, H, d_k, d_v]`` and the conv's last inputs."""

    S: torch.Tensor
    conv: torch.Tensor  # [B, channels, conv_kernel - 1]
    log_decay: torch.Tensor | None = None  # [B, H] sum of g over the tokens of the call that made S (G_C of a chunk)


@dataclass
class AttentionCache:
    """A full-attention layer's KV: post-RoPE keys and values ``[B, heads, N, head_dim]``, positions ``[N]``."""

    keys: torch.Tensor
    values: torch.Tensor
    positions: torch.Tensor
    #: with ``key_shift``: the newest token's normalised key before the shift and RoPE ``[B, heads, 1, head_dim]``,
    #: which the next token's shifted key mixes in (kept by every eviction: it is not a cache entry)
    last_key: torch.Tensor | None = None

    def take(self, keep: torch.Tensor) -> "AttentionCache":
        keep = keep.to(self.keys.device)
        return AttentionCache(self.keys[:, :, keep], self.values[:, :, keep], self.positions[keep], self.last_key)


@dataclass
class HybridState:
    """Every layer's carry, in layer order, and the position of the next token."""

    layers: list
    next_position: int

    def linear_states(self) -> list[torch.Tensor]:
        return [s.S for s in self.layers if isinstance(s, LinearState)]

    def attention_caches(self) -> list[AttentionCache]:
        return [s for s in self.layers if isinstance(s, AttentionCache)]

    def keep(self, keep: torch.Tensor) -> "HybridState":
        """The same state with only the attention KV entries ``keep`` (indices into the cache); linear states and
        positions untouched."""
        return HybridState(
            [s.take(keep) if isinstance(s, AttentionCache) else s for s in self.layers], self.next_position
        )


@dataclass
class HybridOutput(ModelOutput):
    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    state: HybridState | None = None
    attention: list | None = None  # per attention layer [B, heads, T, N] weights when recorded


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(dim)), eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rope(x: torch.Tensor, positions: torch.Tensor, theta: float, rotary_dim: int | None = None) -> torch.Tensor:
    """Rotary embedding (half-split layout, as Qwen/Llama) of ``x`` ``[B, heads, T, d]`` at ``positions`` ``[T]``, on
    its first ``rotary_dim`` dims (default all; the rest pass unrotated, as Qwen3-Next's ``partial_rotary_factor``
    in transformers' ``qwen3_next/modeling_qwen3_next.py``, ``apply_rotary_pos_emb``)."""
    d = x.shape[-1] if rotary_dim is None else rotary_dim
    x, rest = x[..., :d], x[..., d:]
    inv = theta ** (-torch.arange(0, d, 2, device=x.device, dtype=torch.float32) / d)
    ang = positions.to(x.device, torch.float32)[:, None] * inv[None]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1), torch.cat([ang.sin(), ang.sin()], -1)
    x1, x2 = x[..., : d // 2], x[..., d // 2 :]
    return torch.cat([x * cos + torch.cat([-x2, x1], -1) * sin, rest], -1)


class GatedDeltaNet(nn.Module):
    """Gated-DeltaNet token mixer (see the module docstring)."""

    def __init__(self, cfg: HybridConfig):
        super().__init__()
        self.H, self.dk, self.K = cfg.linear_num_heads, cfg.linear_head_dim, cfg.conv_kernel
        self.chunk_size = cfg.chunk_size
        inner = self.H * self.dk
        self.qkv = nn.Linear(cfg.hidden_size, 3 * inner, bias=False)
        self.conv = nn.Conv1d(3 * inner, 3 * inner, self.K, groups=3 * inner, bias=False)
        self.ab = nn.Linear(cfg.hidden_size, 2 * self.H, bias=False)
        self.z = nn.Linear(cfg.hidden_size, inner, bias=False)
        self.A_log = nn.Parameter(torch.log(torch.linspace(1.0, 16.0, self.H)))
        dt = torch.exp(torch.linspace(math.log(1e-3), math.log(1e-1), self.H))  # Mamba-2 / Qwen3-Next time-step range
        self.dt_bias = nn.Parameter(dt + torch.log(-torch.expm1(-dt)))  # softplus(dt_bias) = dt
        self.norm = RMSNorm(self.dk, cfg.rms_norm_eps)
        self.out = nn.Linear(inner, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor, state: LinearState | None):
        B, T, _ = x.shape
        mixed = self.qkv(x).transpose(1, 2)  # [B, 3*inner, T]
        prev = state.conv if state is not None else mixed.new_zeros(B, mixed.shape[1], self.K - 1)
        padded = torch.cat([prev, mixed], -1)
        conv = F.silu(F.conv1d(padded, self.conv.weight, groups=mixed.shape[1])).transpose(1, 2)
        q, k, v = (t.reshape(B, T, self.H, self.dk) for t in conv.split(self.H * self.dk, -1))
        q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
        a, b = self.ab(x).chunk(2, -1)
        g = -self.A_log.exp() * F.softplus(a + self.dt_bias)
        o, S, _ = chunk_gated_delta(
            q,
            k,
            v,
            g,
            b.sigmoid(),
            initial_state=None if state is None else state.S,
            chunk_size=self.chunk_size,
            with_drift=False,
        )
        o = self.norm(o.to(x.dtype)) * F.silu(self.z(x).reshape(B, T, self.H, self.dk))
        return self.out(o.reshape(B, T, -1)), LinearState(S, padded[..., padded.shape[-1] - (self.K - 1) :], g.sum(1))


class Attention(nn.Module):
    """Full causal attention with q/k RMSNorm and RoPE over a position-tagged KV cache.

    With ``cfg.key_shift`` each head's key at position ``j`` is ``(1 - m) k_j + m k_{j-1}`` before RoPE, with a learned
    per-head mix ``m = sigmoid(key_shift_logit)`` (the "smeared key" architecture of Olsson et al. 2022, *In-context
    Learning and Induction Heads*, Argument 2): a query for token ``x_t`` can then find the entry that followed an
    earlier ``x_t`` in one attention layer, the circuit a model needs to copy from distant context."""

    def __init__(self, cfg: HybridConfig):
        super().__init__()
        self.nh, self.hd, self.theta = cfg.num_attention_heads, cfg.head_dim, cfg.rope_theta
        self.rotary_dim = int(cfg.head_dim * cfg.partial_rotary_factor)
        self.qkv = nn.Linear(cfg.hidden_size, 3 * self.nh * self.hd, bias=False)
        self.q_norm, self.k_norm = RMSNorm(self.hd, cfg.rms_norm_eps), RMSNorm(self.hd, cfg.rms_norm_eps)
        self.out = nn.Linear(self.nh * self.hd, cfg.hidden_size, bias=False)
        self.key_shift_logit = nn.Parameter(torch.zeros(self.nh)) if cfg.key_shift else None

    def _shift_keys(self, k: torch.Tensor, cache: AttentionCache | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Normalised keys ``[B, heads, T, d]`` mixed with their predecessor's (the first token of a stream with
        zeros); returns them and the newest unshifted key (the next call's predecessor)."""
        if self.key_shift_logit is None:
            return k, None
        prev = cache.last_key if cache is not None and cache.last_key is not None else torch.zeros_like(k[:, :, :1])
        m = torch.sigmoid(self.key_shift_logit).view(1, -1, 1, 1)
        return (1 - m) * k + m * torch.cat([prev, k[:, :, :-1]], 2), k[:, :, -1:]

    def forward(self, x, positions: torch.Tensor, cache: AttentionCache | None, record: bool = False):
        B, T, _ = x.shape
        q, k, v = (t.reshape(B, T, self.nh, self.hd).transpose(1, 2) for t in self.qkv(x).chunk(3, -1))
        k, last_key = self._shift_keys(self.k_norm(k), cache)
        q, k = (rope(t, positions, self.theta, self.rotary_dim) for t in (self.q_norm(q), k))
        if cache is not None:
            k, v = torch.cat([cache.keys, k], 2), torch.cat([cache.values, v], 2)
            key_pos = torch.cat([cache.positions, positions])
        else:
            key_pos = positions
        visible = key_pos.to(x.device)[None, :] <= positions.to(x.device)[:, None]  # [T, N]
        weights = None
        if record:
            scores = (q @ k.transpose(-1, -2)) / self.hd**0.5
            weights = scores.masked_fill(~visible, float("-inf")).softmax(-1)
            y = weights @ v
        elif cache is None:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=visible)
        y = self.out(y.transpose(1, 2).reshape(B, T, -1))
        return y, AttentionCache(k, v, key_pos, last_key), weights


class Block(nn.Module):
    def __init__(self, cfg: HybridConfig, layer_type: str):
        super().__init__()
        self.layer_type = layer_type
        self.norm1, self.norm2 = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps), RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mixer = GatedDeltaNet(cfg) if layer_type == "linear_attention" else Attention(cfg)
        self.gate_up = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, bias=False)
        self.down = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x, positions, carry, record: bool):
        weights = None
        if self.layer_type == "linear_attention":
            h, carry = self.mixer(self.norm1(x), carry)
        else:
            h, carry, weights = self.mixer(self.norm1(x), positions, carry, record)
        x = x + h
        gate, up = self.gate_up(self.norm2(x)).chunk(2, -1)
        return x + self.down(F.silu(gate) * up), carry, weights


class HybridForCausalLM(PreTrainedModel):
    """The hybrid causal LM. ``forward(input_ids, state=None, labels=None, record_attention=False)``."""

    config_class = HybridConfig
    base_model_prefix = "hybrid"
    main_input_name = "input_ids"

    def __init__(self, config: HybridConfig):
        super().__init__(config)
        self.embed = nn.Embedding(config.vocab_size, config.hidden_size)
        self.blocks = nn.ModuleList(Block(config, t) for t in config.layer_types)
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def _init_weights(self, module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, std=self.config.initializer_range)
        if isinstance(module, Attention) and module.key_shift_logit is not None:
            nn.init.zeros_(module.key_shift_logit)  # an even mix of each key with its predecessor

    def forward(
        self,
        input_ids: torch.Tensor,
        state: HybridState | None = None,
        labels: torch.Tensor | None = None,
        record_attention: bool = False,
        **_,
    ) -> HybridOutput:
        start = 0 if state is None else state.next_position
        T = input_ids.shape[1]
        positions = torch.arange(start, start + T, device=input_ids.device)
        x = self.embed(input_ids)
        carries, attention = [], []
        for i, block in enumerate(self.blocks):
            x, carry, weights = block(x, positions, None if state is None else state.layers[i], record_attention)
            carries.append(carry)
            if weights is not None:
                attention.append(weights)
        logits = self.lm_head(self.norm(x))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))
        return HybridOutput(loss=loss, logits=logits, state=HybridState(carries, start + T), attention=attention)


def load_hybrid(path) -> HybridForCausalLM:
    """A saved hybrid model (``save_pretrained`` folder: ``config.json`` + ``model.safetensors``), in eval mode."""
    from pathlib import Path

    if not (Path(path) / "model.safetensors").is_file():
        raise FileNotFoundError(
            f"no hybrid checkpoint at {path}; train one with `python -m agentpost.deltas.train_hybrid`"
        )
    return HybridForCausalLM.from_pretrained(str(path)).eval()
