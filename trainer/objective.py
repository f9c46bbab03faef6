"""GRPO's loss for one micro-batch, as a value the ``Learner`` calls.

    logp, entropy = π_θ(tokens)                          (under autocast, entropy only if it is in the loss)
    w   = is_weights(π_old, π_sampler)                    (sampler/learner mismatch correction, optional)
    L   = policy_loss(logp, π_old, A, mask, …, N, w)      (algo.loss: TRL-exact clipped surrogate + β·KL)

π_old and π_ref are computed once per batch, before the μ passes (``fixed_logps``).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from .algo import policy_loss
from .algo.is_correction import is_weights
from .batch import token_logps
from .metrics import Stopwatch
from .records import LossSpec, TrainBatch

LOGGED = ("loss", "clip_low_frac", "clip_high_frac", "kl_mean", "entropy_mean", "ratio_mean")


@dataclass(frozen=True)
class GRPOMicroLoss:
    """Everything one micro-batch's loss depends on besides the micro-batch itself."""

    model: torch.nn.Module
    spec: LossSpec
    num_items: float                       # N: completion tokens over every process
    num_processes: int
    autocast: Callable[[], AbstractContextManager]
    old_logp: Optional[torch.Tensor]       # [B, L-1] π_old, when μ > 1
    ref_logp: Optional[torch.Tensor]       # [B, L-1] π_ref, when β > 0
    is_mode: Optional[str]
    is_cap: float

    def __call__(self, part: TrainBatch, rows: slice, n_micro: int, pass_index: int
                 ) -> tuple[torch.Tensor, dict[str, float]]:
        with self.autocast():
            # the entropy carries a gradient only when the loss has an entropy bonus
            logp, entropy = token_logps(self.model, part, self.spec.temperature, with_entropy=True,
                                        entropy_grad=self.spec.entropy_coef > 0)
        logged: dict[str, float] = sampler_mismatch(logp.detach(), part) if pass_index == 0 else {}
        old = None if self.old_logp is None else self.old_logp[rows]
        weight = None
        if self.is_mode is not None:
            weight = is_weights(logp.detach() if old is None else old, part.sampler_logp, part.mask,
                                self.is_mode, c_max=self.is_cap)
            if part.mask.any():
                logged["is_weight_mean"] = float(weight[part.mask > 0].mean())
        out = policy_loss(logp, old, part.advantages, part.mask, **self.spec.policy_kwargs(),
                          ref_logp=None if self.ref_logp is None else self.ref_logp[rows],
                          num_items_in_batch=self.num_items, num_processes=self.num_processes,
                          # TRL counts steps_per_generation in micro-batches: K optimizer steps of M each
                          grad_accum_steps=n_micro, steps_per_generation=self.spec.steps_per_generation * n_micro,
                          entropy=entropy, is_weight=weight)
        for key in LOGGED:
            value = getattr(out, key)
            if value is not None:
                logged[key] = float(value.detach())
        return out.loss, logged


def fixed_logps(model: torch.nn.Module, batch: TrainBatch, micro: list[slice], temperature: float,
                autocast: Callable[[], AbstractContextManager]) -> torch.Tensor:
    """[B, L-1] log-probs of ``batch`` under ``model``, without gradients, micro-batch by
    micro-batch, through the same precision path as the policy's own forward."""
    with torch.no_grad(), autocast():
        return torch.cat([token_logps(model, batch.slice(m), temperature)[0].float() for m in micro])


def reference_logps(policy: torch.nn.Module, ref_model: Optional[torch.nn.Module], unwrap: Callable[[Any], Any],
                    batch: TrainBatch, micro: list[slice], temperature: float,
                    autocast: Callable[[], AbstractContextManager], watch: Stopwatch) -> torch.Tensor:
    """π_ref: the frozen copy, or with LoRA the policy with its adapters off."""
    with watch.section("reference"):
        if ref_model is not None:
            return fixed_logps(ref_model, batch, micro, temperature, autocast)
        with unwrap(policy).disable_adapter():
            return fixed_logps(policy, batch, micro, temperature, autocast)


def sampler_mismatch(logp: torch.Tensor, part: TrainBatch) -> dict[str, float]:
    """How far the sampler's log-probs are from the learner's on the same tokens (vLLM vs
    transformers kernels, precision): the importance ratio π_learner/π_sampler per token."""
    mask = part.mask > 0
    if not mask.any():
        return {}
    diff = (logp - part.sampler_logp)[mask]
    ratio = diff.exp()
    return {"sampler_logp_diff_mean": float(diff.abs().mean()), "sampler_logp_diff_max": float(diff.abs().max()),
            "sampler_ratio_min": float(ratio.min()), "sampler_ratio_mean": float(ratio.mean()),
            "sampler_ratio_max": float(ratio.max())}


__all__ = ["GRPOMicroLoss", "fixed_logps", "reference_logps", "sampler_mismatch"]
