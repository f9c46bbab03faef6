#!/usr/bin/env bash
# The main job, from a fresh machine: set-up (idempotent), then GRPO on procedural
# arithmetic with the tiny offline model (built and cached on first use), on CPU.
# Writes runs/arithmetic-tiny/{metrics.jsonl,samples.jsonl,reward.png,signal.png,tokens.png,memory.png}.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_NUM_THREADS=1   # torch: two threads slow a step tenfold when another process takes a core
# With no --config, `proctor train` runs its embedded default (the same as examples/train/arithmetic_tiny.yaml).
.venv/bin/proctor train "$@"
