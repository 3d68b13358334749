#!/usr/bin/env bash
# Every chapter's offline `a100` profile, three seeds each, in one command on a CUDA machine (no network needed:
# the profiles use the project's own models and ../shared/data or $AGENTPOST_DATA). Installs nothing: needs this
# repository installed (`pip install -e .`) with a CUDA build of torch. Runs land in book/runs/<chapter>/a100/ as
# usual; they are also packed into $OUT/a100-runs.tar.gz (the device tool's output folder, else
# benchmarks/receipts/) with the log. Afterwards, on the machine that commits:
#   tar -xzf a100-runs.tar.gz && agentpost validate book/runs/*/a100 && git add book/runs/*/a100
# CHAPTERS="kite deltas" limits the list; BUDGET_S (default 540) stops starting new chapters once it is spent.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT_DIR=${OUT:-benchmarks/receipts}
BUDGET_S=${BUDGET_S:-540}
mkdir -p "$OUT_DIR"
"$PY" -c "import torch, sys; torch.cuda.is_available() or sys.exit('gpu_profiles.sh: torch sees no CUDA device'); print('device', torch.cuda.get_device_name(0), 'torch', torch.__version__)" || exit 2
chapters=${CHAPTERS:-$(ls params/*/a100.yaml | cut -d/ -f2 | sort)}
start=$(date +%s)
status=0
for ch in $chapters; do
  if [ $(( $(date +%s) - start )) -ge "$BUDGET_S" ]; then
    echo "gpu_profiles.sh: budget of ${BUDGET_S}s spent; not started: $ch" | tee -a "$OUT_DIR/gpu_profiles.log"
    status=1
    continue
  fi
  echo "== $ch (a100, seeds 42,43,44)" | tee -a "$OUT_DIR/gpu_profiles.log"
  "$PY" -m agentpost.cli run "$ch" --profile a100 --seeds 42,43,44 --jobs 1 2>&1 | tee -a "$OUT_DIR/gpu_profiles.log" || status=1
done
"$PY" -m agentpost.cli validate book/runs/*/a100 2>&1 | tee -a "$OUT_DIR/gpu_profiles.log" || status=1
tar -czf "$OUT_DIR/a100-runs.tar.gz" book/runs/*/a100 2>/dev/null || echo "gpu_profiles.sh: no a100 runs to pack"
exit $status
