"""Data parallelism for real: two CPU processes (torchrun + gloo), gradients all-reduced.

(`accelerate launch --cpu` starts a single process; on CPUs accelerate's multi-process
mode is reached through torchrun with ACCELERATE_USE_CPU=1.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.slow
def test_two_processes_train_the_same_weights(tmp_path):
    from proctor.trainer.tiny_model import tiny_model_path

    tiny_model_path(pretrain_steps=0)   # build it once here, not in two processes at once
    script = Path(__file__).with_name("ddp_train_script.py")
    torchrun = Path(sys.executable).with_name("torchrun")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "1"}
    proc = subprocess.run([str(torchrun), "--nproc_per_node", "2", "--standalone", str(script), str(tmp_path)],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = (json.loads((tmp_path / f"checksum-{r}.json").read_text()) for r in (0, 1))
    assert a["start"] == b["start"]                 # same initial weights
    assert a["end"] != a["start"]                   # one step moved them
    assert a["end"] == pytest.approx(b["end"], rel=0, abs=1e-9)   # and identically on both ranks
    row = a["rows"][0]
    assert row["processes"] == 2 and row["tokens_generated"] > 0
