#!/usr/bin/env bash
# KITE GPU check in one command: the latency benchmark at the a100 profile's settings (width 1024, prompts 8K-32K,
# bf16, CUDA-event timing). Installs nothing: needs python3 with a CUDA build of torch, numpy, pandas and pyyaml.
# Writes the receipt to $OUT/kite_latency_gpu.json (the device tool's output folder), else benchmarks/receipts/.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT_DIR=${OUT:-benchmarks/receipts}
mkdir -p "$OUT_DIR"
"$PY" - <<'PYEOF'
import importlib.util, sys
missing = [m for m in ("torch", "numpy", "pandas", "yaml") if importlib.util.find_spec(m) is None]
if missing:
    sys.exit(f"gpu_kite.sh: missing python packages {missing}; this script installs nothing")
import torch
if not torch.cuda.is_available():
    sys.exit("gpu_kite.sh: torch sees no CUDA device")
print("torch", torch.__version__, "cuda", torch.version.cuda, "device", torch.cuda.get_device_name(0))
PYEOF
"$PY" benchmarks/kite_latency.py --profile a100 --receipt "$OUT_DIR/kite_latency_gpu.json"
