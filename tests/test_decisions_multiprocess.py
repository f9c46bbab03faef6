"""Every process takes the decisions that change control flow together (trainer/consensus.py).

On 2 CPU processes (torchrun, gloo), each case one process alone would decide differently,
and the other would wait in the next collective forever (the subprocess timeout is the hang):

- data parallel, only rank 0's verifier fails: both skip the update (the all-reduce of a
  backward only one of them runs);
- FSDP2, only rank 0's groups lack signal: both run the same dynamic-sampling rounds (the
  all-gather of every forward on the sharded policy); evaluation after every step runs on
  every rank, since the sharded generation is a collective;
- ZeRO-3 (DeepSpeed on CPU processes), evaluation after every step, for the same reason.
"""

from __future__ import annotations

import pytest
import torch

from test_resume_multiprocess import drawn, launch, weights

HANG = 300   # seconds: each launch finishes in well under a minute unless a process waits forever


def _same_weights(tmp_path, name: str) -> None:
    a, b = weights(tmp_path, name, 0), weights(tmp_path, name, 1)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.slow
def test_ddp_skips_a_step_together_when_one_rank_cannot_judge(tmp_path):
    from proctor.tiny_model import tiny_model_path
    from transformers import AutoModelForCausalLM

    launch("decide-ddp", tmp_path, timeout=HANG)
    rows = drawn(tmp_path, "decide-ddp", 0)["rows"]   # rank 0 logs: both processes' values
    assert len(rows) == 2 and all(r["skipped_infra"] == 1 for r in rows), rows
    # Half of the step's completions are infra errors (all of rank 0's): over max_infra_frac 0.25,
    # so neither process updated, and the weights are still the initial ones on both.
    _same_weights(tmp_path, "decide-ddp")
    start = AutoModelForCausalLM.from_pretrained(tiny_model_path(pretrain_steps=0)).state_dict()
    after = weights(tmp_path, "decide-ddp", 0)
    assert all(torch.equal(after[k], start[k]) for k in after)


@pytest.mark.slow
def test_fsdp2_resamples_and_evaluates_on_every_rank_together(tmp_path):
    launch("decide-fsdp", tmp_path, timeout=HANG)
    rank0, rank1 = drawn(tmp_path, "decide-fsdp", 0), drawn(tmp_path, "decide-fsdp", 1)
    before, *rows = rank0["rows"]   # the evaluation before step 1, then the two steps
    assert len(rows) == 2 and 0.0 <= before["eval_greedy_pass_rate"] <= 1.0
    # Rank 0's groups never have signal: two rounds each step, on both ranks. Rank 1 had nothing
    # missing, yet drew (and generated) as many prompts as rank 0 in each round: the sharded forward.
    assert all(r["dynamic_sampling_rounds"] == 2 for r in rows), rows
    assert [len(d) for d in rank0["drawn"]] == [len(d) for d in rank1["drawn"]] == [2, 2, 2, 2, 2, 2]
    assert all(0.0 <= r["eval_greedy_pass_rate"] <= 1.0 for r in rows), rows   # evaluated after each step
    _same_weights(tmp_path, "decide-fsdp")


@pytest.mark.slow
def test_zero3_evaluates_on_every_rank_together(tmp_path):
    pytest.importorskip("deepspeed", reason="DeepSpeed is not installed")
    launch("decide-zero3", tmp_path, timeout=HANG)
    rows = drawn(tmp_path, "decide-zero3", 0)["rows"]
    assert len(rows) == 3 and all(0.0 <= r["eval_greedy_pass_rate"] <= 1.0 for r in rows), rows
    _same_weights(tmp_path, "decide-zero3")
