"""The Step Scale Transformer (SST) and its dense baselines as plain torch modules.

Spec (``kite.md``, "Formal reading"): a KV tower of :math:`L_P` layers (the **Prefiller**: q/k/v attention + FFN)
writes a per-layer cache :math:`K^{(\\ell)}=X^{(\\ell)}W_K^{(\\ell)}, V^{(\\ell)}=X^{(\\ell)}W_V^{(\\ell)}`; a read tower of
:math:`L_D` layers (the **Decoder**: query-only attention + FFN) computes queries from its own state and attends to
Prefiller layer :math:`\\pi(\\ell')` without writing any cache; logits come from the Decoder's last layer.
Third-party reading ("2+2 SST"): Decoder input = RMSNorm(embedding) + RMSNorm(Prefiller output).

Every model exposes the same three entry points: ``forward`` (all positions, for training), ``prefill`` (prompt ->
last-token logits + :class:`KVCache`) and ``decode_step`` (one token per sequence, appends to the cache).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

ATTENTION_IMPLS = ("sdpa", "matmul")
LAYER_MAPS = ("default", "same", "proportional", "last")
DECODER_INPUTS = ("both", "prefiller", "embedding")


@dataclass(frozen=True)
class ModelConfig:
    """A dense decoder-only LM (also the Prefiller tower). Widths: ``d_model`` (residual), ``d_ff`` (FFN hidden)."""

    vocab_size: int = 4096
    d_model: int = 64
    n_heads: int = 4
    n_layers: int = 2
    d_ff: int = 256
    rope_base: float = 10000.0
    attention: str = "sdpa"  # "matmul" computes softmax(QK^T)V with explicit matmuls (counted by the profiler)

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "d_ff"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"ModelConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.n_heads or (self.d_model // self.n_heads) % 2:
            raise ValueError(f"d_model={self.d_model} must split into n_heads={self.n_heads} heads of even size")
        if self.attention not in ATTENTION_IMPLS:
            raise ValueError(f"attention must be one of {ATTENTION_IMPLS}, got {self.attention!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads


@dataclass(frozen=True)
class SSTConfig:
    """SST = a Prefiller (:class:`ModelConfig`) + a Decoder of ``n_decode_layers`` layers with FFN width ``d_ff_decode``.

    ``layer_map`` (the paper leaves the mapping open): ``same`` index, ``proportional`` (:math:`\\pi(\\ell')=\\lfloor
    \\ell' L_P/L_D\\rfloor`), ``last`` (every Decoder layer reads the last Prefiller layer); ``default`` = same when
    :math:`L_D=L_P`, else proportional. ``decoder_input`` (left open by the paper): ``both`` = RMSNorm(emb) +
    RMSNorm(Prefiller output), ``prefiller`` = Prefiller output only, ``embedding`` = embedding only.
    """

    prefiller: ModelConfig = field(default_factory=ModelConfig)
    n_decode_layers: int = 2
    d_ff_decode: int = 256
    layer_map: str = "default"
    decoder_input: str = "both"

    def __post_init__(self) -> None:
        if self.n_decode_layers < 1 or self.d_ff_decode < 1:
            raise ValueError("SSTConfig: n_decode_layers and d_ff_decode must be >= 1")
        if self.layer_map not in LAYER_MAPS:
            raise ValueError(f"layer_map must be one of {LAYER_MAPS}, got {self.layer_map!r}")
        if self.decoder_input not in DECODER_INPUTS:
            raise ValueError(f"decoder_input must be one of {DECODER_INPUTS}, got {self.decoder_input!r}")

    @property
    def read_map(self) -> tuple[int, ...]:
        return layer_map(self.prefiller.n_layers, self.n_decode_layers, self.layer_map)


def layer_map(n_prefill: int, n_decode: int, mode: str = "default") -> tuple[int, ...]:
    """:math:`\\pi`: the Prefiller layer (0-based) each Decoder layer reads (``layer_map``)."""
    if n_prefill < 1 or n_decode < 1:
        raise ValueError(f"layer_map needs >= 1 layer per tower, got {n_prefill}+{n_decode}")
    if mode == "default":
        mode = "same" if n_prefill == n_decode else "proportional"
    if mode == "same":
        if n_prefill != n_decode:
            raise ValueError(f"layer_map 'same' needs equal tower depths, got {n_prefill}+{n_decode}")
        return tuple(range(n_decode))
    if mode == "proportional":
        return tuple(i * n_prefill // n_decode for i in range(n_decode))
    if mode == "last":
        return (n_prefill - 1,) * n_decode
    raise ValueError(f"unknown layer_map {mode!r}; use one of {LAYER_MAPS}")


@dataclass
class KVCache:
    """The Prefiller's cache: per layer ``keys[l]``, ``values[l]`` of shape (batch, heads, capacity, head_dim).

    Only ``[..., :length, :]`` is valid. Layers write at ``length`` and the owner calls :meth:`advance` once the
    whole tower has run, so every layer of one step writes the same positions.
    """

    keys: list[torch.Tensor]
    values: list[torch.Tensor]
    length: int = 0

    @classmethod
    def empty(
        cls,
        n_layers: int,
        batch: int,
        n_heads: int,
        head_dim: int,
        capacity: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> "KVCache":
        shape = (batch, n_heads, capacity, head_dim)
        return cls(
            [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)],
            [torch.zeros(shape, dtype=dtype, device=device) for _ in range(n_layers)],
        )

    @property
    def n_layers(self) -> int:
        return len(self.keys)

    @property
    def capacity(self) -> int:
        return self.keys[0].shape[2]

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``k, v`` (batch, heads, t, head_dim) at positions ``length..length+t``; return the valid prefix."""
        end = self.length + k.shape[2]
        if end > self.capacity:  # grow by doubling
            grow = max(end, 2 * self.capacity) - self.capacity
            pad = lambda x: torch.cat([x, x.new_zeros(x.shape[:2] + (grow, x.shape[3]))], dim=2)  # noqa: E731
            self.keys = [pad(x) for x in self.keys]
            self.values = [pad(x) for x in self.values]
        self.keys[layer][:, :, self.length : end] = k
        self.values[layer][:, :, self.length : end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def read(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.keys[layer][:, :, : self.length], self.values[layer][:, :, : self.length]

    def advance(self, t: int) -> None:
        self.length += t

    def num_elements(self) -> int:
        """KV entries held (2 x layers x batch x heads x length x head_dim): the cache size the baselines match."""
        b, h, _, d = self.keys[0].shape
        return 2 * self.n_layers * b * h * self.length * d


def rope(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """Rotary position embedding (rotate-half form) of ``x`` (batch, heads, t, head_dim) at integer ``positions``."""
    half = x.shape[-1] // 2
    inv = base ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
    ang = positions.to(torch.float32)[:, None] * inv[None, :]
    cos, sin = ang.cos().to(x.dtype), ang.sin().to(x.dtype)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, q_pos0: int, impl: str) -> torch.Tensor:
    """Causal attention of queries at positions ``q_pos0..q_pos0+tq`` over keys at ``0..tk``."""
    tq, tk = q.shape[2], k.shape[2]
    if q_pos0 + tq != tk:
        raise ValueError(
            f"queries end at {q_pos0 + tq} but {tk} keys are visible; the last query must see the last key"
        )
    if impl == "sdpa":
        if tq == 1:
            return F.scaled_dot_product_attention(q, k, v)
        if tq == tk:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    if tq > 1:
        qpos = torch.arange(q_pos0, q_pos0 + tq, device=q.device)[:, None]
        scores = scores.masked_fill(torch.arange(tk, device=q.device)[None, :] > qpos, float("-inf"))
    return scores.softmax(dim=-1) @ v


class FFN(nn.Module):
    """Two-matrix GELU MLP: :math:`W_2\\,\\mathrm{gelu}(W_1 x)` (4 d d_ff FLOPs per token)."""

    def __init__(self, d_model: int, d_ff: int) -> None:
        super().__init__()
        self.up = nn.Linear(d_model, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.gelu(self.up(x)))


def _heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def _merge(x: torch.Tensor) -> torch.Tensor:
    b, h, t, d = x.shape
    return x.transpose(1, 2).reshape(b, t, h * d)


class PrefillerBlock(nn.Module):
    """Pre-norm block with q/k/v attention (writes K, V) and an FFN."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.attn_norm = nn.RMSNorm(cfg.d_model)
        self.q = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.k = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.v = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.o = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.ffn_norm = nn.RMSNorm(cfg.d_model)
        self.ffn = FFN(cfg.d_model, cfg.d_ff)

    def forward(self, x: torch.Tensor, pos0: int, cache: KVCache | None, layer: int) -> torch.Tensor:
        h = self.attn_norm(x)
        positions = torch.arange(pos0, pos0 + x.shape[1], device=x.device)
        q = rope(_heads(self.q(h), self.cfg.n_heads), positions, self.cfg.rope_base)
        k = rope(_heads(self.k(h), self.cfg.n_heads), positions, self.cfg.rope_base)
        v = _heads(self.v(h), self.cfg.n_heads)
        if cache is not None:
            k, v = cache.write(layer, k, v)
        x = x + self.o(_merge(attend(q, k, v, pos0, self.cfg.attention)))
        return x + self.ffn(self.ffn_norm(x))


class DecoderBlock(nn.Module):
    """Pre-norm block with query-only attention over a Prefiller layer's K, V (no k/v projections) and an FFN."""

    def __init__(self, cfg: ModelConfig, d_ff: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.attn_norm = nn.RMSNorm(cfg.d_model)
        self.q = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.o = nn.Linear(cfg.d_model, cfg.d_model, bias=False)
        self.ffn_norm = nn.RMSNorm(cfg.d_model)
        self.ffn = FFN(cfg.d_model, d_ff)

    def forward(self, x: torch.Tensor, pos0: int, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(pos0, pos0 + x.shape[1], device=x.device)
        q = rope(_heads(self.q(self.attn_norm(x)), self.cfg.n_heads), positions, self.cfg.rope_base)
        x = x + self.o(_merge(attend(q, k, v, pos0, self.cfg.attention)))
        return x + self.ffn(self.ffn_norm(x))


class DenseLM(nn.Module):
    """A dense LM of ``n_layers`` :class:`PrefillerBlock` s with tied embeddings; also the SST's Prefiller."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(PrefillerBlock(cfg) for _ in range(cfg.n_layers))
        self.norm_f = nn.RMSNorm(cfg.d_model)
        nn.init.normal_(self.embed.weight, std=0.02)

    def new_cache(self, batch: int, capacity: int, like: torch.Tensor) -> KVCache:
        c = self.cfg
        return KVCache.empty(c.n_layers, batch, c.n_heads, c.head_dim, capacity, like.dtype, like.device)

    def body(self, tokens: torch.Tensor, cache: KVCache | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(embedding, last hidden state) of ``tokens`` (batch, t); with a cache, writes and advances it."""
        _check_tokens(tokens, self.cfg.vocab_size)
        pos0 = 0 if cache is None else cache.length
        emb = self.embed(tokens)
        x = emb
        for i, layer in enumerate(self.layers):
            x = layer(x, pos0, cache, i)
        if cache is not None:
            cache.advance(tokens.shape[1])
        return emb, x

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self.norm_f(x), self.embed.weight)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.logits(self.body(tokens)[1])

    def prefill(self, tokens: torch.Tensor, capacity: int | None = None) -> tuple[torch.Tensor, KVCache]:
        """Run every layer over the prompt (all layers write KV); logits of the last position only."""
        cache = self.new_cache(tokens.shape[0], capacity or tokens.shape[1], self.embed.weight)
        _, x = self.body(tokens, cache)
        return self.logits(x[:, -1:]), cache

    def decode_step(self, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """One new token per sequence (batch, 1): append its KV and return its logits (batch, 1, vocab)."""
        if tokens.shape[1] != 1:
            raise ValueError(f"decode_step takes one token per sequence, got shape {tuple(tokens.shape)}")
        return self.logits(self.body(tokens, cache)[1])


class SSTLM(nn.Module):
    """Step Scale Transformer: ``prefiller`` (a :class:`DenseLM`, the only KV writer) + query-only ``decoder``."""

    def __init__(self, cfg: SSTConfig) -> None:
        super().__init__()
        self.cfg = cfg
        p = cfg.prefiller
        self.prefiller = DenseLM(p)
        self.decoder = nn.ModuleList(DecoderBlock(p, cfg.d_ff_decode) for _ in range(cfg.n_decode_layers))
        self.in_norm_emb = nn.RMSNorm(p.d_model)
        self.in_norm_pre = nn.RMSNorm(p.d_model)
        self.norm_f = nn.RMSNorm(p.d_model)
        self.read_map = cfg.read_map

    def decoder_input(self, emb: torch.Tensor, pre: torch.Tensor) -> torch.Tensor:
        """The Decoder's input (``decoder_input``, left open by the paper); default RMSNorm(emb) + RMSNorm(Prefiller
        output)."""
        mode = self.cfg.decoder_input
        if mode == "both":
            return self.in_norm_emb(emb) + self.in_norm_pre(pre)
        return self.in_norm_pre(pre) if mode == "prefiller" else self.in_norm_emb(emb)

    def run_decoder(self, h: torch.Tensor, pos0: int, kv: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """Decoder tower over states ``h`` at positions ``pos0..``, reading ``kv[pi(l')]``; returns logits."""
        for layer, src in zip(self.decoder, self.read_map):
            h = layer(h, pos0, *kv[src])
        return F.linear(self.norm_f(h), self.prefiller.embed.weight)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """All-position logits (training). The Prefiller's K, V are kept in a cache of exactly the prompt length."""
        cache = self.prefiller.new_cache(tokens.shape[0], tokens.shape[1], self.prefiller.embed.weight)
        emb, pre = self.prefiller.body(tokens, cache)
        kv = [cache.read(i) for i in range(cache.n_layers)]
        return self.run_decoder(self.decoder_input(emb, pre), 0, kv)

    def prefill(
        self, tokens: torch.Tensor, capacity: int | None = None, last_only: bool = True
    ) -> tuple[torch.Tensor, KVCache]:
        """Prefiller over all prompt tokens (writes KV); Decoder at the last position only (``last_only``)."""
        cache = self.prefiller.new_cache(tokens.shape[0], capacity or tokens.shape[1], self.prefiller.embed.weight)
        emb, pre = self.prefiller.body(tokens, cache)
        kv = [cache.read(i) for i in range(cache.n_layers)]
        pos0 = tokens.shape[1] - 1 if last_only else 0
        if last_only:
            emb, pre = emb[:, -1:], pre[:, -1:]
        return self.run_decoder(self.decoder_input(emb, pre), pos0, kv), cache

    def decode_step(self, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
        """Prefiller at the new position (appends its KV), then the Decoder there (reads only)."""
        if tokens.shape[1] != 1:
            raise ValueError(f"decode_step takes one token per sequence, got shape {tuple(tokens.shape)}")
        pos0 = cache.length
        emb, pre = self.prefiller.body(tokens, cache)
        kv = [cache.read(i) for i in range(cache.n_layers)]
        return self.run_decoder(self.decoder_input(emb, pre), pos0, kv)


def _check_tokens(tokens: torch.Tensor, vocab_size: int) -> None:
    if tokens.dim() != 2 or tokens.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"tokens must be an integer tensor (batch, t), got {tuple(tokens.shape)} {tokens.dtype}")
    # the range check reads values back; on a GPU it would synchronise inside timed regions (the embedding
    # lookup still fails there on a bad id)
    if tokens.device.type == "cpu" and tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(f"token ids must lie in [0, {vocab_size}), got [{int(tokens.min())}, {int(tokens.max())}]")


def build(
    kind: str,
    *,
    vocab_size: int = 4096,
    d_model: int = 64,
    n_heads: int = 4,
    n_prefill: int = 2,
    n_decode: int = 2,
    d_ff: int = 256,
    d_ff_decode: int | None = None,
    attention: str = "sdpa",
    **sst_kwargs,
) -> nn.Module:
    """The three arms of the diagnostic by name: ``sst`` (n_prefill + n_decode), ``dense_flops`` (dense with the
    SST's total depth: matched FLOPs), ``dense_kv`` (dense with the Prefiller's depth: matched KV size)."""
    base = dict(vocab_size=vocab_size, d_model=d_model, n_heads=n_heads, d_ff=d_ff, attention=attention)
    if kind == "sst":
        return SSTLM(
            SSTConfig(
                ModelConfig(n_layers=n_prefill, **base),
                n_decode_layers=n_decode,
                d_ff_decode=d_ff if d_ff_decode is None else d_ff_decode,
                **sst_kwargs,
            )
        )
    if sst_kwargs:
        raise ValueError(f"options {sorted(sst_kwargs)} only apply to kind='sst'")
    if kind == "dense_flops":
        return DenseLM(ModelConfig(n_layers=n_prefill + n_decode, **base))
    if kind == "dense_kv":
        return DenseLM(ModelConfig(n_layers=n_prefill, **base))
    raise ValueError(f"unknown model kind {kind!r}; use 'sst', 'dense_flops' or 'dense_kv'")
