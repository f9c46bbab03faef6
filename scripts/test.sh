#!/usr/bin/env bash
# The whole test suite, from a fresh machine: set-up first (idempotent), then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OMP_NUM_THREADS=1   # torch: two threads slow a step tenfold when another process takes a core
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
if [ "$rc" = 5 ]; then
  echo "no tests were collected: that is a failure, not a pass" >&2
  exit 1
fi
exit "$rc"
