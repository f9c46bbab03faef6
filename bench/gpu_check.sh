#!/usr/bin/env bash
# The device run of bench/gpu_check.py on a lent GPU machine (no network there): say what
# its Python has, put this checkout on the path, run the check, write results under $OUT.
set -u
OUT="${OUT:-/tmp/proctor-gpu-check}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
nvidia-smi --query-gpu=name,memory.total,memory.used --format=csv 2>&1 | tee "$OUT/nvidia-smi.txt"
"$PY" - <<'PYEOF' 2>&1 | tee "$OUT/imports.txt"
import importlib
for name in ("torch", "vllm", "transformers", "accelerate", "peft", "pydantic", "typer", "rich", "gymnasium",
             "safetensors", "tokenizers", "docker", "math_verify", "datasets", "matplotlib", "yaml"):
    try:
        m = importlib.import_module(name)
        print(f"{name:14s} {getattr(m, '__version__', '?')}")
    except Exception as exc:  # what is missing is the finding
        print(f"{name:14s} MISSING ({type(exc).__name__}: {str(exc)[:120]})")
PYEOF
# The checkout's folders as the proctor namespace, without installing (no index to install from).
"$PY" -m pip install --no-deps --no-build-isolation -e . >"$OUT/pip.txt" 2>&1 || echo "pip install -e . failed: see pip.txt"
OMP_NUM_THREADS=4 timeout "${CHECK_TIMEOUT:-420}" "$PY" bench/gpu_check.py --out "$OUT" --steps "${STEPS:-4}" 2>&1 | tail -60
