"""A run config as the planner's input: ``proctor plan -c run.yaml`` plans the run that
``proctor train -c run.yaml`` would start, under the same names.

The planner (``proctor.plan``) knows nothing of the trainer; this is the one place that
says which config field feeds which planning input:

    data.prompts_per_step        → batch_size (B)
    rollout.group_size           → group_size (GRPO) / ppo_samples_per_prompt (PPO)
    rollout.max_new_tokens       → completion_len
    objective.algorithm          → whether G is GRPO's group or PPO's samples per prompt
    objective.beta > 0           → kl (a reference model is held)
    optim.micro_batch_size       → micro_batch
    optim.lora_rank              → lora_rank
    optim.gradient_checkpointing → gradient_checkpointing
    optim.mixed_precision        → precision (no: fp32; bf16 and fp16: mixed, fp32 master and moments)
    model                        → model (its config gives the shape)
"""

from __future__ import annotations

from typing import Any

from proctor.plan import PlanInput
from proctor.tiny_model import resolve_model_config

from .config import GRPOConfig

PRECISION = {"no": "fp32", "bf16": "bf16-mixed", "fp16": "bf16-mixed"}   # fp16 mixed holds what bf16 mixed does
FROM_CONFIG = ("batch_size", "group_size", "ppo_samples_per_prompt", "completion_len", "kl",
               "micro_batch", "lora_rank", "gradient_checkpointing", "precision", "model")


def plan_fields(cfg: GRPOConfig) -> dict[str, Any]:
    """The ``PlanInput`` fields a run config decides."""
    ppo = cfg.objective.algorithm == "ppo"
    return {
        "model": resolve_model_config(cfg.model),   # its config.json: a tiny model is not built to plan
        "batch_size": cfg.data.prompts_per_step,
        "group_size": cfg.rollout.group_size if not ppo else 8,
        "ppo_samples_per_prompt": cfg.rollout.group_size if ppo else 1,
        "completion_len": cfg.rollout.max_new_tokens,
        "kl": cfg.objective.beta > 0,
        "micro_batch": cfg.optim.micro_batch_size,
        "lora_rank": cfg.optim.lora_rank,
        "gradient_checkpointing": cfg.optim.gradient_checkpointing,
        "precision": PRECISION[cfg.optim.mixed_precision],
    }


def plan_input(cfg: GRPOConfig, **rest: Any) -> PlanInput:
    """``PlanInput`` for the run ``cfg``; ``rest`` gives what a run config does not hold
    (prompt_len, gpus, sharding, offload, optimizer, critic/reward sizes, params) and which
    algorithm(s) to plan (``algorithm``: grpo, ppo or both, to see PPO's cost beside GRPO's)."""
    clash = sorted(set(rest) & set(FROM_CONFIG) - {"model"})
    if clash:
        raise ValueError(f"{', '.join(clash)} come(s) from the run config; change it there")
    fields = plan_fields(cfg)
    if rest.get("params") is not None or rest.get("model") is not None:
        fields.pop("model")   # an explicit size or model overrides the config's model
    return PlanInput(**{**fields, **{k: v for k, v in rest.items() if v is not None or k not in fields}})


__all__ = ["FROM_CONFIG", "plan_fields", "plan_input"]
