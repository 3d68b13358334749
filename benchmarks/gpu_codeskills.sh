#!/usr/bin/env bash
# GPU check of the code-skills chapter (issue 16): the a100 profile - the project's small LM fine-tuned in the
# notebook on scripted-controller traces, then played as the LM controller on Room-15x15, Corridor-R3 and
# Quest-Easy through all three interfaces (33 episodes per arm), next to the CPU arms - three seeds in parallel,
# receipts validated. Longer than 10 minutes (the profile allows 3 h per seed). Offline; installs nothing from the
# network (benchmarks/gpu_env.sh; minihack and nle must be there already, or their wheels in WHEELS). Runs land in
# book/runs/codeskills/a100/; the log and a tarball of the runs go to $OUT (else benchmarks/receipts/).
source "$(dirname "$0")/gpu_env.sh"
gpu_require papermill scrapbook minihack nle transformers
status=0
"$PY" -m agentpost run codeskills --profile a100 --seeds 42,43,44 --jobs 3 2>&1 | tee "$OUT_DIR/codeskills_a100.log" || status=1
"$PY" -m agentpost validate book/runs/codeskills/a100 2>&1 | tee -a "$OUT_DIR/codeskills_a100.log" || status=1
[ -d book/runs/codeskills/a100 ] && tar -czf "$OUT_DIR/codeskills-a100-runs.tar.gz" book/runs/codeskills/a100
exit $status
