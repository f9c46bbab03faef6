"""Resuming a 2-process run (torchrun on CPU, gloo): each process continues its own prompt
stream. Each process has its own RNGs and pass-rate memory, saved in its own file; a
resume that gave every process rank 0's state would make rank 1 draw rank 0's prompts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch


def launch(mode: str, out: Path, *extra: str, timeout: int = 400) -> None:
    """tests/multiprocess_script.py MODE OUT [EXTRA...] on 2 CPU processes."""
    from proctor.tiny_model import tiny_model_path

    tiny_model_path(pretrain_steps=0)   # build it once here, not in two processes at once
    script = Path(__file__).with_name("multiprocess_script.py")
    torchrun = Path(sys.executable).with_name("torchrun")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "1"}
    for key in ("ACCELERATE_USE_FSDP", "FSDP_VERSION"):   # the script turns FSDP on itself where it wants it
        env.pop(key, None)
    proc = subprocess.run([str(torchrun), "--nproc_per_node", "2", "--standalone", str(script), mode, str(out), *extra],
                          capture_output=True, text=True, timeout=timeout, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]


def drawn(out: Path, name: str, rank: int) -> dict:
    return json.loads((out / f"{name}-drawn-{rank}.json").read_text())


def weights(out: Path, name: str, rank: int) -> dict[str, torch.Tensor]:
    return torch.load(out / f"{name}-weights-{rank}.pt")


@pytest.mark.slow
def test_two_process_resume_draws_and_trains_as_without_interruption(tmp_path):
    launch("resume", tmp_path)
    for rank in (0, 1):
        straight, first, resumed = (drawn(tmp_path, n, rank) for n in ("straight", "first", "resumed"))
        assert len(straight["drawn"]) == 3 and len(first["drawn"]) == 2 and len(resumed["drawn"]) == 1
        # Steps 1-2 then the resumed step 3 draw exactly the uninterrupted run's prompts, on each rank.
        assert first["drawn"] + resumed["drawn"] == straight["drawn"], rank
        # The memory came back too: its skip count continues (and skipping did happen in this run).
        assert resumed["skipped"] == straight["skipped"]
    for rank in (0, 1):   # and so the weights, after the update from both ranks' batches
        a, b = weights(tmp_path, "straight", rank), weights(tmp_path, "resumed", rank)
        assert a.keys() == b.keys()
        for name in a:
            assert torch.equal(a[name], b[name]), (rank, name)
    assert drawn(tmp_path, "straight", 0)["skipped"] + drawn(tmp_path, "straight", 1)["skipped"] > 0
    # The two processes draw different prompts (their own streams), at the resumed step too.
    assert drawn(tmp_path, "straight", 0)["drawn"] != drawn(tmp_path, "straight", 1)["drawn"]
    assert drawn(tmp_path, "resumed", 0)["drawn"] != drawn(tmp_path, "resumed", 1)["drawn"]
    # Each process's state is its own file in the checkpoint.
    step2 = tmp_path / "split" / "checkpoints" / "step-2"
    assert (step2 / "proctor_state.json").exists() and (step2 / "proctor_state.rank1.json").exists()
    assert not list(step2.glob("proctor_state*.pkl"))
