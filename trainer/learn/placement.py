"""Where the policy's weights live and how they step: the model prepared for the update
(dropout off, gradient checkpointing, LoRA, a frozen reference), sharded (FSDP2 on CPU
processes, DeepSpeed through accelerate) or replicated (DDP), its optimizer and schedule,
and its full weights gathered again for saving.
"""

from __future__ import annotations

import copy
import os
from typing import Any, Callable, Optional

import torch

from ..config import GRPOConfig
from .learner import Trainable, disable_dropout
from ..rollout.weights import is_peft


def prepare_policy(cfg: GRPOConfig, model: Any, accelerator: Any) -> tuple[Trainable, Optional[torch.nn.Module]]:
    """The policy ready to train (and the frozen reference, when the KL term needs one)."""
    o = cfg.optim
    disable_dropout(model)
    if o.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if o.lora_rank > 0:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=o.lora_rank, lora_alpha=o.lora_alpha,
                                                 target_modules="all-linear", task_type="CAUSAL_LM"))
    # β = 0 loads no reference model; with LoRA the base (adapters off) is the reference.
    ref_model = None
    if cfg.objective.beta > 0 and o.lora_rank == 0:
        ref_model = copy.deepcopy(model).eval().requires_grad_(False)
    if fsdp_on_cpu(accelerator):   # shard first: the optimizer holds the sharded parameters
        model = shard_fsdp2(model)
    optimizer = adamw([p for p in model.parameters() if p.requires_grad], o.learning_rate, o.weight_decay)
    scheduler = lr_schedule(optimizer, o.lr_scheduler, o.warmup_steps, cfg.max_steps * cfg.objective.num_iterations)
    plugin = accelerator.state.deepspeed_plugin   # None unless DeepSpeed
    if plugin is not None:
        fit_deepspeed_config(plugin.deepspeed_config, plugin.is_auto, o.micro_batch_size, o.max_grad_norm)
    if not fsdp_on_cpu(accelerator):   # sharded by hand: accelerate would checkpoint it as a plain model
        model, optimizer = accelerator.prepare(model, optimizer)
    model.eval()   # rollouts in eval mode; the learner switches to train mode for the update
    # Stepped once per optimizer step by the learner on every process (not through accelerate,
    # which would step it once per process). Registered for accelerate's save_state, which writes
    # the checkpoint under DeepSpeed (and accelerate's FSDP); elsewhere checkpoint.save_training
    # writes it as plain data and accelerate's registration goes unused.
    accelerator.register_for_checkpointing(scheduler)
    if ref_model is not None:
        ref_model.to(accelerator.device)
    return Trainable(model, optimizer, scheduler), ref_model


def process_group_kwargs() -> list:
    """DeepSpeed on CPU processes (no accelerator device): accelerate 1.15 finds no backend
    there and would count every process as rank 0 of 1; gloo, named, gives it the real world."""
    from accelerate.utils import InitProcessGroupKwargs

    deepspeed = os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"
    return [InitProcessGroupKwargs(backend="gloo")] if deepspeed and not torch.cuda.is_available() else []

def fit_deepspeed_config(ds: dict, is_auto: Callable[[str], bool], micro_batch_size: int,
                         max_grad_norm: float) -> None:
    """The DeepSpeed config, made to agree with the learner, which accumulates micro-batches
    itself (the engine must not divide the loss again) and has no dataloader for accelerate
    to read the micro-batch size off; the engine clips, at ``optim.max_grad_norm``; ZeRO-3
    gathers full weights for the saved model."""
    if is_auto("train_micro_batch_size_per_gpu"):
        ds["train_micro_batch_size_per_gpu"] = micro_batch_size
    if is_auto("gradient_clipping"):
        ds["gradient_clipping"] = max_grad_norm
    accumulation = ds.get("gradient_accumulation_steps", 1)
    if accumulation not in (1, "auto"):
        raise ValueError(f"DeepSpeed config: gradient_accumulation_steps is {accumulation}; set it to 1 "
                         "(proctor accumulates micro-batches itself: optim.micro_batch_size)")
    zero = ds.get("zero_optimization", {})
    if zero.get("stage") == 3:
        # save_model writes full weights (loadable with from_pretrained) whatever accelerate's
        # zero3_save_16bit_model says (its default, false, would leave the saved model empty)
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    clipping = ds.get("gradient_clipping")
    if clipping not in (None, "auto") and float(clipping) != float(max_grad_norm):
        raise ValueError(f"DeepSpeed config: gradient_clipping is {clipping} but optim.max_grad_norm is "
                         f"{max_grad_norm}; DeepSpeed does the clipping, so make them equal")

def fsdp_on_cpu(accelerator: Any) -> bool:
    """FSDP was asked for (``accelerate launch`` with an FSDP config, or ACCELERATE_USE_FSDP=true)
    on CPU processes. accelerate 1.15 turns FSDP on for accelerator devices only (its state keeps
    MULTI_CPU and would wrap the model in DDP), so proctor shards with torch's FSDP2 itself."""
    from accelerate.utils import DistributedType

    return (accelerator.distributed_type == DistributedType.MULTI_CPU
            and os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true")

def shard_fsdp2(model: torch.nn.Module) -> torch.nn.Module:
    """``fully_shard`` on each transformer block (the model's ``_no_split_modules``), then the
    root, as accelerate's TRANSFORMER_BASED_WRAP does; FSDP_RESHARD_AFTER_FORWARD as there."""
    from torch.distributed.fsdp import fully_shard

    if os.environ.get("FSDP_VERSION", "2") != "2":
        raise ValueError("FSDP on CPU processes is FSDP2 only: set fsdp_version: 2 (FSDP_VERSION=2)")
    if is_peft(model):
        raise ValueError("FSDP on CPU processes shards a full model; LoRA (optim.lora_rank > 0) is not supported there")
    reshard = os.environ.get("FSDP_RESHARD_AFTER_FORWARD", "true").lower() == "true"
    blocks = set(model._no_split_modules or ())
    for module in model.modules():
        if module.__class__.__name__ in blocks:
            fully_shard(module, reshard_after_forward=reshard)
    return fully_shard(model, reshard_after_forward=reshard)

def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """An FSDP2 model's full weights on rank 0, in CPU memory ({} elsewhere); every process calls it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

def lr_schedule(optimizer: torch.optim.Optimizer, kind: str, warmup_steps: int, total_steps: int) -> Any:
    """Linear warmup from 0 over ``warmup_steps``, then constant, linear to 0 or cosine to 0 at
    ``total_steps`` optimizer steps: transformers' schedules, as TRL and the HF Trainer use them."""
    from transformers import get_scheduler

    name = {"constant": "constant_with_warmup", "linear": "linear", "cosine": "cosine"}[kind]
    return get_scheduler(name, optimizer, num_warmup_steps=warmup_steps, num_training_steps=max(1, total_steps))

def adamw(params: list[torch.nn.Parameter], lr: float, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    try:   # the fused kernel: several times faster per step on CPU and GPU alike
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)


__all__ = ["adamw", "fit_deepspeed_config", "fsdp_on_cpu", "full_state_dict", "lr_schedule", "prepare_policy",
           "process_group_kwargs", "shard_fsdp2"]
