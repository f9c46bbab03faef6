"""The clipped GRPO policy loss (PPO surrogate without a critic), as TRL 1.16 computes it.

Per completion i and token t, with mask m_it, log-ratio l_it = log pi_theta - log pi_old:

    rho_it  = exp(l_it)                                         importance_level="token"
    rho_i   = exp(sum_t m_it l_it / max(1, sum_t m_it))          "sequence" (GSPO), broadcast over t
    rho^    = clip(rho, 1 - eps_low, 1 + eps_high)               eps_high > eps_low: DAPO clip-higher
    rho     = min(rho, delta)   if delta is set                  INTELLECT-2; applied after rho^ is taken
    L_it    = -min(rho A_i, rho^ A_i) + beta KL_it               KL (k3) is added, not importance-weighted

and the per-micro-batch scalar (M = gradient accumulation steps, P = processes), as TRL
1.16's ``GRPOTrainer._compute_loss`` computes it for one micro-batch of B rows:

    grpo     (1/M) (1/B) sum_i  sum_t L m / max(1, sum_t m)      mean of per-sequence means
    bnpo     (1/M) sum_it L m / max(1, sum_it m)                 token mean of this micro-batch
    dr_grpo  (1/M) sum_it L m / (B * max_completion_length)      constant normaliser: no length bias
    dapo     sum_it L m / (max(1, N) / P * M / S)                N = num_items_in_batch: the tokens of
                                                                 the whole generation batch, all ranks;
                                                                 S = steps_per_generation (= M by default,
                                                                 so no 1/M: N already spans the window)

An entropy bonus subtracts ``entropy_coef * (masked mean entropy of the micro-batch) / M``;
TRL 1.16 deliberately does not use the loss type's normaliser for it.

TRL's grpo, bnpo and dr_grpo normalise each micro-batch by its own rows or tokens and then
divide by M, so the accumulated loss is the batch's only when every micro-batch has the same
rows (grpo, dr_grpo) or the same tokens (bnpo, the entropy bonus): a short last micro-batch
weighs each of its rows more. Given the whole batch's counts on this process,
B_all = ``batch_rows`` and T_all = ``batch_tokens``, each micro-batch takes its share instead:

    grpo     sum_i [sum_t L m / max(1, sum_t m)] / B_all
    bnpo     sum_it L m / max(1, T_all)
    dr_grpo  sum_it L m / (B_all * max_completion_length)
    entropy  entropy_coef * sum_it H m / max(1, T_all)

and the micro-batches add up to the loss of the whole batch, for any split (dapo already does:
N does not depend on the split). With equal micro-batches this is TRL's grpo and dr_grpo
exactly (B_all = M B); TRL's bnpo and entropy bonus differ from it whenever the micro-batches
hold different token counts (TRL documents its bnpo as depending on the local batch size).

The mask is the caller's: it must already exclude padding, prompt and tool-output tokens
and, if wanted, whole truncated completions (see ``mask_truncated``). Masked positions get
no loss and no gradient, whatever values ``logp`` holds there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from .kl import KLKind, kl_estimate

LossType = Literal["grpo", "bnpo", "dr_grpo", "dapo"]
ImportanceLevel = Literal["token", "sequence"]


@dataclass(frozen=True)
class LossOutput:
    """The scalar to backpropagate and detached 0-d metrics (no host sync until you ``.item()``)."""

    loss: Tensor                 # scalar, with grad
    clip_low_frac: Tensor        # share of tokens (sequences, for "sequence") with rho < 1-eps_low and A < 0
    clip_high_frac: Tensor       # ... with rho > 1+eps_high and A > 0
    clip_region_frac: Tensor     # either of the two
    ratio_mean: Tensor           # rho over masked tokens (over non-empty sequences, for "sequence")
    ratio_min: Tensor
    ratio_max: Tensor
    kl_mean: Tensor | None       # masked token mean of the KL estimate; None without ref_logp
    entropy_mean: Tensor | None  # masked token mean of the entropy; None without entropy
    # What the means above are over, so that micro-batches combine into the batch's mean
    # (sum = mean * count): the masked tokens; the clip fractions' units (tokens, or sequences
    # for "sequence"); the ratio's (tokens, or non-empty sequences).
    tokens: Tensor | None = None
    clip_count: Tensor | None = None
    ratio_count: Tensor | None = None


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of ``x`` where ``mask`` is set; an empty selection gives 0 (it adds nothing to a loss).

    Reduced in at least float32: a bfloat16 sum stops counting exactly at 256 tokens.
    """
    mask = mask.to(torch.promote_types(x.dtype, torch.float32))
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1.0)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1.0)


def mask_truncated(mask: Tensor, is_truncated: Tensor) -> Tensor:
    """Zero the whole row of every truncated completion (DAPO's overlong filtering).

    A completion cut off by ``max_completion_length`` has no final answer, so its reward says
    little about its tokens; dropping it keeps that noise out of the gradient.
    """
    keep = ~is_truncated.to(device=mask.device, dtype=torch.bool)
    return mask * keep.unsqueeze(1).to(mask.dtype)


