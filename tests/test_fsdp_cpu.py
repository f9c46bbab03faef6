"""FSDP2 on 2 CPU processes (torchrun, gloo): the policy sharded, generation (transformers
backend), the weight gather for engines, a sharded checkpoint and its resume, and the saved
model, against the unsharded data-parallel run on the same seeds.

(accelerate 1.15 enables FSDP on accelerator devices only; on CPU processes proctor shards
the policy with torch's ``fully_shard`` itself: trainer/learn/placement.py ``shard_fsdp2``.)"""

from __future__ import annotations

import pytest
import torch

from test_resume_multiprocess import drawn, launch, weights


@pytest.mark.slow
def test_fsdp2_three_steps_match_the_unsharded_run(tmp_path):
    launch("fsdp", tmp_path)
    for rank in (0, 1):
        sharded = drawn(tmp_path, "fsdp-first", rank)["drawn"] + drawn(tmp_path, "fsdp", rank)["drawn"]
        assert sharded == drawn(tmp_path, "ddp", rank)["drawn"]
        # Same weights after 3 GRPO steps (gathered by policy_weights, what the vLLM backends send);
        # only the order of the gradient sums differs (reduce-scatter against all-reduce).
        ddp, fsdp = weights(tmp_path, "ddp", rank), weights(tmp_path, "fsdp", rank)
        assert ddp.keys() == fsdp.keys() and len(ddp) > 0
        for name in ddp:
            assert fsdp[name].shape == ddp[name].shape, name    # full tensors, not shards
            torch.testing.assert_close(fsdp[name], ddp[name], rtol=0, atol=1e-5, msg=name)
    # Generation on the sharded model sampled the same completions: same token counts and
    # rewards at every step (rank 0's rows hold both processes' values).
    sharded_rows, plain_rows = drawn(tmp_path, "fsdp", 0)["rows"], drawn(tmp_path, "ddp", 0)["rows"]
    assert len(sharded_rows) == len(plain_rows) == 3
    for s, p in zip(sharded_rows, plain_rows):
        assert s["tokens_generated"] == p["tokens_generated"] and s["reward_mean"] == p["reward_mean"]
        assert s["loss"] == pytest.approx(p["loss"], rel=1e-4, abs=1e-7)
    # The steps moved the weights by far more than the tolerance, identically on both ranks,
    # and the saved model holds the full trained weights.
    a, b = weights(tmp_path, "fsdp", 0), weights(tmp_path, "fsdp", 1)
    assert all(torch.equal(a[n], b[n]) for n in a)
    start, saved = _load(None), _load(tmp_path / "fsdp" / "model")
    assert max(float((a[n] - start[n]).abs().max()) for n in a) > 1e-3
    assert all(torch.equal(saved[n], a[n]) for n in a)


def _load(path) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForCausalLM

    from proctor.tiny_model import tiny_model_path

    return AutoModelForCausalLM.from_pretrained(path or tiny_model_path(pretrain_steps=0)).state_dict()


@pytest.mark.slow
def test_fsdp2_pushes_gathered_weights_from_rank_0_to_a_shared_server(tmp_path):
    pytest.importorskip("vllm", reason="vLLM is not importable here")
    import json

    from proctor.tiny_model import tiny_model_path
    from proctor.trainer.serve import EngineClient
    from proctor.trainer.serve.launch import ManagedServer

    server = ManagedServer(str(tiny_model_path(pretrain_steps=0)), tmp_path / "serve.log",
                           extra_args=["--dtype", "float32", "--max-model-len", "256"])
    try:
        launch("fsdp-server", tmp_path, server.url, timeout=500)
        health = EngineClient(server.url).health()
        served = _served_greedy(server.url)
    finally:
        server.close()
    # The start and the 2 syncs, each pushed once (by rank 0), every rank joining the gathers.
    assert health["weight_version"] == 2 and health["updates"] == 3
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"server-{rank}.json").read_text())
        # The server samples from the trained weights: a plain model given the gathered weights
        # answers as the server does, and no longer as the initial model did.
        assert served == seen["local"] and seen["local"] != seen["initial"]


def _served_greedy(url: str) -> list[str]:
    """The server's greedy answers to the script's prompts (a client that never pushes)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from multiprocess_script import SERVER_PROMPTS
    from proctor.tiny_model import tiny_model_path
    from proctor.trainer.rollout.vllm_server import VLLMServerGenerator

    path = tiny_model_path(pretrain_steps=0)
    client = VLLMServerGenerator([url], AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path),
                                 pushes=False)
    try:
        return client.greedy(SERVER_PROMPTS, 8)
    finally:
        client.close()
