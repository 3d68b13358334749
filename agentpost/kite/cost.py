"""Request-level inference cost of an SST vs a dense (or MoE-active) baseline, and the paper's two estimates.

Cost model (ours, from the spec's "Cost shape implied"; the paper's own cost model is unknown): FLOPs of the
active body parameters, attention ignored. A request with ``prompt`` input and ``output`` generated tokens costs

* SST:   :math:`2N_P T_{in} + 2N_D + 2(N_P+N_D)(T_{out}-1)` (the Prefiller reads every prompt token; the Decoder runs
  at the last prompt position, which yields the first output token, then both towers per further token);
* dense: :math:`2N_B (T_{in} + T_{out} - 1)`.

The estimated saving is :math:`1 - c_{SST}/c_B`. The paper's abstract reports -6.7% and -31.6% estimated cost
for a 67B SST with 2.15B active body parameters per decode token against 47B-A1.48B and 63B-A2.02B MoE
Transformers; it does not say how :math:`N_P` and :math:`N_D` split, nor the prompt/output ratio.
"""

from __future__ import annotations

#: The paper's estimates (arXiv 2609.27294 abstract): baseline -> (active params, estimated cost change).
PAPER_SST_ACTIVE = 2.15e9
PAPER_ESTIMATES = {"47B-A1.48B": (1.48e9, -0.067), "63B-A2.02B": (2.02e9, -0.316)}


def _check(prompt: int, output: int, *params: float) -> None:
    if prompt < 1 or output < 1:
        raise ValueError(f"prompt and output must be >= 1 token, got {prompt}, {output}")
    if any(p < 0 for p in params):
        raise ValueError(f"parameter counts must be >= 0, got {params}")


def sst_request_flops(n_prefill: float, n_decode: float, prompt: int, output: int) -> float:
    """:math:`2N_P T_{in} + 2N_D + 2(N_P+N_D)(T_{out}-1)`."""
    _check(prompt, output, n_prefill, n_decode)
    return 2 * n_prefill * prompt + 2 * n_decode + 2 * (n_prefill + n_decode) * (output - 1)


def dense_request_flops(n_params: float, prompt: int, output: int) -> float:
    """:math:`2N_B(T_{in}+T_{out}-1)`."""
    _check(prompt, output, n_params)
    return 2 * n_params * (prompt + output - 1)


def saving(n_prefill: float, n_decode: float, n_baseline: float, prompt: int, output: int) -> float:
    """Estimated inference saving of the SST: :math:`1 - c_{SST}/c_B` (positive = cheaper)."""
    return 1 - sst_request_flops(n_prefill, n_decode, prompt, output) / dense_request_flops(n_baseline, prompt, output)


def implied_prefill_params(target_saving: float, n_total: float, n_baseline: float, prompt: int, output: int) -> float:
    """The Prefiller size :math:`N_P` (with :math:`N_P+N_D=` ``n_total``) at which :func:`saving` equals
    ``target_saving`` (the SST cost is linear in :math:`N_P`, so this is exact)."""
    lo = saving(0.0, n_total, n_baseline, prompt, output)
    hi = saving(n_total, 0.0, n_baseline, prompt, output)
    if not min(lo, hi) <= target_saving <= max(lo, hi):
        raise ValueError(
            f"saving {target_saving} is unreachable with N_P in [0, {n_total:g}] "
            f"(range {min(lo, hi):.3f}..{max(lo, hi):.3f})"
        )
    return n_total * (target_saving - lo) / (hi - lo)


def prefill_share(n_prefill: float, n_decode: float, prompt: int, output: int) -> float:
    """Fraction of the SST request cost spent in prefill (prompt tokens + the Decoder's last-position pass)."""
    prefill = 2 * n_prefill * prompt + 2 * n_decode
    return prefill / sst_request_flops(n_prefill, n_decode, prompt, output)
