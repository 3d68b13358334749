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
* ``tl.dot`` in fp32 / tf32: for a kernel that leaves ``tl.dot`` at the device's default input precision
  (fp32 in the interpreter, tf32 on sm80+: unit roundoff 2^-11 = 4.9e-4 per input, fp32 accumulation), 2e-4 leaves
  ~500x over the interpreter's measured dot error and 4e-3 = 8 u_tf32. The DeltaS chunk kernel does not rely on the
  default: it passes its ``precision`` ("ieee" unless asked for "tf32") to every ``tl.dot``, and its own bounds
  (``IEEE_RTOL``, ``TF32_RTOL`` in kernels/deltas/chunk_delta.py, derived there from correlated-key cases and an
  interpreter emulation of tf32 truncation) are tested in tests/kernels/test_kernels_deltas.py.
"""

from __future__ import annotations

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
