"""The precision policy of every Triton kernel test: how close a kernel's fp32 output must be to its torch reference,
chosen from the device the test runs on. One place; the kernel tests import :func:`tolerance`.

A kernel's arithmetic is one of three kinds, and each gets its tolerance (``assert_close``: |got - want| <=
atol + rtol |want|; atol is per unit of ``scale``, the size of values below which absolute error is what counts):

================================  ==========================================  =======  =======
arithmetic                        where                                       rtol     atol
================================  ==========================================  =======  =======
fp32, no ``tl.dot`` (ActKV)       any device                                  1e-5     1e-5
``tl.dot`` with fp32 inputs       CPU interpreter; CUDA before sm80;          2e-4     2e-4
                                  ``TRITON_F32_DEFAULT=ieee``
``tl.dot`` with tf32 inputs       CUDA sm80+ (Triton's default there)         4e-3     4e-3
================================  ==========================================  =======  =======

Derivations (u = unit roundoff):

* fp32 element-wise: u = 2^-24 = 6.0e-8; the kernels reduce at most ~128 terms in another order than torch (and a
  GPU's ``tl.exp`` is ``ex2.approx``, 2 ulp), a worst case of ~128 u = 7.6e-6 < 1e-5.
* ``tl.dot`` in fp32: the DeltaS chunk kernel chains dots (K K^T, log2(C) squarings for the triangular inverse, the
  state and output products: depth <= 2 log2(C) + 5, lengths <= 128); the largest error measured in the interpreter
  is 3.6e-7 (benchmarks/deltas_kernel.py's check), and 2e-4 leaves 500x for a GPU's accumulation order.
* ``tl.dot`` in tf32 (sm80+ rounds each fp32 input to 10 mantissa bits, u_tf32 = 2^-11 = 4.9e-4, and accumulates in
  fp32): measured on the CPU by emulating exactly that rounding in Triton's interpreter (:func:`emulate_tf32_dot`):
  the DeltaS kernel's largest error is 1.2e-3 on outputs and states of size up to 2, i.e. ~1.2 u_tf32 per unit;
  8 u_tf32 = 3.9e-3, rounded to 4e-3, is a 3x margin. ``test_kernel_precision.py`` checks both that the emulated
  tf32 kernel passes this tolerance and that it fails the fp32 one (so a GPU run needs the policy, not luck).
"""

from __future__ import annotations

import contextlib
import os

import torch

#: (rtol, atol per unit of scale) by arithmetic kind.
TOLERANCES = {"fp32-elementwise": (1e-5, 1e-5), "fp32-dot": (2e-4, 2e-4), "tf32-dot": (4e-3, 4e-3)}


def dot_precision(device: torch.device) -> str:
    """The input precision ``tl.dot`` uses for fp32 operands on ``device``: "tf32" on CUDA sm80+ (unless
    ``TRITON_F32_DEFAULT`` says "ieee"), else "ieee" (the interpreter multiplies in fp32 with numpy)."""
    device = torch.device(device)
    if device.type != "cuda" or torch.cuda.get_device_capability(device)[0] < 8:
        return "ieee"
    return "ieee" if os.environ.get("TRITON_F32_DEFAULT", "tf32").lower() == "ieee" else "tf32"


def tolerance(device: torch.device, *, uses_dot: bool, scale: float = 1.0, precision: str | None = None) -> dict:
    """``assert_close`` keyword arguments for a kernel on ``device`` (``precision`` overrides the device's)."""
    if not uses_dot:
        kind = "fp32-elementwise"
    else:
        kind = "tf32-dot" if (precision or dot_precision(device)) == "tf32" else "fp32-dot"
    rtol, atol = TOLERANCES[kind]
    return {"rtol": rtol, "atol": atol * scale}


@contextlib.contextmanager
def emulate_tf32_dot():
    """Inside, Triton's interpreter rounds fp32 ``tl.dot`` inputs to tf32 as sm80+ hardware does (10 mantissa bits,
    round to nearest; the interpreter's own rounding helper) where the dot's input precision is plain "tf32" (the
    default); accumulation stays fp32.
    Only for the interpreter (TRITON_INTERPRET=1)."""
    import numpy as np
    from triton.runtime import interpreter

    original = interpreter.InterpreterBuilder.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        if a.data.dtype == np.float32 and b.data.dtype == np.float32 and str(input_precision).endswith(".TF32"):
            a = interpreter.TensorHandle(interpreter._round_f32_to_tf32(a.data), a.dtype.scalar)
            b = interpreter.TensorHandle(interpreter._round_f32_to_tf32(b.data), b.dtype.scalar)
        return original(self, a, b, d, input_precision, max_num_imprecise_acc)

    interpreter.InterpreterBuilder.create_dot = create_dot
    try:
        yield
    finally:
        interpreter.InterpreterBuilder.create_dot = original
