"""``proctor plan``: GPU memory and rollout tokens of an RL step, PPO beside GRPO."""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer


class AlgorithmChoice(str, Enum):
    grpo = "grpo"
    ppo = "ppo"
    both = "both"


class OptimizerChoice(str, Enum):
    adamw = "adamw"
    adamw8bit = "adamw8bit"
    sgd = "sgd"


class PrecisionChoice(str, Enum):
    bf16_mixed = "bf16-mixed"
    bf16 = "bf16"
    fp32 = "fp32"


def plan(
    config: Annotated[Optional[Path], typer.Option(
        "--config", "-c", help="A `proctor train` run config (YAML/JSON): plan that run. B, G, completion length, "
                               "micro-batch, KL, LoRA, precision, checkpointing and the model come from it; the "
                               "options below give what a run config does not hold.")] = None,
    params: Annotated[Optional[float], typer.Option(
        help="Actor parameter count, e.g. 70e9 (a Llama-like shape is guessed around it). "
             "With --model, overrides the count read from the config.")] = None,
    model: Annotated[Optional[str], typer.Option(
        help="Model directory, its config.json, or a hub id (cached only when offline): count and shape.")] = None,
    algorithm: Annotated[AlgorithmChoice, typer.Option(help="Algorithm(s) to plan.")] = AlgorithmChoice.both,
    critic_params: Annotated[Optional[float], typer.Option(help="PPO critic size (default: actor-sized).")] = None,
    reward_params: Annotated[Optional[float], typer.Option(
        help="PPO reward-model size (default: actor-sized).")] = None,
    optimizer: Annotated[OptimizerChoice, typer.Option(help="Optimizer.")] = OptimizerChoice.adamw,
    precision: Annotated[PrecisionChoice, typer.Option(
        help="bf16-mixed: bf16 weights + fp32 master copy and moments; bf16: pure bf16; fp32: no mixed "
             "precision.")] = PrecisionChoice.bf16_mixed,
    zero: Annotated[int, typer.Option(help="ZeRO stage 0-3 over --gpus.")] = 0,
    fsdp: Annotated[bool, typer.Option("--fsdp", help="FSDP full sharding (shards what ZeRO-3 does).")] = False,
    gpus: Annotated[int, typer.Option(help="GPUs (data parallel, sharded by --zero/--fsdp).")] = 1,
    offload: Annotated[bool, typer.Option(
        "--offload", help="Optimizer moments and master weights in CPU RAM.")] = False,
    lora_rank: Annotated[int, typer.Option(help="LoRA rank on every linear layer; 0 trains all weights.")] = 0,
    kl: Annotated[bool, typer.Option("--kl/--no-kl", help="KL term to a frozen reference model.")] = True,
    group_size: Annotated[int, typer.Option(help="G: GRPO completions per prompt.")] = 8,
    ppo_samples_per_prompt: Annotated[int, typer.Option(help="PPO completions per prompt.")] = 1,
    prompt_len: Annotated[int, typer.Option(help="Prompt tokens.")] = 512,
    completion_len: Annotated[int, typer.Option(help="Completion tokens (each taken to run to this length).")] = 1024,
    batch_size: Annotated[int, typer.Option(help="B: prompts per optimizer step, all GPUs together.")] = 8,
    micro_batch: Annotated[int, typer.Option(help="Sequences per forward/backward on each GPU.")] = 1,
    gradient_checkpointing: Annotated[bool, typer.Option(
        "--gradient-checkpointing/--no-gradient-checkpointing", help="Recompute activations in backward.")] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the plan as JSON.")] = False,
) -> None:
    """Plan GPU memory per component (weights, gradients, optimizer, activations, KV cache, reference and
    reward models) and rollout tokens per step, GRPO beside PPO."""
    from rich.console import Console
    from rich.markup import escape

    from proctor.plan import PlanInput, plan_dict, render
    from proctor.plan import plan as make_plan

    console = Console()
    if fsdp and zero not in (0, 3):
        console.print(f"[red]error:[/red] --fsdp shards like ZeRO-3; drop --zero {zero} or --fsdp")
        raise typer.Exit(2)
    try:
        if config is not None:
            inp = _from_run_config(config, algorithm=algorithm.value, params=params, model=model,
                                   critic_params=critic_params,
                                   reward_params=reward_params, optimizer=optimizer.value,
                                   sharding="fsdp" if fsdp else zero, gpus=gpus, offload=offload,
                                   prompt_len=prompt_len)
        else:
            inp = PlanInput(params=params, model=model, algorithm=algorithm.value, critic_params=critic_params,
                            reward_params=reward_params, optimizer=optimizer.value, precision=precision.value,
                            sharding="fsdp" if fsdp else zero, gpus=gpus, offload=offload, lora_rank=lora_rank,
                            kl=kl, group_size=group_size, ppo_samples_per_prompt=ppo_samples_per_prompt,
                            prompt_len=prompt_len, completion_len=completion_len, batch_size=batch_size,
                            micro_batch=micro_batch, gradient_checkpointing=gradient_checkpointing)
        result = make_plan(inp)
    except ValueError as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from None
    if as_json:
        # Plain print: Rich would wrap long lines and colour the JSON.
        print(json.dumps(plan_dict(result), indent=2))
        return
    render(result, console)


def _from_run_config(path: Path, **rest: Any) -> Any:
    from proctor.trainer.config import GRPOConfig
    from proctor.trainer.plan_input import plan_input

    from .train_cmd import read_config

    cfg = GRPOConfig.from_dict(read_config(path), where=str(path))
    return plan_input(cfg, **rest)
