"""Analytic FLOP counts of the SST and its dense baselines, the profiler check, and training-budget matching.

Spec "Cost shape implied": prefill ~ :math:`2N_PT` + attention (the Decoder runs at the last position only);
decode ~ :math:`2(N_P+N_D)` per token + cache reads. Counted here: matrix-multiply FLOPs (2 per multiply-add) of
every projection, FFN, attention score/value product and the tied output head. Norms, rope, GELU and softmax are
O(d) per token and are not counted (nor by :func:`profiler_matmul_flops`, which sums only matmul kernels).

Per token, with :math:`d` = ``d_model``, a Prefiller layer costs :math:`8d^2 + 4d\\,d_{ff}` (q, k, v, o + FFN), a
Decoder layer :math:`4d^2 + 4d\\,d_{ff,D}` (q, o + FFN), the head :math:`2dV`; a query attending :math:`c` keys costs
:math:`4dc` per layer (:math:`QK^\\top` and :math:`AV`).
"""

from __future__ import annotations

import torch

from agentpost.kite.model import ModelConfig, SSTConfig

ATTENTION_COUNTS = ("causal", "square")
MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm")


def prefiller_layer_flops(d: int, d_ff: int) -> int:
    """Per-token linear FLOPs of a KV-writing layer: :math:`8d^2 + 4d\\,d_{ff}`."""
    return 8 * d * d + 4 * d * d_ff


def decoder_layer_flops(d: int, d_ff: int) -> int:
    """Per-token linear FLOPs of a query-only layer: :math:`4d^2 + 4d\\,d_{ff}`."""
    return 4 * d * d + 4 * d * d_ff


def _attention(d: int, t: int, attention: str) -> int:
    """Score + value FLOPs of ``t`` causal queries over their prefixes (``square``: the full t x t product)."""
    if attention not in ATTENTION_COUNTS:
        raise ValueError(f"attention count must be one of {ATTENTION_COUNTS}, got {attention!r}")
    pairs = t * t if attention == "square" else t * (t + 1) // 2
    return 4 * d * pairs


def _split(cfg: ModelConfig | SSTConfig) -> tuple[ModelConfig, int, int]:
    if isinstance(cfg, SSTConfig):
        return cfg.prefiller, cfg.n_decode_layers, cfg.d_ff_decode
    if isinstance(cfg, ModelConfig):
        return cfg, 0, 0
    raise TypeError(f"expected a ModelConfig or SSTConfig, got {type(cfg).__name__}")


def prefill_flops(
    cfg: ModelConfig | SSTConfig, prompt: int, *, attention: str = "causal", last_only: bool = True
) -> int:
    """FLOPs to prefill ``prompt`` tokens. KV-writing layers run on every token; the Decoder (SST) and the head run
    at the last position only when ``last_only`` (else at every position, as in a training forward)."""
    if prompt < 1:
        raise ValueError(f"prompt length must be >= 1, got {prompt}")
    p, n_dec, d_ff_dec = _split(cfg)
    d = p.d_model
    total = p.n_layers * (prompt * prefiller_layer_flops(d, p.d_ff) + _attention(d, prompt, attention))
    if last_only:
        total += n_dec * (decoder_layer_flops(d, d_ff_dec) + 4 * d * prompt)
    else:
        total += n_dec * (prompt * decoder_layer_flops(d, d_ff_dec) + _attention(d, prompt, attention))
    return total + (1 if last_only else prompt) * 2 * d * p.vocab_size


def forward_flops(cfg: ModelConfig | SSTConfig, seq_len: int, *, attention: str = "causal") -> int:
    """A training forward: logits at every position."""
    return prefill_flops(cfg, seq_len, attention=attention, last_only=False)


def decode_flops(cfg: ModelConfig | SSTConfig, context: int) -> int:
    """FLOPs of one decode step after ``context`` cached tokens: every layer of both towers once, each query over
    ``context + 1`` keys, plus the head. For the SST this is :math:`2(N_P+N_D)` + attention + head."""
    if context < 0:
        raise ValueError(f"context must be >= 0, got {context}")
    p, n_dec, d_ff_dec = _split(cfg)
    d, keys = p.d_model, context + 1
    return (
        p.n_layers * (prefiller_layer_flops(d, p.d_ff) + 4 * d * keys)
        + n_dec * (decoder_layer_flops(d, d_ff_dec) + 4 * d * keys)
        + 2 * d * p.vocab_size
    )


def training_flops_per_sequence(cfg: ModelConfig | SSTConfig, seq_len: int) -> int:
    """Forward + backward (3x forward) FLOPs of one training sequence."""
    return 3 * forward_flops(cfg, seq_len)


def profiler_matmul_flops(fn) -> int:
    """Matmul FLOPs that ``torch.profiler`` (``with_flops=True``) counts while running ``fn()``.

    CPU ``scaled_dot_product_attention`` reports no FLOPs, so count models built with ``attention='matmul'``.
    """
    from torch.profiler import ProfilerActivity, profile

    with torch.no_grad(), profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
        fn()
    return int(sum(e.flops for e in prof.key_averages() if e.key in MATMUL_OPS))


def match_budget(budget: float, flops_per_sequence: float, n_updates: int, *, tol: float = 0.01) -> list[int]:
    """Sequences per update so that ``n_updates`` updates spend ``budget`` training FLOPs within ``tol``.

    Every arm keeps the same number of optimizer updates; the sequences are spread as evenly as possible (batch
    sizes differ by at most one). Raises when the budget cannot be met within ``tol`` (too few sequences).
    """
    if budget <= 0 or flops_per_sequence <= 0 or n_updates < 1:
        raise ValueError(
            f"match_budget needs a positive budget, cost and update count; got {budget}, "
            f"{flops_per_sequence}, {n_updates}"
        )
    total = round(budget / flops_per_sequence)
    if total < n_updates:
        raise ValueError(f"budget {budget:.3g} buys {total} sequences, fewer than the {n_updates} updates")
    sizes = [(i + 1) * total // n_updates - i * total // n_updates for i in range(n_updates)]
    error = abs(total * flops_per_sequence - budget) / budget
    if error > tol:
        raise ValueError(f"budget matched only within {error:.2%} (> {tol:.0%}); use more sequences per update")
    return sizes


def relative_budget_error(budget: float, flops_per_sequence: float, sizes: list[int]) -> float:
    return abs(sum(sizes) * flops_per_sequence - budget) / budget
