"""Importance-sampling correction for rollouts from another engine (vLLM).

The sampler's kernels, precision or slightly stale weights make π_sampler differ from
π_old, the learner's policy at sampling time. The surrogate is reweighted by
w = π_old / π_sampler, per token or per sequence (the product over its tokens), and
either truncated at C_max (bounded variance, a little bias) or masked to 0 outside
[C_min, C_max] (drops the samples that drifted most).

    d_t = (log π_old − log π_sampler)_t · m_t
    token:    w_t = exp(d_t)            sequence: w = exp(Σ_t d_t)
"""

from __future__ import annotations

from typing import Literal, Optional

import torch
from torch import Tensor

ISMode = Literal["token_truncate", "token_mask", "sequence_truncate", "sequence_mask"]


def is_weights(old_logp: Tensor, sampler_logp: Tensor, mask: Tensor, mode: ISMode = "sequence_mask",
               c_max: float = 3.0, c_min: Optional[float] = None) -> Tensor:
    """[B, T] weights (0 off the mask), detached."""
    m = mask.float()
    d = (old_logp.detach().float() - sampler_logp.float()) * m
    if mode.startswith("token"):
        w = d.exp()
    elif mode.startswith("sequence"):
        w = d.sum(-1, keepdim=True).exp().expand_as(d)
    else:
        raise ValueError(f"unknown IS correction mode {mode!r}; use token_truncate, token_mask, "
                         "sequence_truncate or sequence_mask")
    if mode.endswith("truncate"):
        w = w.clamp(min=c_min if c_min is not None else 0.0, max=c_max)
    else:
        keep = w <= c_max
        if c_min is not None:
            keep = keep & (w >= c_min)
        w = w * keep
    return (w * m).detach()
