#!/usr/bin/env bash
# The one command for a lent GPU machine (no network): given a budget in seconds, it runs what yields the most
# evidence per minute and stops cleanly at the budget, leaving every receipt, log and packed run under $OUT
# (else benchmarks/receipts/). The plan, its order and the predicted minutes are in benchmarks/gpu_predictions.yaml;
# the logic is agentpost/run/gpu_plan.py (tested, and rehearsed on the CPU by tests/e2e/test_gpu_all.py).
#   benchmarks/gpu_all.sh --budget-s 570                 # on the GPU machine
#   benchmarks/gpu_all.sh --list                         # the predicted-minutes table
#   benchmarks/gpu_all.sh --dry-run-cpu --only kernel-tests profile-paired-protocol   # CPU rehearsal
# This wrapper only makes `agentpost` importable offline: where it is not installed, this checkout is installed in
# editable mode with --no-index --no-deps --no-build-isolation (only the local folder is read); WHEELS=<folder of
# .whl files> first installs packages from that folder, offline. PYTHON picks the interpreter (default python3).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
if [ -n "${WHEELS:-}" ]; then
  "$PY" -m pip install -q --no-index --find-links "$WHEELS" "$WHEELS"/*.whl
fi
if ! "$PY" -c "import agentpost.run.gpu_plan" 2>/dev/null; then
  echo "gpu_all.sh: agentpost is not importable: installing this checkout (editable, offline)"
  "$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e . \
    || { echo "gpu_all.sh: cannot install this checkout offline (needs setuptools>=69 and wheel)" >&2; exit 2; }
fi
exec "$PY" -m agentpost.run.gpu_plan "$@"
