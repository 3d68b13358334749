#!/usr/bin/env bash
# The DeltaS GPU checks in one command: the kernel benchmark (the drift kernel against itself without drift
# and against fla-core's chunk_gated_delta_rule, plus drift's share of a hybrid LM's streaming forward) and the
# copy-curriculum hybrid LM; the `a100` profile after them if the budget allows. Predictions and bases:
# benchmarks/gpu_predictions.yaml; everything else (budget, wheels, --dry-run-cpu) as benchmarks/gpu_all.sh.
#   benchmarks/gpu_deltas.sh --budget-s 525
#   benchmarks/gpu_deltas.sh --dry-run-cpu            # CPU rehearsal
exec bash "$(dirname "$0")/gpu_all.sh" --only bench-deltas-kernel train-deltas-hybrid profile-deltas "$@"
