#!/usr/bin/env bash
# The one command for a lent GPU machine (no network): given a budget in seconds, it runs what yields the most
# evidence per minute and stops cleanly at the budget, leaving every receipt, log and packed run under $OUT
# (else benchmarks/receipts/). The plan, its order and the predicted minutes are in benchmarks/gpu_predictions.yaml;
# the logic is agentpost/run/gpu_plan.py (tested, and rehearsed on the CPU by tests/e2e/test_gpu_all.py).
#   benchmarks/gpu_all.sh --budget-s 570                 # on the GPU machine
#   benchmarks/gpu_all.sh --list                         # the predicted-minutes table
#   benchmarks/gpu_all.sh --dry-run-cpu --only kernel-tests profile-paired-protocol   # CPU rehearsal
# This wrapper only prepares the environment, offline: this checkout goes on PYTHONPATH (nothing is installed; the
# plan imports only the standard library, PyYAML and agentpost's project helpers, so it starts on a bare image);
# WHEELS=<folder of .whl files> installs packages from that folder (--no-index) into /tmp/site first; a data folder
# carried as .gpu-data/ (cp -r ../shared/data .gpu-data) becomes AGENTPOST_DATA unless that is set. PYTHON picks the
# interpreter (default: .venv/bin/python where it exists, else python3).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; fi
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
if [ -n "${WHEELS:-}" ]; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$WHEELS"/*.whl
  export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
if [ -z "${AGENTPOST_DATA:-}" ] && [ -d .gpu-data ]; then export AGENTPOST_DATA="$PWD/.gpu-data"; fi
exec "$PY" -m agentpost.run.gpu_plan "$@"
