"""GPU memory of an RL fine-tuning step, component by component, GRPO beside PPO.

GRPO trains the actor, keeps a frozen reference only for its KL term, and
scores with a program; PPO also trains a critic (with its own optimizer state)
and holds a frozen reward model. ``plan`` puts bytes on each of those parts,
per GPU and over all GPUs, for the options of :class:`PlanInput`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Optional

from .assumptions import assumptions
from .costs import (StateCost, logit_value_bytes, logprob_bytes, state_cost, training_state,
                    weight_bytes)
from .inputs import PlanInput
from .model_shape import ModelShape, human_count, shape_from_params


@dataclass(frozen=True)
class Component:
    """One line of the table. ``bytes_total`` is all GPUs together; CPU RAM is counted apart."""

    name: str
    bytes_per_gpu: int
    bytes_total: int
    note: str = ""
    cpu_bytes: int = 0

    def to_dict(self) -> dict[str, object]:
        return {"name": self.name, "bytes_per_gpu": self.bytes_per_gpu, "bytes_total": self.bytes_total,
                "cpu_bytes": self.cpu_bytes, "note": self.note}


@dataclass
class AlgorithmPlan:
    algorithm: str
    components: list[Component]
    rollout_tokens_per_step: int
    sequences_per_step: int
    trainable_params: int            # actor (+ critic) parameters the optimizer updates
    training_state_bytes: int        # weights + grads + master + moments of the trained networks, GPU and CPU
    state_cost: StateCost

    @property
    def total_bytes(self) -> int:
        return sum(c.bytes_total for c in self.components)

    @property
    def per_gpu_bytes(self) -> int:
        return sum(c.bytes_per_gpu for c in self.components)

    @property
    def cpu_bytes(self) -> int:
        return sum(c.cpu_bytes for c in self.components)

    def component(self, name: str) -> Component:
        return next(c for c in self.components if c.name == name)


@dataclass
class Plan:
    input: PlanInput
    shape: ModelShape
    algorithms: dict[str, AlgorithmPlan]
    assumptions: list[str] = field(default_factory=list)

    @property
    def difference_bytes(self) -> Optional[int]:
        """PPO minus GRPO, all GPUs together; None unless both were planned."""
        if set(self.algorithms) != {"grpo", "ppo"}:
            return None
        return self.algorithms["ppo"].total_bytes - self.algorithms["grpo"].total_bytes

    @property
    def difference_per_gpu_bytes(self) -> Optional[int]:
        if set(self.algorithms) != {"grpo", "ppo"}:
            return None
        return self.algorithms["ppo"].per_gpu_bytes - self.algorithms["grpo"].per_gpu_bytes


def _spread(nbytes: int, sharded: bool, gpus: int) -> tuple[int, int]:
    """(per GPU, all GPUs): a sharded tensor is split N ways, an unsharded one is replicated N times."""
    return (math.ceil(nbytes / gpus), nbytes) if sharded else (nbytes, nbytes * gpus)


def activation_bytes(shape: ModelShape, seq: int, micro_batch: int, checkpointing: bool, dtype_bytes: int) -> int:
    """Activations the layers keep for the backward pass of one micro batch on one GPU.

    Per layer without recomputation, Korthikanti et al. 2022 (16-bit): ``s*b*(34*h + 5*a*s)``
    bytes. With gradient checkpointing each layer keeps only its bf16 input
    (``2*h*s*b``) and one layer at a time is rebuilt in full.
    """
    s, b, h = seq, micro_batch, shape.hidden
    full_layer = s * b * (34 * h + 5 * shape.heads * s)
    layers = shape.layers * 2 * h * s * b + full_layer if checkpointing else shape.layers * full_layer
    return layers * dtype_bytes // 2                     # the formula counts 16-bit values


def _trained(role: str, shape: ModelShape, inp: PlanInput, size_note: str) -> list[Component]:
    """Weights, gradients, optimizer moments and master weights of one trained network."""
    st = training_state(shape, inp.optimizer, inp.precision, inp.lora_rank)
    gpus, stage = inp.gpus, inp.stage
    w_note = (f"frozen {human_count(shape.params)} base + {human_count(st.trainable_params)} LoRA r={inp.lora_rank}"
              if inp.lora_rank else f"{human_count(st.trainable_params)} params")
    rows = [Component(f"{role} weights", *_spread(st.weights, stage >= 3, gpus), f"{w_note}{size_note}"),
            Component(f"{role} gradients", *_spread(st.grads, stage >= 2, gpus), "trainable only")]
    cost = state_cost(inp.optimizer, inp.precision)
    moments = {"adamw": f"AdamW m+v, {cost.moments // 2} B each", "adamw8bit": "8-bit AdamW m+v",
               "sgd": "SGD, no momentum"}[inp.optimizer]
    for name, nbytes, what in ((f"{role} optimizer moments", st.moments, moments),
                               (f"{role} master weights", st.master,
                                "fp32 copy" if st.master else "none without mixed precision")):
        per_gpu, total = _spread(nbytes, stage >= 1, gpus)
        if inp.offload and nbytes:
            rows.append(Component(name, 0, 0, f"{what}; in CPU RAM", cpu_bytes=total))
        else:
            rows.append(Component(name, per_gpu, total, what))
    return rows


def _frozen(name: str, shape: Optional[ModelShape], inp: PlanInput, absent_note: str) -> Component:
    if shape is None:
        return Component(name, 0, 0, absent_note)
    nbytes = shape.params * weight_bytes(inp.precision)
    return Component(name, *_spread(nbytes, inp.stage >= 3, inp.gpus), f"frozen, {human_count(shape.params)} params")


def plan_algorithm(algorithm: str, inp: PlanInput, actor: ModelShape) -> AlgorithmPlan:
    """Components of one algorithm's step; see the module docstring for who holds what."""
    ppo = algorithm == "ppo"
    samples = inp.ppo_samples_per_prompt if ppo else inp.group_size
    sequences = inp.batch_size * samples
    per_gpu_seqs = math.ceil(sequences / inp.gpus)       # data parallel: each GPU rolls out its share
    seq_len = inp.prompt_len + inp.completion_len
    wb = weight_bytes(inp.precision)

    rows = _trained("actor", actor, inp, "")
    critic = None
    if ppo:
        critic = actor if inp.critic_params is None else shape_from_params(inp.critic_params)
        rows += _trained("critic", critic, inp, ", actor-sized" if inp.critic_params is None else "")
    else:
        rows.append(Component("critic", 0, 0, "none: group mean is the baseline"))

    if not inp.kl:
        rows.append(Component("reference model", 0, 0, "none: KL term off"))
    elif inp.lora_rank:
        rows.append(Component("reference model", 0, 0, "actor base, adapters off: free"))
    else:
        rows.append(_frozen("reference model", actor, inp, ""))
    reward = (actor if inp.reward_params is None else shape_from_params(inp.reward_params)) if ppo else None
    rows.append(_frozen("reward model", reward, inp, "none: a program scores"))

    micro = min(inp.micro_batch, per_gpu_seqs)
    logits = logprob_bytes(actor.vocab, inp.completion_len, micro, logit_value_bytes(inp.precision))
    act = activation_bytes(actor, seq_len, micro, inp.gradient_checkpointing, wb) + logits
    if critic is not None:   # trained one after the other: the peak is the larger, not the sum
        act = max(act, activation_bytes(critic, seq_len, micro, inp.gradient_checkpointing, wb))
    rows.append(Component("activations", act, act * inp.gpus,
                          f"{micro} x {seq_len} tokens, "
                          f"{'checkpointed' if inp.gradient_checkpointing else 'no recompute'}; "
                          f"incl. {logits / 1e9:.3g} GB of actor log-prob logits"))
    kv = actor.kv_bytes_per_token(wb) * seq_len * per_gpu_seqs
    rows.append(Component("rollout KV cache", kv, kv * inp.gpus,
                          f"{per_gpu_seqs} seqs x {seq_len} tokens"))

    trained = [training_state(actor, inp.optimizer, inp.precision, inp.lora_rank)]
    if critic is not None:
        trained.append(training_state(critic, inp.optimizer, inp.precision, inp.lora_rank))
    state_rows = [c for c in rows if c.name.startswith(("actor ", "critic "))]
    return AlgorithmPlan(algorithm=algorithm, components=rows,
                         rollout_tokens_per_step=sequences * inp.completion_len, sequences_per_step=sequences,
                         trainable_params=sum(t.trainable_params for t in trained),
                         training_state_bytes=sum(c.bytes_total + c.cpu_bytes for c in state_rows),
                         state_cost=state_cost(inp.optimizer, inp.precision))


def plan(inp: PlanInput) -> Plan:
    """Plan every algorithm ``inp`` asks for; ``Plan.difference_bytes`` is PPO minus GRPO when both."""
    shape = inp.resolve_shape()
    algorithms = {name: plan_algorithm(name, inp, shape) for name in inp.algorithms}
    return Plan(input=inp, shape=shape, algorithms=algorithms, assumptions=assumptions(inp, shape))
