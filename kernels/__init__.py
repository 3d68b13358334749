"""Triton kernels, one folder per paper; imported as `agentpost.kernels.<paper>`.

Each op file holds the `@triton.jit` kernel, its host launcher and a pure-torch reference with the same
signature. Set `TRITON_INTERPRET=1` before importing to run the kernels on the CPU.
"""
