#!/usr/bin/env bash
# The main job, from a fresh machine: set-up (idempotent), then a sandboxed batch of
# right answers, wrong answers, reward hacks and attacks, each with its verdict.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_NUM_THREADS=1
.venv/bin/proctor sandbox demo "$@"
.venv/bin/proctor sandbox run examples/sandbox/two_sum.py --tests examples/sandbox/test_two_sum.py
