"""Importance-sampling correction for rollouts from another engine (vLLM).

The sampler's kernels, precision or slightly stale weights make π_sampler differ from
π_old, the learner's policy at sampling time. The surrogate is reweighted by
r = π_old / π_sampler, per token or per sequence (the product over its tokens), and either
truncated into [C_min, C_max] (bounded variance, a little bias) or masked to 0 outside it
(drops the samples that drifted most). C_min = 0 when not given: an upper bound only.

    d_t = (log π_old − log π_sampler)_t · m_t
    token:     r_t = exp(d_t)                      sequence:  r = exp(Σ_t d_t), on each of its tokens
    truncate:  w = min(max(r, C_min), C_max)       mask:      w = r · 1[C_min ≤ r ≤ C_max]

Variance against length. The tokens were drawn from π_sampler, so per token
E[d_t] = −KL(π_sampler ‖ π_old) =: −κ and Var[d_t] =: σ². Over T tokens (roughly independent)
the sequence log-weight log r = Σ_t d_t has mean −Tκ and variance Tσ²: its spread grows as
√T σ and its centre drifts down, so on long completions the sequence weights span orders of
magnitude and the correction leans on a few sequences (sequence_truncate), or drops every
sequence whose r leaves [C_min, C_max] (sequence_mask: a share that tends to 1 as T grows).
A token weight keeps its per-token spread, exp(d_t) with Var ≈ σ², whatever T, and
truncation bounds it by C_max. What truncation leaves uncorrected, per token, is the mass
E_sampler[(r_t − C_max)⁺] (and E_sampler[(C_min − r_t)⁺] below), ≈ 0 when σ ≪ log C_max.

Hence "auto" with a vLLM backend resolves to token_truncate with C_max = 2 (``config.
resolve_is_correction``): truncated importance sampling, TIS (Yao et al. 2025, "Your
efficient RL framework secretly brings you off-policy RL training"; verl's token-level
rollout IS with its threshold 2). Token-level weights correct the per-token action
distribution, not the drift of the prefixes each token is conditioned on: a bias of order
the per-token mismatch, which the sequence product would remove at the price of the
variance above. ``bench/is_correction.py`` measures both on synthetic mismatches.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

import torch
from torch import Tensor

ISMode = Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]
MODES = ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")


@dataclass(frozen=True)
class ISWeights:
    """The weights and where the bounds acted, all [B, T] and detached."""

    weight: Tensor      # w, 0 off the mask
    truncated: Tensor   # bool: on the mask, r outside [C_min, C_max] and set to the bound (truncate modes)
    masked: Tensor      # bool: on the mask, r outside [C_min, C_max] and set to 0 (mask modes)


def importance_weights(old_logp: Tensor, sampler_logp: Tensor, mask: Tensor, mode: ISMode = "token_truncate",
                       c_max: float = 2.0, c_min: Optional[float] = None) -> ISWeights:
    """w = π_old / π_sampler per token or sequence, truncated or masked (module docstring)."""
    if mode not in MODES:
        raise ValueError(f"unknown IS correction mode {mode!r}; use token_truncate, token_mask, "
                         "sequence_truncate or sequence_mask")
    on = mask.to(torch.bool)
    # masked_fill, not a product: a padding value of -inf would make 0 * inf = NaN.
    d = (old_logp.detach().float() - sampler_logp.float()).masked_fill(~on, 0.0)
    log_r = d if mode.startswith("token") else d.sum(-1, keepdim=True).expand_as(d)
    r = log_r.exp()
    lo = 0.0 if c_min is None else c_min
    outside = ((r > c_max) | (r < lo)) & on
    if mode.endswith("truncate"):
        w, truncated, masked = r.clamp(min=lo, max=c_max), outside, torch.zeros_like(outside)
    else:
        # where, not r * keep: r may be inf (a sequence log-weight past ~88), and inf * 0 is NaN
        w, truncated, masked = torch.where(outside, 0.0, r), torch.zeros_like(outside), outside
    return ISWeights(weight=torch.where(on, w, 0.0).detach(), truncated=truncated, masked=masked)


def is_weights(old_logp: Tensor, sampler_logp: Tensor, mask: Tensor, mode: ISMode = "token_truncate",
               c_max: float = 2.0, c_min: Optional[float] = None) -> Tensor:
    """[B, T] weights (0 off the mask), detached."""
    return importance_weights(old_logp, sampler_logp, mask, mode, c_max, c_min).weight
