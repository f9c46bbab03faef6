#!/usr/bin/env bash
# The main job, from a fresh machine: set-up (idempotent), then GRPO on procedural
# arithmetic with the tiny offline model (built and cached on first use), on CPU.
# Writes runs/arithmetic-tiny/{metrics.jsonl,samples.jsonl,reward.png,signal.png,tokens.png,memory.png};
# reward.png: the train pass rate and the held-out eval pass rate, the console summary: first vs last eval.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_NUM_THREADS=1   # torch: two threads slow a step tenfold when another process takes a core
# The tiny model (3000 pretraining steps) is built on first use (about 6 minutes on 2 cores, with a
# progress bar), then cached.
# examples/train/arithmetic_tiny.yaml evaluates on held-out questions (eval.split) as it trains;
# arguments are passed on (a later --config, --max-steps, ... wins).
.venv/bin/proctor train --config examples/train/arithmetic_tiny.yaml "$@"
