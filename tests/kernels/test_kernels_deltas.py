"""Triton chunked gated-delta forward with drift vs a float64 recurrence and the torch reference (TRITON_INTERPRET).

Errors are relative: largest error over largest reference magnitude for the outputs and the final state, and
elementwise for the drift (one value per chunk and head, the first one ``||S'|| / eps`` from a zero state). The
bound is the kernel's precision policy: :data:`IEEE_RTOL` (1e-4) in fp32, :data:`TF32_RTOL` for tf32. The Triton
interpreter computes every ``tl.dot`` in fp32, so on the CPU the tf32 cases emulate the tensor cores: the operands
of every tf32 product are truncated to 10 mantissa bits (the pessimistic reading of the hardware; rounding to
nearest errs less). On a GPU they run on the tensor cores.
"""

import os

import numpy as np
import pytest
import torch
import triton.runtime.interpreter as interpreter

from agentpost.deltas.rule import recurrent_gated_delta
from agentpost.kernels.deltas import chunk_gated_delta_drift, chunk_gated_delta_drift_reference
from agentpost.kernels.deltas.chunk_delta import IEEE_RTOL, TF32_RTOL

# AGENTPOST_TRITON_GPU=1 runs the same tests on the GPU (benchmarks/gpu_all.sh, item kernel-tests).
DEVICE = torch.device("cuda" if os.environ.get("AGENTPOST_TRITON_GPU") == "1" and torch.cuda.is_available() else "cpu")
PRECISIONS = ["ieee", "tf32"]
RTOL = {"ieee": IEEE_RTOL, "tf32": TF32_RTOL}


