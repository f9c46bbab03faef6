"""Rollout settings that cannot work together are refused when the config is built, with
the field and the fix named; nothing needs an engine here."""

from __future__ import annotations

import pytest

from proctor.trainer.config import GRPOConfig
from proctor.trainer.rollout.factory import use_sleep


@pytest.mark.parametrize("kw, message", [
    (dict(async_generation=True), r"rollout.async_generation needs rollout.backend vllm or vllm_server"),
    (dict(async_generation=True, rollout_backend="vllm", vllm_sleep="on"), r"cannot sleep"),
    (dict(async_generation=True, rollout_backend="vllm", algorithm="ppo"), r"async_generation is for GRPO"),
    (dict(rollout_backend="vllm_server", vllm_sleep="on"), r"rollout.vllm.sleep: on applies to rollout.backend vllm"),
    (dict(rollout_backend="vllm", async_generation=True, max_staleness=0), r"rollout.max_staleness .* must be >= 1"),
])
def test_incompatible_rollout_settings_are_named(kw, message):
    with pytest.raises(ValueError, match=message):
        GRPOConfig.from_flat(**kw)


def test_bad_backend_names_the_field():
    with pytest.raises(ValueError, match=r"field rollout.backend"):
        GRPOConfig.from_dict({"rollout": {"backend": "sglang"}})


def test_sleep_only_where_it_frees_something():
    import torch

    gpu = torch.cuda.is_available()
    assert use_sleep(GRPOConfig.from_flat(rollout_backend="vllm").rollout) == gpu            # auto: on with a GPU
    assert not use_sleep(GRPOConfig.from_flat(rollout_backend="vllm", vllm_sleep="off").rollout)
    assert not use_sleep(GRPOConfig.from_flat(rollout_backend="vllm", async_generation=True).rollout)   # generating while learning
    assert not use_sleep(GRPOConfig.from_flat(rollout_backend="vllm_server").rollout)
    assert use_sleep(GRPOConfig.from_flat(rollout_backend="vllm", vllm_sleep="on").rollout)


def test_sleep_mode_without_a_gpu_says_so():
    pytest.importorskip("vllm")
    import torch

    from proctor.trainer.rollout.vllm_engine import VLLMEngine

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: sleep mode is available")
    with pytest.raises(ValueError, match=r"sleep mode frees GPU memory and needs a GPU"):
        VLLMEngine("unused-path", sleep_mode=True)


def test_example_training_configs_are_valid():
    from pathlib import Path

    import yaml

    for path in sorted((Path(__file__).parents[1] / "examples" / "train").glob("*.yaml")):
        GRPOConfig.from_dict(yaml.safe_load(path.read_text()), where=str(path))
