#!/usr/bin/env bash
# DeltaS GPU check in one command: the kernel tests on the device (AGENTPOST_TRITON_GPU=1), then the drift-cost
# benchmark of the Triton kernel at long streams (bf16, CUDA events). Installs nothing: needs python3 with a CUDA
# build of torch, triton, pytest and this repository's package importable. Writes $OUT/deltas_kernel_gpu.json
# (the device tool's output folder), else benchmarks/receipts/.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT_DIR=${OUT:-benchmarks/receipts}
mkdir -p "$OUT_DIR"
"$PY" -c "import torch, sys; torch.cuda.is_available() or sys.exit('gpu_deltas.sh: torch sees no CUDA device'); print('device', torch.cuda.get_device_name(0))"
AGENTPOST_TRITON_GPU=1 "$PY" -m pytest -q -p no:cacheprovider tests/kernels/test_kernels_deltas.py | tee "$OUT_DIR/deltas_kernel_tests_gpu.txt"
"$PY" benchmarks/deltas_kernel.py --device cuda --seq-lens 4096,16384,65536 --heads 16 --head-dim 128 \
  --dtype bfloat16 --repeats 20 --receipt "$OUT_DIR/deltas_kernel_gpu.json"
