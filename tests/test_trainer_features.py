"""Trainer features beyond the core loop: the infra guard, checkpoint retention, learning-rate
schedules, TRL's batch semantics, dynamic-sampling accounting, reward functions."""

from __future__ import annotations

import math
import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch = pytest.importorskip("torch")

from test_grpo_trainer import DigitShare, fresh_accelerator_state, tiny, trainer_for  # noqa: E402,F401

from proctor.envs import Verdict, Verifier  # noqa: E402


class MostlyUnjudged(DigitShare):
    """The sandbox is down for 3 of every 4 completions."""

    def __init__(self) -> None:
        self.calls = 0

    def verify(self, task, completion):
        self.calls += 1
        if self.calls % 4:
            return Verdict.infra("engine unreachable (simulated)")
        return super().verify(task, completion)


def test_a_step_mostly_not_judged_is_not_taken_and_the_run_stops(tiny, tmp_path):
    trainer = trainer_for(tiny, tmp_path, MostlyUnjudged(), max_steps=6, max_infra_frac=0.5, max_infra_steps=2)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    with pytest.raises(RuntimeError, match=r"2 steps in a row had more than 50% .* not judged") as info:
        trainer.train()
    assert "checkpoint" in str(info.value) and "engine unreachable" not in str(info.value)
    for name, p in trainer.model.named_parameters():   # no update on a batch the machinery could not judge
        assert torch.equal(p, before[name]), name
    rows = trainer.parts.log.rows
    assert [r["skipped_infra"] for r in rows] == [1]   # the stopping step raises before it is logged
    assert rows[0]["loss"] is None                      # NaN: no loss was computed
    assert list((tmp_path / "run" / "checkpoints").iterdir())


def test_a_few_unjudged_completions_still_train(tiny, tmp_path):
    trainer = trainer_for(tiny, tmp_path, MostlyUnjudged(), max_steps=1, max_infra_frac=0.8)
    row = trainer.step(1)
    assert row["skipped_infra"] == 0 and row["infra_dropped"] > 0 and math.isfinite(row["loss"])
