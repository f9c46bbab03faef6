"""FSDP2 on 2 CPU processes (torchrun, gloo): the policy sharded, generation (transformers
backend) and the weight gather for engines on sharded parameters, against the unsharded
data-parallel run on the same seeds."""

from __future__ import annotations

import pytest
import torch

from test_resume_multiprocess import drawn, launch, weights


@pytest.mark.slow
def test_fsdp2_three_steps_match_the_unsharded_run(tmp_path):
    launch("fsdp", tmp_path)
    for rank in (0, 1):
        # Same prompts, and (gathered by policy_weights, which the vLLM backends send) the same
        # weights after 3 GRPO steps; only the reduction order differs (reduce-scatter vs all-reduce).
        sharded, plain = drawn(tmp_path, "fsdp", rank), drawn(tmp_path, "ddp", rank)
        assert sharded["drawn"] == plain["drawn"]
        # Generation on the sharded model sampled the same completions (same rewards, same tokens).
        for s, p in zip(sharded["rows"], plain["rows"], strict=True):
            assert s["tokens_generated"] == p["tokens_generated"] and s["reward_mean"] == p["reward_mean"]
            assert s["loss"] == pytest.approx(p["loss"], rel=1e-5, abs=1e-7)
        ddp, fsdp = weights(tmp_path, "ddp", rank), weights(tmp_path, "fsdp", rank)
        assert ddp.keys() == fsdp.keys() and len(ddp) > 0
        for name in ddp:
            assert fsdp[name].shape == ddp[name].shape, name    # full tensors, not shards
            torch.testing.assert_close(fsdp[name], ddp[name], rtol=0, atol=1e-5, msg=name)
    # The steps did move the weights (by far more than the tolerance), identically on both ranks.
    a, b = weights(tmp_path, "fsdp", 0), weights(tmp_path, "fsdp", 1)
    assert all(torch.equal(a[n], b[n]) for n in a)
    start = _initial_weights()
    assert max(float((a[n] - start[n]).abs().max()) for n in a if n in start) > 1e-3


def _initial_weights() -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    from proctor.tiny_model import tiny_model_path

    return AutoModelForCausalLM.from_pretrained(tiny_model_path(pretrain_steps=0)).state_dict()
