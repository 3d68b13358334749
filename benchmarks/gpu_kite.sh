#!/usr/bin/env bash
# KITE GPU check in one command: the latency benchmark at the a100 profile's settings (width 1024, prompts 8K-32K,
# bf16, CUDA-event timing). Offline; installs nothing from the network (benchmarks/gpu_env.sh). Writes the receipt
# to $OUT/kite_latency_gpu.json and the table to $OUT/kite_latency_gpu.txt, else under benchmarks/receipts/.
source "$(dirname "$0")/gpu_env.sh"
gpu_require numpy pandas yaml
"$PY" benchmarks/kite_latency.py --profile a100 --receipt "$OUT_DIR/kite_latency_gpu.json" 2>&1 | tee "$OUT_DIR/kite_latency_gpu.txt"
