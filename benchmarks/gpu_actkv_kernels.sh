#!/usr/bin/env bash
# ActKV kernels on a CUDA GPU: the kernel tests (compiled Triton, not the interpreter) and the full-size benchmark.
# Offline; installs nothing from the network (benchmarks/gpu_env.sh). Writes under $OUT (default
# benchmarks/receipts): actkv_kernels_cuda.json (the benchmark's receipt), pytest.txt, bench.txt.
#   OUT=/some/dir bash benchmarks/gpu_actkv_kernels.sh
source "$(dirname "$0")/gpu_env.sh"
gpu_require triton pytest
export AGENTPOST_TRITON_GPU=1   # tests/conftest.py then leaves TRITON_INTERPRET unset
unset TRITON_INTERPRET

status=0
"$PY" -m pytest -q -p no:cacheprovider tests/kernels/test_kernels_actkv_compaction.py \
  tests/kernels/test_kernels_actkv_compaction_props.py tests/kernels/test_kernels_actkv_paged.py \
  tests/kernels/test_kernels_actkv_recovery.py 2>&1 | tee "$OUT_DIR/pytest.txt" || status=1
bench=0
"$PY" benchmarks/actkv_kernels.py --sizes full --out "$OUT_DIR/actkv_kernels_cuda.json" 2>&1 | tee "$OUT_DIR/bench.txt" || bench=1
echo "kernel tests $([ $status = 0 ] && echo passed || echo FAILED), benchmark $([ $bench = 0 ] && echo done || echo FAILED)"
exit $(( status || bench ))
