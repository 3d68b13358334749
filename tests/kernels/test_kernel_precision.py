"""The precision policy (tests/kernels/_precision.py) holds: its tolerances are selected from the device, and its tf32
figure is what tf32 arithmetic needs - the DeltaS kernel with its tl.dot inputs rounded to tf32 as on sm80+ (emulated in
the interpreter) stays within the tf32 tolerance and leaves the fp32 one."""

import os

import pytest
import torch

from agentpost.kernels.deltas import chunk_gated_delta_drift, chunk_gated_delta_drift_reference
from tests.kernels._precision import TOLERANCES, dot_precision, emulate_tf32_dot, tolerance
from tests.kernels.test_kernels_deltas import CASES, _inputs

CPU = torch.device("cpu")
#: The emulation patches Triton's interpreter; on a GPU (AGENTPOST_TRITON_GPU=1) the kernel tests meet real tf32.
interpreter_only = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                      reason="emulates sm80 tf32 rounding inside Triton's interpreter")


def test_tolerances_follow_the_arithmetic_and_the_device():
    assert dot_precision(CPU) == "ieee"  # the interpreter multiplies in fp32
    assert tolerance(CPU, uses_dot=True) == {"rtol": 2e-4, "atol": 2e-4}
    assert tolerance(CPU, uses_dot=True, precision="tf32", scale=0.5) == {"rtol": 4e-3, "atol": 2e-3}
    assert tolerance(CPU, uses_dot=False, precision="tf32") == {"rtol": 1e-5, "atol": 1e-5}  # no tl.dot, no tf32
    u_fp32, u_tf32 = 2.0 ** -24, 2.0 ** -11
    assert TOLERANCES["fp32-elementwise"][1] >= 128 * u_fp32  # a 128-term reduction in another order
    assert TOLERANCES["tf32-dot"][1] == pytest.approx(8 * u_tf32, rel=0.05)


def _errors(T, dk, dv, chunk):
    q, k, v, g, beta = _inputs(2, T, 3, dk, dv, seed=T + dk)
    S0 = torch.randn(2, 3, dk, dv, generator=torch.Generator().manual_seed(7)) * 0.3
    got = chunk_gated_delta_drift(q, k, v, g, beta, S0, chunk_size=chunk)
    want = chunk_gated_delta_drift_reference(q, k, v, g, beta, S0, chunk_size=chunk)
    return got, want


def _close(got, want, tol) -> bool:
    try:
        torch.testing.assert_close(got, want.to(got), **tol)
        return True
    except AssertionError:
        return False


@interpreter_only
@pytest.mark.parametrize("T,dk,dv,chunk", CASES)
def test_emulated_tf32_kernel_fits_the_tf32_tolerance(T, dk, dv, chunk):
    with emulate_tf32_dot():
        (o, s, d), (o_ref, s_ref, d_ref) = _errors(T, dk, dv, chunk)
    tf32 = tolerance(CPU, uses_dot=True, precision="tf32")
    torch.testing.assert_close(o, o_ref.to(o), **tf32)
    torch.testing.assert_close(s, s_ref.to(s), **tf32)
    torch.testing.assert_close(d, d_ref.to(d), **tolerance(CPU, uses_dot=True, precision="tf32", scale=0.05))


@interpreter_only
def test_emulated_tf32_errors_exceed_the_fp32_tolerance():
    """Without the policy a GPU run would fail: tf32's error is ~1e-3, above the fp32 tolerance in every case."""
    fp32 = tolerance(CPU, uses_dot=True, precision="ieee")
    with emulate_tf32_dot():
        failed = [c for c in CASES if not _close(*(x[0] for x in _errors(*c)), fp32)]
    assert failed == CASES
    (o, *_), (o_ref, *_) = _errors(*CASES[0])  # outside the emulation: fp32 again, within the fp32 tolerance
    assert _close(o, o_ref, fp32)
