"""GRPO's loss for one micro-batch, as a value the ``Learner`` calls.

    logp, entropy = π_θ(tokens)                          (under autocast, entropy only if it is in the loss)
    w   = is_weights(π_old, π_sampler)                    (sampler/learner mismatch correction, optional)
    L   = policy_loss(logp, π_old, A, mask, …, N, w)      (algo.loss: TRL-exact clipped surrogate + β·KL)

π_old and π_ref are computed once per batch, before the μ passes (``fixed_logps``).

Normalisation: each micro-batch divides by the whole batch's rows and tokens (``part.whole``),
so the micro-batches add up to the batch's loss and gradient for every loss type, whatever
the micro-batch size (``algo.loss`` module docstring; TRL's grpo and dr_grpo are the same
whenever its micro-batches are equal, its bnpo and entropy bonus only when they hold equal
token counts).

Metrics, as TRL defines them: ``entropy_mean``, ``kl_mean`` and the clip fractions
``clip_low_frac`` / ``clip_high_frac`` / ``clip_region_frac`` (TRL's ``entropy``, ``kl``,
``clip_ratio/low_mean`` / ``high_mean`` / ``region_mean``) are means over every masked
completion token of the batch, not averages of micro-batch means (``records.Mean``). Rows the
trainer skipped as inert (advantage 0: loss and gradient exactly 0) count in the clip
fractions' denominators, as in TRL, whose flags need A ≠ 0; ``entropy_mean``, ``kl_mean`` and
the ratio statistics ``ratio_mean`` / ``ratio_min`` / ``ratio_max`` (ρ = π_θ/π_old, which TRL
does not log) need a forward pass and are over the rows that had one (every row unless the
trainer skipped some). The IS correction logs ``is_weight_mean``, ``is_truncated_frac`` and
``is_masked_frac`` (shares of masked tokens whose weight a bound truncated or set to 0).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from ..algo import LossOutput, policy_loss
from ..algo.is_correction import ISWeights, importance_weights
from ..batch import token_logps
from ..metrics import Stopwatch
from ..records import LossSpec, Max, Mean, Min, RowCount, TrainBatch


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
                 ) -> tuple[torch.Tensor, dict[str, Any]]:
        with self.autocast():
            # the entropy carries a gradient only when the loss has an entropy bonus
            logp, entropy = token_logps(self.model, part, self.spec.temperature, with_entropy=True,
                                        entropy_grad=self.spec.entropy_coef > 0)
        logged: dict[str, Any] = sampler_mismatch(logp.detach(), part) if pass_index == 0 else {}
        old = None if self.old_logp is None else self.old_logp[rows]
        weight = None
        if self.is_mode is not None:
            w = importance_weights(logp.detach() if old is None else old, part.sampler_logp, part.mask,
                                   self.is_mode, c_max=self.is_cap, c_min=self.spec.is_min)
            weight = w.weight
            logged.update(is_metrics(w, part.mask))
        whole = part.whole if part.whole is not None else part.counts()
        out = policy_loss(logp, old, part.advantages, part.mask, **self.spec.policy_kwargs(),
                          ref_logp=None if self.ref_logp is None else self.ref_logp[rows],
                          num_items_in_batch=self.num_items, num_processes=self.num_processes,
                          # TRL counts steps_per_generation in micro-batches: K optimizer steps of M each
                          grad_accum_steps=n_micro, steps_per_generation=self.spec.steps_per_generation * n_micro,
                          entropy=entropy, is_weight=weight, batch_rows=whole.rows, batch_tokens=whole.tokens)
        # part.inert: the skipped rows this micro-batch accounts for (the learner hands them to the first)
        logged.update(loss_metrics(out, part.inert, per_sequence=self.spec.importance_level == "sequence"
                                   and part.advantages.dim() == 1))
        return out.loss, logged


def loss_metrics(out: LossOutput, inert: RowCount = RowCount(), per_sequence: bool = False) -> dict[str, Any]:
    """One micro-batch's loss metrics, for the learner to combine over the batch (module
    docstring): sums and counts (``Mean``), the ratio's extremes (``Min``, ``Max``), the loss.
    ``inert``: skipped rows this micro-batch accounts for, whose clip flags are 0 (A = 0);
    ``per_sequence``: the clip fractions are over sequences (GSPO), not tokens."""
    skipped = inert.rows if per_sequence else inert.tokens   # their flags are 0: only the count grows

    def total(mean: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
        return torch.where(count > 0, mean * count, 0.0)   # an empty count leaves no NaN behind

    names = ["clip_low_frac", "clip_high_frac", "clip_region_frac", "ratio_mean", "kl_mean", "entropy_mean"]
    means = [out.clip_low_frac, out.clip_high_frac, out.clip_region_frac, out.ratio_mean, out.kl_mean,
             out.entropy_mean]
    counts = [out.clip_count, out.clip_count, out.clip_count, out.ratio_count, out.tokens, out.tokens]
    extra = [skipped, skipped, skipped, 0.0, 0.0, 0.0]
    kept = [(n, m.detach().double(), c.double(), e) for n, m, c, e in zip(names, means, counts, extra)
            if m is not None]
    flat = torch.stack([out.loss.detach().double(), out.ratio_count.double(), out.ratio_min.double(),
                        out.ratio_max.double()]
                       + [x for _, m, c, e in kept for x in (total(m, c), c + e)]).tolist()   # one host sync
    logged: dict[str, Any] = {"loss": flat[0]}
    if flat[1] > 0:
        logged.update(ratio_min=Min(flat[2]), ratio_max=Max(flat[3]))
    for i, (name, _, _, _) in enumerate(kept):
        logged[name] = Mean(flat[4 + 2 * i], flat[5 + 2 * i])
    return logged


def is_metrics(w: ISWeights, mask: torch.Tensor) -> dict[str, Mean]:
    """The IS correction over the masked tokens: the mean weight, and the shares of tokens whose
    weight a bound truncated (truncate modes) or set to 0 (mask modes)."""
    on = mask > 0
    n = on.sum()
    sums = torch.stack([w.weight[on].sum(), w.truncated[on].sum(), w.masked[on].sum(), n]).double().tolist()
    return {"is_weight_mean": Mean(sums[0], sums[3]), "is_truncated_frac": Mean(sums[1], sums[3]),
            "is_masked_frac": Mean(sums[2], sums[3])}


def fixed_logps(model: torch.nn.Module, batch: TrainBatch, micro: list[slice], temperature: float,
                autocast: Callable[[], AbstractContextManager]) -> torch.Tensor:
    """[B, L-1] log-probs of ``batch`` under ``model``, without gradients, micro-batch by
    micro-batch, through the same precision path as the policy's own forward. A batch with no
    rows (every group taught nothing, so every row was left out as inert) gives [0, L-1]."""
    if not micro:
        return torch.zeros(0, batch.mask.shape[-1])
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


def sampler_mismatch(logp: torch.Tensor, part: TrainBatch) -> dict[str, Any]:
    """How far the sampler's log-probs are from the learner's on the same tokens (vLLM vs
    transformers kernels, precision): the importance ratio π_learner/π_sampler per token, over
    the batch's masked tokens (means by sum and count, extremes as such)."""
    mask = part.mask > 0
    if not mask.any():
        return {}
    diff = (logp - part.sampler_logp)[mask]
    ratio = diff.exp()
    n = float(mask.sum())
    s = torch.stack([diff.abs().sum(), diff.abs().max(), ratio.min(), ratio.sum(), ratio.max()]).double().tolist()
    return {"sampler_logp_diff_mean": Mean(s[0], n), "sampler_logp_diff_max": Max(s[1]),
            "sampler_ratio_min": Min(s[2]), "sampler_ratio_mean": Mean(s[3], n), "sampler_ratio_max": Max(s[4])}


__all__ = ["GRPOMicroLoss", "fixed_logps", "is_metrics", "loss_metrics", "reference_logps", "sampler_mismatch"]
