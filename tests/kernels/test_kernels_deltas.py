"""Triton chunked gated-delta forward with drift vs its torch reference and the recurrent form (TRITON_INTERPRET)."""

import os

import pytest
import torch

from agentpost.deltas.rule import recurrent_gated_delta
from agentpost.kernels.deltas import chunk_gated_delta_drift, chunk_gated_delta_drift_reference
from tests.kernels._precision import tolerance

# AGENTPOST_TRITON_GPU=1 runs the same tests on the GPU (benchmarks/gpu_all.sh, item kernel-tests).
DEVICE = torch.device("cuda" if os.environ.get("AGENTPOST_TRITON_GPU") == "1" and torch.cuda.is_available() else "cpu")
# The kernel multiplies with tl.dot: fp32 in the interpreter, tf32 on sm80+ (tests/kernels/_precision.py). The drift
# is compared at 1/20 of the outputs' absolute scale (its fp32 bound was 1e-5 absolute).
TOL = tolerance(DEVICE, uses_dot=True)
TOL_DRIFT = tolerance(DEVICE, uses_dot=True, scale=0.05)


def _inputs(B, T, H, dk, dv, seed):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, dk, generator=gen)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, dk, generator=gen), dim=-1)
    v = torch.randn(B, T, H, dv, generator=gen)
    g = -torch.rand(B, T, H, generator=gen) * 0.2
    beta = torch.rand(B, T, H, generator=gen)
    return [x.to(DEVICE) for x in (q, k, v, g, beta)]


CASES = [(37, 24, 40, 16), (64, 16, 16, 32), (19, 33, 7, 16), (100, 32, 64, 64)]


@pytest.mark.parametrize("T,dk,dv,chunk", CASES)
def test_kernel_matches_reference_and_recurrent(T, dk, dv, chunk):
    q, k, v, g, beta = _inputs(2, T, 3, dk, dv, seed=T + dk)
    S0 = (torch.randn(2, 3, dk, dv, generator=torch.Generator().manual_seed(7)) * 0.3).to(DEVICE)
    o, s, d = chunk_gated_delta_drift(q, k, v, g, beta, S0, chunk_size=chunk)
    o_ref, s_ref, d_ref = chunk_gated_delta_drift_reference(q, k, v, g, beta, S0, chunk_size=chunk)
    torch.testing.assert_close(o, o_ref.to(o), **TOL)
    torch.testing.assert_close(s, s_ref.to(s), **TOL)
    torch.testing.assert_close(d, d_ref.to(d), **TOL_DRIFT)
    o_rec, _, d_rec = recurrent_gated_delta(*(x.cpu() for x in (q, k, v, g, beta)), initial_state=S0.cpu(),
                                            chunk_size=chunk)
    torch.testing.assert_close(o.cpu(), o_rec, **TOL)
    torch.testing.assert_close(d.cpu(), d_rec, **TOL_DRIFT)


def test_kernel_without_drift_and_from_zero_state():
    q, k, v, g, beta = _inputs(1, 40, 2, 16, 16, seed=1)
    o, s, d = chunk_gated_delta_drift(q, k, v, g, beta, chunk_size=16, with_drift=False)
    o_ref, s_ref, _ = chunk_gated_delta_drift_reference(q, k, v, g, beta, chunk_size=16)
    assert d is None
    torch.testing.assert_close(o, o_ref.to(o), **TOL)
    torch.testing.assert_close(s, s_ref.to(s), **TOL)
    _, _, d_abs = chunk_gated_delta_drift(q, k, v, g, beta, chunk_size=16, drift_norm="absolute")
    _, _, d_abs_ref = chunk_gated_delta_drift_reference(q, k, v, g, beta, chunk_size=16, drift_norm="absolute")
    torch.testing.assert_close(d_abs, d_abs_ref.to(d_abs), **TOL_DRIFT)


def test_launcher_refuses_bad_chunk_and_state_shapes():
    q, k, v, g, beta = _inputs(1, 8, 1, 16, 16, seed=2)
    with pytest.raises(ValueError, match="power of two"):
        chunk_gated_delta_drift(q, k, v, g, beta, chunk_size=24)
    with pytest.raises(ValueError, match="initial_state"):
        chunk_gated_delta_drift(q, k, v, g, beta, torch.zeros(1, 1, 16, 8, device=DEVICE), chunk_size=16)
