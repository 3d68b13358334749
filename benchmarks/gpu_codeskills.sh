#!/usr/bin/env bash
# GPU check of the code-skills chapter (issue 16): the a100 profile - the project's small LM fine-tuned in the
# notebook on scripted-controller traces, then played as the LM controller on Room-15x15, Corridor-R3 and
# Quest-Easy through all three interfaces (33 episodes per arm), next to the CPU arms - three seeds, receipts
# validated. Needs the `minihack` extra installed (make .venv/.installed-stamp does it).
set -euo pipefail
cd "$(dirname "$0")/.."
make .venv/.installed-stamp
.venv/bin/agentpost run codeskills --profile a100 --seeds 42,43,44
.venv/bin/agentpost validate book/runs/codeskills/a100
