"""The planner's assumptions, one line each, worded for the options actually given."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .costs import logit_value_bytes, state_cost, weight_bytes
from .model_shape import ModelShape

if TYPE_CHECKING:
    from .inputs import PlanInput


def assumptions(inp: "PlanInput", shape: ModelShape) -> list[str]:
    wb = weight_bytes(inp.precision)
    lines = [
        "GB = 10^9 bytes; 'total' adds every GPU's share; CPU RAM (offload) is reported apart from GPU memory.",
        f"Actor: {shape.source}; byte counts use the parameter count, the shape only sizes activations, "
        "KV cache and LoRA adapters.",
        f"Training state: {state_cost(inp.optimizer, inp.precision).describe()}.",
        "GRPO: trainable actor; frozen reference only with the KL term; no critic (the group mean is the "
        "baseline); rewards from a program, not a network.",
        "PPO: trainable actor and critic (actor-sized unless --critic-params, with its own optimizer state); "
        "frozen reference (KL) and reward model (actor-sized unless --reward-params).",
    ]
    if not inp.kl:
        lines.append("--no-kl: no reference model for either algorithm (its only use is the KL term).")
    if inp.lora_rank:
        lines.append(f"LoRA r={inp.lora_rank} on every linear of every layer (q, k, v, o, gate, up, down; not the "
                     "output head): r*(in+out) trainable each; the base costs storage only; the reference is the "
                     "base with adapters off (no extra weights); PPO's critic gets its own base and adapters.")
    if inp.stage == 0:
        lines.append(f"No sharding: each of the {inp.gpus} GPU(s) holds a full replica (plain data parallel).")
    else:
        how = "FSDP full sharding (= ZeRO-3)" if inp.sharding == "fsdp" else f"ZeRO-{inp.stage}"
        lines.append(f"{how} over {inp.gpus} GPU(s): stage 1 shards optimizer moments and master weights, 2 also "
                     "gradients, 3 also weights (frozen models too); everything else is replicated per GPU.")
    if inp.offload:
        lines.append("CPU offload: optimizer moments and master weights live in CPU RAM (the CPU column); "
                     "gradients stay on the GPU.")
    if inp.optimizer == "adamw8bit":
        lines.append("8-bit AdamW: one byte per moment; the block-wise quantisation scales (a few bytes per "
                     "2048 values) are left out.")
    cast = " (bf16 projection and its fp32 cast by accelerate, alive together)" if inp.precision == "bf16-mixed" else ""
    lines += [
        f"Activations per layer (Korthikanti et al. 2022): s*b*(34*h + 5*heads*s) bytes at 16 bits"
        f"{' (x2 in fp32)' if wb == 4 else ''} without recomputation; with gradient checkpointing 2*h*s*b per "
        "layer plus one full layer; FlashAttention avoids the 5*heads*s score term, so this is high with it.",
        f"The actor's log-probs hold logits at the completion positions only, "
        f"{logit_value_bytes(inp.precision)}*(completion+1)*b*vocab bytes{cast}, plus three fp32 chunks of at "
        "most 16 MiB; the gradient overwrites the logits "
        "(measured: tests/test_plan.py, bench/logp_memory.py). Actor and critic train one after the other, so "
        "the activation peak is the larger of the two; frozen forwards keep none.",
        f"Rollouts: prompts x completions per step, split evenly over the GPUs, all in flight at once; KV cache "
        f"2*layers*kv_heads*head_dim*{wb} bytes per token over prompt + completion tokens.",
        "The KV cache is counted as held during training (a colocated engine that keeps its pool); a separate "
        "inference engine's own copy of the weights is not counted.",
        f"Rollout tokens per step: GRPO B*G*completion = {inp.batch_size}*{inp.group_size}*{inp.completion_len}, "
        f"PPO B*k*completion with k = {inp.ppo_samples_per_prompt} sample(s) per prompt; every completion is "
        "taken to run to --completion-len.",
        "Not counted: CUDA context and allocator fragmentation (often 1-3 GB per GPU), communication and "
        "temporary buffers.",
    ]
    return lines