def policy_loss(
    logp: Tensor,
    old_logp: Tensor | None,
    advantages: Tensor,
    mask: Tensor,
    *,
    loss_type: LossType = "dapo",
    importance_level: ImportanceLevel = "token",
    epsilon_low: float = 0.2,
    epsilon_high: float | None = None,
    delta: float | None = None,
    beta: float = 0.0,
    ref_logp: Tensor | None = None,
    kl_kind: KLKind = "k3",
    max_completion_length: int | None = None,
    num_items_in_batch: float | Tensor | None = None,
    num_processes: int = 1,
    grad_accum_steps: int = 1,
    steps_per_generation: int | None = None,
    entropy: Tensor | None = None,
    entropy_coef: float = 0.0,
    is_weight: Tensor | None = None,
    batch_rows: int | None = None,
    batch_tokens: float | Tensor | None = None,
) -> LossOutput:
    """Clipped GRPO surrogate loss for one micro-batch (see the module docstring for the formulas).

    Shapes: ``logp``, ``old_logp``, ``ref_logp``, ``entropy``, ``mask`` are [B, T] over completion
    tokens; ``advantages`` is [B] (or [B, T] for per-token advantages).

    ``old_logp=None`` means the batch is used once, right after it was sampled: pi_old is
    pi_theta itself, detached, so rho = 1 in value and the gradient is A * grad log pi.
    ``max_completion_length`` (dr_grpo) defaults to T. ``num_items_in_batch`` (dapo) is the
    masked-token count of the whole generation batch over all processes; None means this
    micro-batch is all there is (its own token count, no P, M or S scaling).
    ``steps_per_generation`` defaults to ``grad_accum_steps``, TRL's default.
    In evaluation TRL uses M = S = 1.

    ``batch_rows`` / ``batch_tokens``: the rows and masked tokens of the whole batch this
    micro-batch belongs to (this process's). Given, grpo, dr_grpo (rows), bnpo and the entropy
    bonus (tokens) divide by them instead of by this micro-batch's counts and M, so that the
    micro-batches' losses and gradients add up to the whole batch's for any split (module
    docstring). None: TRL's per-micro-batch normalisers.
    """
    if logp.dim() != 2 or mask.shape != logp.shape:
        raise ValueError(f"logp and mask must both be [B, T]; got {tuple(logp.shape)}, {tuple(mask.shape)}")
    if beta != 0.0 and ref_logp is None:
        raise ValueError("beta != 0 needs ref_logp")
    if entropy_coef != 0.0 and entropy is None:
        raise ValueError("entropy_coef != 0 needs entropy")
    eps_high = epsilon_low if epsilon_high is None else epsilon_high
    M = grad_accum_steps
    S = grad_accum_steps if steps_per_generation is None else steps_per_generation

    valid = mask.to(torch.bool)
    # All loss arithmetic in at least float32, whatever the log-probs come in: a bf16 exp of a
    # log-ratio is off by ~0.4%, and a bf16 sum cannot count tokens past 256.
    dtype = torch.promote_types(logp.dtype, torch.float32)
    m = valid.to(dtype)

    def clean(x: Tensor) -> Tensor:
        # Padding may hold anything (even -inf); zero it before it reaches an exp or a sum, so
        # masked positions get exactly zero loss and zero gradient (0 * NaN would not be 0).
        return x.to(dtype).masked_fill(~valid, 0.0)

    logp = clean(logp)
    old_logp = logp.detach() if old_logp is None else clean(old_logp)
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)  # [B, 1]: one advantage per completion, broadcast over t

    log_importance = _log_importance(logp - old_logp, m, importance_level)   # [B, T] or [B, 1]
    ratio = torch.exp(log_importance)

    # PPO clip. The clipped term uses the unclamped ratio; delta then caps the unclipped
    # term too, so a negative advantage cannot be multiplied by an unbounded ratio.
    clipped_ratio = torch.clamp(ratio, 1.0 - epsilon_low, 1.0 + eps_high)
    if delta is not None:
        ratio = torch.clamp(ratio, max=delta)
    per_token_loss = -torch.min(ratio * advantages, clipped_ratio * advantages)
    if is_weight is not None:
        # Sampler/learner mismatch correction (vLLM): weights the surrogate, as TRL does.
        per_token_loss = per_token_loss * is_weight.detach()

    # KL penalty to the reference policy, added after the surrogate (not importance-weighted).
    kl = None
    if ref_logp is not None:
        kl = kl_estimate(logp, clean(ref_logp), kl_kind)
        if beta != 0.0:
            per_token_loss = per_token_loss + beta * kl

    # [B, 1] for a sequence-level loss without KL: multiplying by the mask broadcasts it to [B, T].
    loss = _aggregate(per_token_loss * m, m, loss_type, max_completion_length, num_items_in_batch,
                      num_processes, M, S, batch_rows, batch_tokens)

    entropy_mean = None
    if entropy is not None:
        # Entropy bonus: the mean token entropy, scaled only for accumulation (TRL), or this
        # micro-batch's share of the whole batch's mean when its token count is given.
        entropy_term = masked_mean(clean(entropy), m)
        if entropy_coef != 0.0:
            if batch_tokens is None:
                loss = loss - entropy_coef * entropy_term / M
            else:
                loss = loss - entropy_coef * (clean(entropy) * m).sum() / _at_least_one(batch_tokens, m)
        entropy_mean = entropy_term.detach()

    with torch.no_grad():
        clip = _clip_metrics(ratio, log_importance, advantages, valid, m, epsilon_low, eps_high, importance_level)
    return LossOutput(loss=loss, **clip, kl_mean=None if kl is None else masked_mean(kl.detach(), m),
                      entropy_mean=entropy_mean, tokens=m.sum())

