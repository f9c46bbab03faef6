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
    from proctor.tiny_model import tiny_model_path

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


@pytest.mark.slow
def test_two_processes_share_one_server_and_only_one_pushes(tmp_path):
    pytest.importorskip("vllm", reason="vLLM is not importable here")
    from proctor.trainer.serve import EngineClient
    from proctor.trainer.serve.launch import ManagedServer
    from proctor.tiny_model import tiny_model_path

    path = tiny_model_path(pretrain_steps=0)
    server = ManagedServer(str(path), tmp_path / "serve.log", extra_args=["--dtype", "float32", "--max-model-len", "256"])
    try:
        script = Path(__file__).with_name("ddp_train_script.py")
        torchrun = Path(sys.executable).with_name("torchrun")
        env = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "1"}
        proc = subprocess.run([str(torchrun), "--nproc_per_node", "2", "--standalone", str(script), str(tmp_path),
                               server.url], capture_output=True, text=True, timeout=400, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        a, b = (json.loads((tmp_path / f"checksum-{r}.json").read_text()) for r in (0, 1))
        assert a["end"] == pytest.approx(b["end"], rel=0, abs=1e-9) and a["end"] != a["start"]
        # Both ranks sampled from versions 1 and 2; the server got one push per sync, not two.
        assert [r["weight_version"] for r in a["rows"]] == [1, 2]
        health = EngineClient(server.url).health()
        assert health["weight_version"] == 2 and health["updates"] == 3   # the start + 2 syncs, from rank 0 only
    finally:
        server.close()
