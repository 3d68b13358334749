#!/usr/bin/env bash
# ActKV kernels on a CUDA GPU: the kernel tests (compiled Triton, not the interpreter) and the full-size benchmark.
# Installs nothing: uses the machine's python, torch and triton (tested on triton 3.6 and 3.9 APIs). If agentpost
# is not installed, it runs from a throw-away mirror of the checkout (symlinks) where kernels/ is agentpost.kernels.
# Writes under $OUT (default benchmarks/receipts): actkv_kernels_cuda.json (receipt), pytest.txt, bench.txt.
#   OUT=/some/dir bash benchmarks/gpu_actkv_kernels.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-benchmarks/receipts}"
PY="${PYTHON:-python}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
export AGENTPOST_TRITON_GPU=1   # tests/conftest.py then leaves TRITON_INTERPRET unset
unset TRITON_INTERPRET

if ! "$PY" -c "import agentpost.kernels.actkv" 2>/dev/null; then
  # not installed: run from a temporary mirror of the checkout whose agentpost/ also holds kernels/
  ROOT="$PWD"
  SHIM="$(mktemp -d)"
  for f in "$ROOT"/* "$ROOT"/.[!.]*; do
    [ -e "$f" ] && [ "$(basename "$f")" != agentpost ] && ln -s "$f" "$SHIM/"
  done
  mkdir "$SHIM/agentpost"
  for f in "$ROOT"/agentpost/*; do ln -s "$f" "$SHIM/agentpost/"; done
  ln -s "$ROOT/kernels" "$SHIM/agentpost/kernels"
  cd "$SHIM"
  export PYTHONPATH="$SHIM${PYTHONPATH:+:$PYTHONPATH}"
fi
"$PY" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')" | tee "$OUT/versions.txt"

status=0
if "$PY" -c "import pytest" 2>/dev/null; then
  "$PY" -m pytest -q -p no:cacheprovider tests/kernels 2>&1 | tee "$OUT/pytest.txt"
  status=${PIPESTATUS[0]}
else
  echo "pytest is not installed on this machine: kernel tests skipped" | tee "$OUT/pytest.txt"
fi
"$PY" benchmarks/actkv_kernels.py --sizes full --out "$OUT/actkv_kernels_cuda.json" 2>&1 | tee "$OUT/bench.txt"
bench=${PIPESTATUS[0]}
echo "tests exit $status, benchmark exit $bench"
exit $(( status != 0 || bench != 0 ))
