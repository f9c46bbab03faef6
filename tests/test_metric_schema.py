"""Every metric a run writes is declared once (trainer/metric_schema.py) with its unit and
reduction, and a row gathered from several processes combines each metric as declared."""

from __future__ import annotations

import math
import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch = pytest.importorskip("torch")

from proctor.trainer.metric_schema import METRICS, metric_of  # noqa: E402
from proctor.trainer.step_row import gather_row  # noqa: E402


class TwoProcesses:
    """accelerate's gather as 2 processes see it: this row and the other's."""

    num_processes = 2

    def __init__(self, other: dict) -> None:
        self.other = other

    def gather_for_metrics(self, rows, use_gather_object=False):
        return rows + [self.other]


def test_counts_add_up_extremes_stay_extremes_and_rates_average():
    mine = {"step": 3, "prompts_truncated": 1, "learned_rows": 12, "skipped_nonfinite": 0, "staleness_max": 1,
            "rollout_version_min": 4, "reward_mean": 0.2, "tokens_generated": 100, "time_learn_s": 2.0,
            "memory_kind": "rss", "sampler_ratio_min": 0.9, "entropy": math.nan, "env_a_pass_rate": 0.5}
    other = {"step": 3, "prompts_truncated": 2, "learned_rows": 10, "skipped_nonfinite": 1, "staleness_max": 3,
             "rollout_version_min": 2, "reward_mean": 0.6, "tokens_generated": 50, "time_learn_s": 3.0,
             "memory_kind": "rss", "sampler_ratio_min": 0.7, "entropy": 1.5, "env_a_pass_rate": 0.25}
    row = gather_row(TwoProcesses(other), mine)
    assert row["processes"] == 2 and row["step"] == 3
    assert (row["prompts_truncated"], row["learned_rows"], row["tokens_generated"]) == (3, 22, 150)   # sums
    assert (row["skipped_nonfinite"], row["staleness_max"], row["time_learn_s"]) == (1, 3, 3.0)       # maxima
    assert (row["rollout_version_min"], row["sampler_ratio_min"]) == (2, 0.7)                          # minima
    assert row["reward_mean"] == pytest.approx(0.4) and row["env_a_pass_rate"] == pytest.approx(0.375)
    assert row["entropy"] == 1.5 and row["memory_kind"] == "rss"


def test_each_declaration_is_whole_and_patterns_resolve_to_the_longest():
    assert len({m.key for m in METRICS}) == len(METRICS)   # declared once
    assert all(m.unit and m.help and m.reduce in ("sum", "max", "min", "mean", "first") for m in METRICS)
    assert metric_of("reward_mean_filtered").key == "*_filtered"
    assert metric_of("tokens_zero_signal_kept_cumulative").reduce == "sum"
    assert metric_of("time_generate_s").reduce == "max"
    assert metric_of("no_such_metric") is None


def _undeclared(rows) -> set[str]:
    return {k for row in rows for k in row if metric_of(k) is None}


def test_every_key_a_grpo_run_writes_is_declared(tmp_path):
    from accelerate.state import AcceleratorState

    from proctor.trainer.build import build_trainer
    from proctor.trainer.config import GRPOConfig

    arith = {"id": "proctor/Arithmetic-v0", "kwargs": {"level": 1, "n": 200, "numbers": [0, 20],
                                                        "prompt_template": "What is {expr}?"}}
    # The main job's selection (the answer probe), dynamic sampling, and evaluation before and after.
    cfg = GRPOConfig.from_dict({
        "model": "tiny:0", "max_steps": 2, "output_dir": str(tmp_path / "run"),
        "data": {"envs": {"arith": arith}, "prompts_per_step": 2, "answer_probe": True,
                 "target_pass_rate": [0.01, 0.9], "difficulty_envs": [], "dynamic_sampling": True},
        "rollout": {"group_size": 4, "max_new_tokens": 3},
        "eval": {"split": 0.1, "every": 2, "max_prompts": 4, "k": [1, 2]}})
    AcceleratorState._reset_state(reset_partial_state=True)
    try:
        rows = build_trainer(cfg).train()
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
    assert [r["step"] for r in rows] == [0, 1, 2] and "eval_pass@2" in rows[-1] and "probe_predicted_pass" in rows[-1]
    assert not _undeclared(rows), _undeclared(rows)


def test_every_key_a_ppo_run_writes_is_declared(tmp_path):
    from tiny_runs import ppo_trainer

    trainer = ppo_trainer(tmp_path, prompts_per_step=4, max_new_tokens=4, max_steps=1)
    rows = trainer.train()
    assert rows[-1]["algorithm"] == "ppo" and not _undeclared(rows), _undeclared(rows)
