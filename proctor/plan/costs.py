"""Bytes per parameter for each optimizer and precision, one network's training state, and the
learner's log-prob logits.

Kept apart from the planner so that the measured test can compare exactly
this arithmetic with the tensors a real optimizer step leaves behind.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .model_shape import ModelShape

Optimizer = Literal["adamw", "adamw8bit", "sgd"]
Precision = Literal["bf16-mixed", "bf16", "fp32"]
OPTIMIZERS: tuple[str, ...] = ("adamw", "adamw8bit", "sgd")
PRECISIONS: tuple[str, ...] = ("bf16-mixed", "bf16", "fp32")


def weight_bytes(precision: str) -> int:
    """Bytes of one weight as stored on the GPU (also the dtype of frozen models, activations and KV cache)."""
    return 4 if precision == "fp32" else 2


@dataclass(frozen=True)
class StateCost:
    """Bytes held per *trainable* parameter, by part."""

    weights: int
    grads: int
    master: int       # fp32 copy the optimizer updates under mixed precision
    moments: int      # optimizer state: AdamW's m and v, or nothing for plain SGD
    optimizer: str
    precision: str

    @property
    def total(self) -> int:
        return self.weights + self.grads + self.master + self.moments

    def describe(self) -> str:
        """``bf16 weight 2 + bf16 grad 2 + fp32 master 4 + fp32 m 4 + fp32 v 4 = 16``."""
        w = "fp32" if self.weights == 4 else "bf16"
        parts = [f"{w} weight {self.weights}", f"{w} grad {self.grads}"]
        if self.master:
            parts.append(f"fp32 master {self.master}")
        if self.optimizer == "adamw8bit":
            parts += ["8-bit m 1", "8-bit v 1"]
        elif self.optimizer == "adamw":
            kind = "fp32" if self.moments == 8 else "bf16"
            parts += [f"{kind} m {self.moments // 2}", f"{kind} v {self.moments // 2}"]
        else:
            parts.append("SGD state 0")
        return " + ".join(parts) + f" = {self.total} bytes per trainable parameter"


def state_cost(optimizer: str, precision: str) -> StateCost:
    """Per-parameter bytes of weights, gradients, master copy and optimizer moments.

    * ``bf16-mixed``: bf16 weights and gradients, an fp32 master copy, fp32 moments
      (2 + 2 + 4 + 8 = 16 with AdamW);
    * ``bf16``: everything bf16, moments too, no master (2 + 2 + 4 = 8 with AdamW);
    * ``fp32``: fp32 weights, gradients and moments, no master (4 + 4 + 8 = 16 with AdamW).

    8-bit AdamW keeps each moment in one byte (the block-wise quantisation
    scales, a few bytes per 2048 values, are left out); SGD without momentum keeps nothing.
    """
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"--optimizer must be one of {', '.join(OPTIMIZERS)} (got {optimizer!r})")
    if precision not in PRECISIONS:
        raise ValueError(f"--precision must be one of {', '.join(PRECISIONS)} (got {precision!r})")
    w = weight_bytes(precision)
    master = 4 if precision == "bf16-mixed" else 0
    moment = {"adamw": 2 if precision == "bf16" else 4, "adamw8bit": 1, "sgd": 0}[optimizer]
    return StateCost(weights=w, grads=w, master=master, moments=2 * moment if optimizer != "sgd" else 0,
                     optimizer=optimizer, precision=precision)


@dataclass(frozen=True)
class TrainingState:
    """One trained network's parameters, gradients and optimizer state, unsharded, in bytes."""

    frozen_params: int        # LoRA's base weights: stored, never updated
    trainable_params: int
    weights: int
    grads: int
    master: int
    moments: int

    @property
    def total(self) -> int:
        return self.weights + self.grads + self.master + self.moments


def training_state(shape: ModelShape, optimizer: str, precision: str, lora_rank: int = 0) -> TrainingState:
    """Training state of one network: full fine-tuning, or a frozen base plus LoRA adapters.

    Under LoRA the base weights cost their storage only (no gradient, no
    optimizer state) and the adapters cost the full per-parameter price.
    """
    cost = state_cost(optimizer, precision)
    trainable = shape.lora_params(lora_rank) if lora_rank else shape.params
    frozen = shape.params if lora_rank else 0
    return TrainingState(frozen_params=frozen, trainable_params=trainable,
                         weights=frozen * weight_bytes(precision) + trainable * cost.weights,
                         grads=trainable * cost.grads, master=trainable * cost.master,
                         moments=trainable * cost.moments)


# The learner's log-prob chunking (proctor.trainer.batch.LOGP_CHUNK_VALUES / _FRACTION, tested
# equal): repeated here so that planning never imports torch.
LOGP_CHUNK_VALUES = 1 << 22
LOGP_CHUNK_FRACTION = 16
LOGP_TEMPORARIES = 3          # fp32 chunk-sized temporaries alive at once (log-softmax, exp, product)


def logit_value_bytes(precision: str) -> int:
    """Bytes per logit at the learner's peak: fp32 logits 4; pure bf16 keeps bf16 logits, 2;
    under bf16-mixed the head projects in bf16 and accelerate casts the output to fp32, both
    alive at the cast (and again when the gradient is cast back), 2 + 4."""
    return {"fp32": 4, "bf16": 2, "bf16-mixed": 6}[precision]


def logprob_bytes(vocab: int, completion_len: int, micro_batch: int, value_bytes: int) -> int:
    """Peak of the actor's log-probs for one micro batch (``token_logps``, forward and backward).

    Logits only at the completion positions (``completion_len + 1``: the last one is computed
    and dropped), at ``value_bytes`` each, plus a few fp32 chunk temporaries; the backward writes
    the logits' gradient over the logits, so there is no second tensor of that size.
    """
    chunk = min(LOGP_CHUNK_VALUES, micro_batch * completion_len * vocab // LOGP_CHUNK_FRACTION)
    return value_bytes * micro_batch * (completion_len + 1) * vocab + LOGP_TEMPORARIES * 4 * max(chunk, vocab)