def _truncate_to_tf32(handle):
    bits = np.asarray(handle.data, dtype=np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
    return interpreter.TensorHandle(bits.view(np.float32), handle.dtype.scalar)


@pytest.fixture(autouse=True)
def _emulate_tf32_in_the_interpreter(monkeypatch):
    if DEVICE.type == "cuda":
        return
    create_dot = interpreter.InterpreterBuilder.create_dot

    def tf32_dot(self, a, b, acc, input_precision, max_num_imprecise_acc):
        if "TF32" in repr(input_precision) and a.dtype.scalar == b.dtype.scalar == interpreter.tl.float32:
            a, b = _truncate_to_tf32(a), _truncate_to_tf32(b)
        return create_dot(self, a, b, acc, input_precision, max_num_imprecise_acc)

    monkeypatch.setattr(interpreter.InterpreterBuilder, "create_dot", tf32_dot)


def test_the_tf32_emulation_truncates_the_operands():
    q, k, v, g, beta = _inputs(1, 64, 1, 32, 32, seed=3)
    o32 = chunk_gated_delta_drift(q, k, v, g, beta, chunk_size=16, precision="ieee")[0]
    o19 = chunk_gated_delta_drift(q, k, v, g, beta, chunk_size=16, precision="tf32")[0]
    assert 1e-5 < _rel(o19, o32.double()) <= TF32_RTOL


def _inputs(B, T, H, dk, dv, seed, *, cosine=0.0, beta_min=0.0, alpha_min=0.8):
    """Unit keys whose mean pairwise cosine is about ``cosine`` (a shared direction with weight sqrt(cosine)),
    beta uniform in [beta_min, 1], alpha = e^g uniform in [alpha_min, 1] (alpha_min = 1: no decay)."""
    gen = torch.Generator().manual_seed(seed)
    shared = torch.nn.functional.normalize(torch.randn(B, 1, H, dk, generator=gen, device="cpu"), dim=-1)
    own = torch.nn.functional.normalize(torch.randn(B, T, H, dk, generator=gen, device="cpu"), dim=-1)
    k = torch.nn.functional.normalize(cosine**0.5 * shared + (1 - cosine) ** 0.5 * own, dim=-1)
    q = torch.randn(B, T, H, dk, generator=gen, device="cpu")
    v = torch.randn(B, T, H, dv, generator=gen, device="cpu")
    beta = beta_min + (1 - beta_min) * torch.rand(B, T, H, generator=gen, device="cpu")
    g = torch.log(alpha_min + (1 - alpha_min) * torch.rand(B, T, H, generator=gen, device="cpu"))
    return [x.to(DEVICE) for x in (q, k, v, g, beta)]


def _rel(x, ref):
    ref = ref.cpu().double()
    return float((x.cpu().double() - ref).abs().max() / ref.abs().max())


def _rel_each(x, ref):
    return float(((x.cpu().double() - ref).abs() / ref.abs()).max())


def _check_against_float64(inputs, S0, chunk, precision, **drift_kw):
    o, s, d = chunk_gated_delta_drift(*inputs, S0, chunk_size=chunk, precision=precision, **drift_kw)
    o64, s64, d64 = recurrent_gated_delta(
        *(x.cpu() for x in inputs),
        initial_state=None if S0 is None else S0.cpu(),
        chunk_size=chunk,
        dtype=torch.float64,
        **drift_kw,
    )
    errors = {"o": _rel(o, o64), "state": _rel(s, s64), "drift": _rel_each(d, d64)}
    assert max(errors.values()) <= RTOL[precision], errors
    return d64


def test_correlated_keys_are_what_the_builder_says():
    _, k, _, _, _ = _inputs(1, 200, 1, 64, 8, seed=0, cosine=0.8)
    gram = k[0, :, 0].cpu() @ k[0, :, 0].cpu().T
    assert gram[~torch.eye(200, dtype=torch.bool, device="cpu")].mean().item() == pytest.approx(0.8, abs=0.05)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("chunk", [16, 32, 64])
@pytest.mark.parametrize(
    "cosine,beta_min,alpha_min", [(0.5, 0.5, 0.95), (0.8, 0.5, 0.95), (0.5, 1.0, 1.0), (0.8, 1.0, 1.0)]
)
def test_correlated_keys_match_a_float64_recurrence(cosine, beta_min, alpha_min, chunk, precision):
    """Head size 64, 150 tokens (a short last chunk), from a zero state: the first chunk's drift is ||S'|| / eps.
    The inverse by repeated squaring this kernel replaced failed here from chunk 32 on (up to 1e15 at chunk 64)."""
    inputs = _inputs(1, 150, 1, 64, 64, seed=chunk, cosine=cosine, beta_min=beta_min, alpha_min=alpha_min)
    d64 = _check_against_float64(inputs, None, chunk, precision)
    assert d64[..., 0].min() > 1e5  # ||S'|| / 1e-6 from the zero state


@pytest.mark.parametrize("precision", PRECISIONS)
def test_a_fast_forgetting_head_next_to_a_slow_one_matches_a_float64_recurrence(precision):
    """Like the committed LM's heads (mean alpha ~0.03 next to ~0.998): the fast head mixes near-1 gates with gates
    near 0, so its cumulative log-decay over a chunk of 64 reaches about -100 while some exponents near the diagonal
    are about 0. Taken as differences of cumulative fp32 sums those exponents lost ~1e-5 (drift error 1.8e-6 here,
    6e-5 on the LM's activations); summed directly, 1.4e-7 here."""
    q, k, v, g, beta = _inputs(1, 150, 2, 64, 64, seed=11, cosine=0.5, beta_min=0.5, alpha_min=0.99)
    gen = torch.Generator().manual_seed(12)
    fast = torch.rand(1, 150, generator=gen, device="cpu") < 0.5
    g[..., 1] = torch.where(
        fast,
        torch.log(0.001 + 0.05 * torch.rand(1, 150, generator=gen, device="cpu")),
        torch.log(0.9 + 0.1 * torch.rand(1, 150, generator=gen, device="cpu")),
    ).to(DEVICE)
    S0 = (torch.randn(1, 2, 64, 64, generator=torch.Generator().manual_seed(13), device="cpu")).to(DEVICE)
    _check_against_float64([q, k, v, g, beta], S0, 64, precision)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("drift_source,drift_norm", [("write", "relative"), ("raw", "absolute"), ("write", "absolute")])
def test_drift_readings_from_an_initial_state_match_a_float64_recurrence(drift_source, drift_norm, precision):
    inputs = _inputs(2, 100, 2, 64, 48, seed=5, cosine=0.8, beta_min=0.5, alpha_min=0.95)
    S0 = (torch.randn(2, 2, 64, 48, generator=torch.Generator().manual_seed(7), device="cpu") * 0.3).to(DEVICE)
    _check_against_float64(inputs, S0, 64, precision, drift_source=drift_source, drift_norm=drift_norm)


@pytest.mark.parametrize(
    "T,dk,dv,chunk,block_v", [(37, 24, 40, 16, 64), (64, 16, 16, 32, 16), (19, 33, 7, 16, 16), (100, 32, 80, 64, 16)]
)
def test_odd_shapes_and_value_blocks_match_the_reference_and_a_float64_recurrence(T, dk, dv, chunk, block_v):
    q, k, v, g, beta = _inputs(2, T, 3, dk, dv, seed=T + dk)
    S0 = (torch.randn(2, 3, dk, dv, generator=torch.Generator().manual_seed(7), device="cpu") * 0.3).to(DEVICE)
    o, s, d = chunk_gated_delta_drift(q, k, v, g, beta, S0, chunk_size=chunk, block_v=block_v)
    o_ref, s_ref, d_ref = chunk_gated_delta_drift_reference(q, k, v, g, beta, S0, chunk_size=chunk)
    o64, s64, d64 = recurrent_gated_delta(
        *(x.cpu() for x in (q, k, v, g, beta)), initial_state=S0.cpu(), chunk_size=chunk, dtype=torch.float64
    )
    for got, ref, ref64 in ((o, o_ref, o64), (s, s_ref, s64)):
        assert _rel(got, ref64) <= IEEE_RTOL and _rel(ref, ref64) <= IEEE_RTOL
    assert _rel_each(d, d64) <= IEEE_RTOL and _rel_each(d_ref, d64) <= IEEE_RTOL


def test_kernel_without_drift_and_from_zero_state():
    q, k, v, g, beta = _inputs(1, 40, 2, 16, 16, seed=1)
    o, s, d = chunk_gated_delta_drift(q, k, v, g, beta, chunk_size=16, with_drift=False)
    o_ref, s_ref, _ = chunk_gated_delta_drift_reference(q, k, v, g, beta, chunk_size=16)
    assert d is None
    torch.testing.assert_close(o, o_ref.to(o), rtol=2e-4, atol=2e-4)
    torch.testing.assert_close(s, s_ref.to(s), rtol=2e-4, atol=2e-4)


def test_launcher_refuses_bad_options_and_state_shapes():
    q, k, v, g, beta = _inputs(1, 8, 1, 16, 16, seed=2)
    with pytest.raises(ValueError, match="power of two"):
        chunk_gated_delta_drift(q, k, v, g, beta, chunk_size=24)
    with pytest.raises(ValueError, match="initial_state"):
        chunk_gated_delta_drift(q, k, v, g, beta, torch.zeros(1, 1, 16, 8, device=DEVICE), chunk_size=16)
    with pytest.raises(ValueError, match="precision"):
        chunk_gated_delta_drift(q, k, v, g, beta, chunk_size=16, precision="bf16")
    with pytest.raises(ValueError, match="drift_source"):
        chunk_gated_delta_drift(q, k, v, g, beta, chunk_size=16, drift_source="gate")
    with pytest.raises(ValueError, match="block_v"):
        chunk_gated_delta_drift(q, k, v, g, beta, chunk_size=16, block_v=24)
