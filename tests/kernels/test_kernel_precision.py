"""The precision policy (tests/kernels/_precision.py): tolerances follow the arithmetic and the device."""

import pytest
import torch

from tests.kernels._precision import TOLERANCES, dot_precision, tolerance

CPU = torch.device("cpu")


def test_tolerances_follow_the_arithmetic_and_the_device():
    assert dot_precision(CPU) == "ieee"  # the interpreter multiplies in fp32
    assert tolerance(CPU, uses_dot=True) == {"rtol": 2e-4, "atol": 2e-4}
    assert tolerance(CPU, uses_dot=True, precision="tf32", scale=0.5) == {"rtol": 4e-3, "atol": 2e-3}
    assert tolerance(CPU, uses_dot=False, precision="tf32") == {"rtol": 1e-5, "atol": 1e-5}  # no tl.dot, no tf32
    u_fp32, u_tf32 = 2.0**-24, 2.0**-11
    assert TOLERANCES["fp32-elementwise"][1] >= 128 * u_fp32  # a 128-term reduction in another order
    assert TOLERANCES["tf32-dot"][1] == pytest.approx(8 * u_tf32, rel=0.05)
