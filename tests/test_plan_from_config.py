"""``proctor plan -c run.yaml`` plans the run ``proctor train -c run.yaml`` would start: the
planner's input is built from the run config, so the two cannot disagree on names."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest
import typer
from typer.testing import CliRunner

from proctor.cli.plan_cmd import plan as plan_command
from proctor.plan import PlanInput
from proctor.trainer.config import GRPOConfig
from proctor.trainer.plan_input import FROM_CONFIG, plan_fields, plan_input

RUN = """
model: {model}
data: {{prompts_per_step: 4}}
rollout: {{group_size: 16, max_new_tokens: 256}}
objective: {{beta: 0.04}}
optim: {{micro_batch_size: 2, lora_rank: 8, mixed_precision: bf16, gradient_checkpointing: true}}
"""


def _invoke(*args: str):
    app = typer.Typer()
    app.command("plan")(plan_command)

    @app.callback()
    def _root() -> None:
        pass

    return CliRunner().invoke(app, ["plan", *args])


def test_every_config_derived_input_is_a_planner_field():
    names = {f.name for f in fields(PlanInput)}
    assert set(FROM_CONFIG) <= names


def test_plan_from_a_run_config_equals_the_same_plan_from_flags(tmp_path):
    from proctor.tiny_model import tiny_model_path

    model = tiny_model_path(pretrain_steps=0)
    run = tmp_path / "run.yaml"
    run.write_text(RUN.format(model=model))
    from_config = _invoke("-c", str(run), "--prompt-len", "128", "--json")
    assert from_config.exit_code == 0, from_config.output
    from_flags = _invoke("--model", str(model), "--batch-size", "4", "--group-size", "16", "--completion-len", "256",
                         "--kl", "--micro-batch", "2", "--lora-rank", "8", "--precision", "bf16-mixed",
                         "--gradient-checkpointing", "--prompt-len", "128", "--json")
    assert from_flags.exit_code == 0, from_flags.output
    assert json.loads(from_config.output) == json.loads(from_flags.output)


def test_the_config_decides_b_g_and_kl():
    cfg = GRPOConfig.from_dict({"model": "some/model", "data": {"prompts_per_step": 3},
                                "rollout": {"group_size": 5}, "objective": {"beta": 0.0}})
    got = plan_fields(cfg)
    assert (got["batch_size"], got["group_size"], got["kl"]) == (3, 5, False)
    ppo = GRPOConfig.from_dict({"model": "some/model", "rollout": {"group_size": 2}, "objective": {"algorithm": "ppo"}})
    assert plan_fields(ppo)["ppo_samples_per_prompt"] == 2


def test_a_setting_given_twice_is_refused():
    cfg = GRPOConfig.from_dict({"model": "some/model"})
    with pytest.raises(ValueError, match=r"group_size come\(s\) from the run config"):
        plan_input(cfg, group_size=4, params=7e9)


def test_a_bad_run_config_names_the_file_and_field(tmp_path):
    run = tmp_path / "bad.yaml"
    run.write_text("rollout: {group_size: many}\n")
    result = _invoke("-c", str(run), "--params", "7e9")
    assert result.exit_code != 0 and "bad.yaml" in result.output and "rollout.group_size" in result.output
