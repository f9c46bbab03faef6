"""The run config as one validated tree: groups, flat keys of earlier versions (with a
note naming the new key), and errors that name the field."""

from __future__ import annotations

import warnings

import pytest

from proctor.trainer.config import FLAT_KEYS, ConfigDeprecationWarning, GRPOConfig


def test_nested_groups_build_and_default():
    cfg = GRPOConfig.from_dict({"rollout": {"group_size": 4, "vllm": {"sync_every": 2}},
                                "objective": {"beta": 0.04, "ppo": {"lam": 0.9}}, "optim": {"lora_rank": 8}})
    assert cfg.rollout.group_size == 4 and cfg.rollout.vllm.sync_every == 2
    assert cfg.objective.beta == 0.04 and cfg.objective.ppo.lam == 0.9 and cfg.optim.lora_rank == 8
    assert cfg.data.prompts_per_step == 8 and cfg.rollout.temperature == 1.0   # untouched groups keep defaults


@pytest.mark.parametrize("flat, path, value", [
    ("group_size", "rollout.group_size", 4), ("rollout_backend", "rollout.backend", "vllm"),
    ("vllm_sync_every", "rollout.vllm.sync_every", 3), ("beta", "objective.beta", 0.1),
    ("gamma", "objective.ppo.gamma", 0.9), ("learning_rate", "optim.learning_rate", 1e-5),
    ("prompts_per_step", "data.prompts_per_step", 3), ("save_every", "checkpoint.save_every", 5),
    ("report_to", "log.report_to", ["tensorboard"]), ("max_nonfinite_steps", "optim.max_nonfinite_steps", 5),
])
def test_flat_keys_still_work_and_say_where_they_moved(flat, path, value):
    with pytest.warns(ConfigDeprecationWarning, match=rf"`{flat}` is deprecated; write it as `{path}`"):
        cfg = GRPOConfig.from_dict({flat: value}, where="run.yaml")
    node = cfg
    for part in path.split("."):
        node = getattr(node, part)
    assert node == value


def test_every_field_of_the_old_flat_config_has_a_place():
    old = ("model envs env_weights system_prompt output_dir seed prompts_per_step group_size temperature top_p top_k "
           "max_new_tokens generation_batch_size rollout_backend vllm_sync_every vllm_lora_sync vllm_sleep "
           "vllm_sleep_level vllm_gpu_memory_utilization vllm_server_urls vllm_server_args vllm_bucket_mb "
           "vllm_timeout_s vllm_sync_timeout_s async_generation max_staleness overlap_scoring is_correction is_cap "
           "max_steps learning_rate weight_decay warmup_steps max_grad_norm micro_batch_size num_iterations loss_type "
           "scale_rewards importance_level epsilon_low epsilon_high delta beta kl_kind entropy_coef mask_truncated "
           "algorithm gamma lam critic_learning_rate value_clip whiten_advantages dynamic_sampling "
           "max_resample_rounds skip_predicted_zero_signal skip_threshold mixed_precision gradient_checkpointing "
           "lora_rank lora_alpha save_every resume_from max_nonfinite_steps log_every sample_completions "
           "report_to").split()
    assert len(old) == 66
    top = {"model", "output_dir", "seed", "max_steps"}
    assert [k for k in old if k not in top and k not in FLAT_KEYS] == []


def test_errors_name_the_field_and_the_file():
    with pytest.raises(ValueError, match=r"run.yaml: field rollout.group_size"):
        GRPOConfig.from_dict({"rollout": {"group_size": "many"}}, where="run.yaml")
    with pytest.raises(ValueError, match=r"run.yaml: field rollout.tempreature"):
        GRPOConfig.from_dict({"rollout": {"tempreature": 0.5}}, where="run.yaml")
    with pytest.raises(ValueError, match=r"unknown field\(s\) grup_size"):
        GRPOConfig.from_dict({"grup_size": 4})
    with pytest.raises(ValueError, match=r"group_size and rollout.group_size are both given"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            GRPOConfig.from_dict({"group_size": 4, "rollout": {"group_size": 8}})


def test_cross_field_rules_use_the_new_names():
    with pytest.raises(ValueError, match=r"rollout.group_size must be >= 2 for GRPO"):
        GRPOConfig.from_dict({"rollout": {"group_size": 1}})
    assert GRPOConfig.from_dict({"rollout": {"group_size": 1}, "objective": {"algorithm": "ppo"}}).rollout.group_size == 1


def test_from_flat_is_the_script_shorthand_without_notes():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg = GRPOConfig.from_flat(group_size=4, beta=0.04, rollout_backend="vllm")
    assert cfg.rollout.group_size == 4 and cfg.objective.beta == 0.04 and cfg.rollout.backend == "vllm"


def test_validating_a_config_does_not_load_torch():
    import subprocess
    import sys

    code = ("import sys; from proctor.trainer.config import GRPOConfig; "
            "GRPOConfig.from_flat(model='m', top_p=0.9, generation_kwargs={'min_p': 0.1}); "
            "assert 'torch' not in sys.modules, 'torch was imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
