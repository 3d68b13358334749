# Sourced by the benchmarks/gpu_*.sh scripts (not run on its own): the one place that prepares a GPU machine that
# has no network. It installs nothing from the network. It sets
#   PY       the python that holds a CUDA build of torch ($PYTHON, else python3)
#   OUT_DIR  where receipts and logs go: $OUT (the device tool's output folder), else benchmarks/receipts
# checks that torch sees a CUDA device, and makes `agentpost` importable: where it is not installed yet, this
# checkout is installed in editable mode with --no-index --no-deps --no-build-isolation (offline: only the local
# folder is read). WHEELS=<folder of .whl files> first installs missing packages from that folder, offline.
# gpu_require MOD... exits 2 naming every module that is missing, before any work.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
OUT_DIR=${OUT:-benchmarks/receipts}
mkdir -p "$OUT_DIR"
OUT_DIR=$(cd "$OUT_DIR" && pwd)

"$PY" -c "import torch, sys; torch.cuda.is_available() or sys.exit('torch sees no CUDA device'); print('device', torch.cuda.get_device_name(0), '| torch', torch.__version__, '| cuda', torch.version.cuda)" \
  || { echo "$(basename "$0"): needs a CUDA machine with torch (PYTHON=$PY)" >&2; exit 2; }

if [ -n "${WHEELS:-}" ]; then
  "$PY" -m pip install -q --no-index --find-links "$WHEELS" "$WHEELS"/*.whl
fi
if ! "$PY" -c "import agentpost.kernels" 2>/dev/null; then
  echo "agentpost is not importable: installing this checkout (editable, offline)"
  "$PY" -m pip install -q --no-index --no-deps --no-build-isolation -e . \
    || { echo "$(basename "$0"): cannot install this checkout offline (needs setuptools>=69 and wheel)" >&2; exit 2; }
fi

gpu_require() {
  "$PY" - "$@" <<'PYEOF'
import importlib.util, sys
missing = [m for m in sys.argv[1:] if importlib.util.find_spec(m) is None]
if missing:
    print(f"missing python packages {missing}: these scripts install nothing from the network; carry their wheels "
          f"and pass WHEELS=<folder> (README, 'Running a GPU profile')", file=sys.stderr)
    sys.exit(2)
PYEOF
}