def _log_importance(log_ratio: Tensor, m: Tensor, level: ImportanceLevel) -> Tensor:
    """log rho = log pi_theta - log pi_old, per token [B, T] or (GSPO) the sequence mean [B, 1]."""
    if level == "token":
        return log_ratio
    if level == "sequence":
        return masked_mean(log_ratio, m, dim=-1).unsqueeze(-1)
    raise ValueError(f"unknown importance_level {level!r}: expected 'token' or 'sequence'")


def _at_least_one(count: float | Tensor, m: Tensor) -> Tensor:
    return torch.as_tensor(count, device=m.device).to(m.dtype).clamp(min=1.0)


def _aggregate(masked_loss: Tensor, m: Tensor, loss_type: LossType, max_completion_length: int | None,
               num_items_in_batch: float | Tensor | None, num_processes: int, M: int, S: int,
               batch_rows: int | None = None, batch_tokens: float | Tensor | None = None) -> Tensor:
    """The micro-batch loss from the masked per-token losses [B, T], by ``loss_type`` (module docstring)."""
    B, T = m.shape
    if loss_type == "grpo":
        per_sequence = masked_loss.sum(-1) / m.sum(-1).clamp(min=1.0)
        return per_sequence.mean() / M if batch_rows is None else per_sequence.sum() / max(1, batch_rows)
    if loss_type == "bnpo":
        if batch_tokens is None:
            return masked_loss.sum() / m.sum().clamp(min=1.0) / M
        return masked_loss.sum() / _at_least_one(batch_tokens, m)
    if loss_type == "dr_grpo":
        L = T if max_completion_length is None else max_completion_length
        return masked_loss.sum() / (B * L) / M if batch_rows is None else masked_loss.sum() / (max(1, batch_rows) * L)
    if loss_type == "dapo":
        if num_items_in_batch is None:
            tokens = m.sum() if batch_tokens is None else batch_tokens
            return masked_loss.sum() / _at_least_one(tokens, m)
        # N counts the whole generation batch (S micro-batches, P ranks): rescale it to the
        # tokens of one accumulation window on one rank, so that the accumulated and
        # DDP-averaged gradient is that of the global token mean.
        n = torch.as_tensor(num_items_in_batch, device=m.device).to(m.dtype)
        return masked_loss.sum() / (n.clamp(min=1.0) / num_processes * M / S)
    raise ValueError(f"unknown loss_type {loss_type!r}: expected 'grpo', 'bnpo', 'dr_grpo' or 'dapo'")


def _clip_metrics(ratio: Tensor, log_importance: Tensor, advantages: Tensor, valid: Tensor, m: Tensor,
                  epsilon_low: float, eps_high: float, level: ImportanceLevel) -> dict[str, Tensor]:
    """Where the clip removed the gradient (rho after the delta cap, as in TRL), and the raw
    ratio's mean/min/max (before the cap: how far pi_theta has drifted); no host sync."""
    low = ((ratio < 1.0 - epsilon_low) & (advantages < 0)).to(m.dtype)
    high = ((ratio > 1.0 + eps_high) & (advantages > 0)).to(m.dtype)
    region = torch.maximum(low, high)
    raw_ratio = torch.exp(log_importance)  # before the delta cap: how far pi_theta has drifted
    if level == "sequence" and low.shape[1] == 1:
        # One flag per sequence, averaged over all B sequences (as TRL logs them).
        low, high, region = low.mean(), high.mean(), region.mean()
        clip_count = m.new_tensor(float(m.shape[0]))
    else:  # per token (per-token advantages make sequence-level flags per token again)
        low, high, region = masked_mean(low, m), masked_mean(high, m), masked_mean(region, m)
        clip_count = m.sum()
    if level == "sequence":
        raw_ratio, ratio_valid = raw_ratio.squeeze(1), valid.any(dim=1)
    else:
        ratio_valid = valid
    nan = raw_ratio.new_tensor(torch.nan)
    any_valid = ratio_valid.any()  # a tensor, not a bool: no host sync
    return dict(
        clip_low_frac=low,
        clip_high_frac=high,
        clip_region_frac=region,
        clip_count=clip_count,
        ratio_count=ratio_valid.sum().to(m.dtype),
        ratio_mean=torch.where(any_valid, masked_mean(raw_ratio, ratio_valid), nan),
        ratio_min=torch.where(any_valid, torch.where(ratio_valid, raw_ratio, torch.inf).amin(), nan),
        ratio_max=torch.where(any_valid, torch.where(ratio_valid, raw_ratio, -torch.inf).amax(), nan),
    )
