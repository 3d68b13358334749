#!/usr/bin/env bash
# DeltaS GPU check in one command: the kernel tests on the device (AGENTPOST_TRITON_GPU=1), then the drift-cost
# benchmark of the Triton kernel at long streams (bf16, CUDA events; ieee and tf32 dots; fla-core's
# chunk_gated_delta_rule alongside when the fla module is installed, e.g. from WHEELS). Offline; installs nothing
# from the network (benchmarks/gpu_env.sh). Writes $OUT/deltas_kernel_tests_gpu.txt and $OUT/deltas_kernel_gpu.json (the benchmark's
# receipt), else under benchmarks/receipts/.
source "$(dirname "$0")/gpu_env.sh"
gpu_require triton pytest
export AGENTPOST_TRITON_GPU=1
unset TRITON_INTERPRET
"$PY" -m pytest -q -p no:cacheprovider tests/kernels/test_kernels_deltas.py 2>&1 | tee "$OUT_DIR/deltas_kernel_tests_gpu.txt"
"$PY" benchmarks/deltas_kernel.py --device cuda --seq-lens 4096,16384,65536 --heads 16 --head-dim 128 \
  --dtype bfloat16 --precision ieee,tf32 --repeats 20 --receipt "$OUT_DIR/deltas_kernel_gpu.json"
