"""PPO's extra pieces beside GRPO: per-token rewards, GAE advantages, the value loss.

Token positions are completion positions with ``mask`` = 1; a sequence's reward comes
at its last real token (the verifier scores the whole completion).

    δ_t = r_t + γ V_{t+1} − V_t              (V after the last token is 0)
    A_t = Σ_k (γλ)^k δ_{t+k}                (Schulman et al., 2016: GAE)
    R_t = A_t + V_t                          (the value target)
    L_V = ½ · mean_t max((V_t − R_t)², (clip(V_t, V_old ± ε_v) − R_t)²)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch
from torch import Tensor

from .loss import masked_mean


def token_rewards(scores: Tensor, mask: Tensor, kl: Optional[Tensor] = None, beta: float = 0.0) -> Tensor:
    """[B, T] rewards: the sequence score at each row's last masked token, minus β·KL per token."""
    rewards = torch.zeros_like(mask, dtype=torch.float32)
    lengths = mask.sum(-1).long()
    has = lengths > 0
    # The last masked position of each row (mask is contiguous per row).
    last = (mask * torch.arange(mask.shape[1], device=mask.device)).argmax(-1)
    rows = torch.arange(mask.shape[0], device=mask.device)[has]
    rewards[rows, last[has]] = scores[has].float()
    if kl is not None and beta:
        rewards = rewards - beta * kl.float() * mask
    return rewards * mask


def gae(rewards: Tensor, values: Tensor, mask: Tensor, gamma: float = 1.0, lam: float = 0.95) -> tuple[Tensor, Tensor]:
    """Generalized advantage estimates and returns over the masked positions of each row."""
    rewards, values, mask = rewards.float(), values.float(), mask.float()
    advantages = torch.zeros_like(rewards)
    running = torch.zeros(rewards.shape[0], device=rewards.device)
    next_value = torch.zeros(rewards.shape[0], device=rewards.device)
    for t in reversed(range(rewards.shape[1])):
        m = mask[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        running = delta + gamma * lam * running
        # Outside the completion nothing accumulates and nothing is carried back.
        running = running * m
        advantages[:, t] = running
        next_value = torch.where(m > 0, values[:, t], next_value)
    returns = advantages + values * mask
    return advantages * mask, returns * mask


def whiten(x: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """Normalise over the masked entries (PPO's advantage whitening)."""
    mean = masked_mean(x, mask)
    var = masked_mean((x - mean) ** 2, mask)
    out = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return out * mask


@dataclass(frozen=True)
class ValueLossOutput:
    loss: Tensor
    clip_frac: Tensor
    explained_variance: Tensor


def value_loss(values: Tensor, old_values: Tensor, returns: Tensor, mask: Tensor,
               clip_range: Optional[float] = 0.2) -> ValueLossOutput:
    """½ · masked mean of the (clipped) squared error between V and its target."""
    err = (values - returns) ** 2
    if clip_range is not None:
        clipped = old_values + (values - old_values).clamp(-clip_range, clip_range)
        err_clipped = (clipped - returns) ** 2
        loss = 0.5 * masked_mean(torch.maximum(err, err_clipped), mask)
        clip_frac = masked_mean((err_clipped > err).float(), mask).detach()
    else:
        loss = 0.5 * masked_mean(err, mask)
        clip_frac = torch.zeros((), device=values.device)
    var_returns = masked_mean((returns - masked_mean(returns, mask)) ** 2, mask)
    residual = masked_mean((returns - values.detach()) ** 2, mask)
    explained = (1 - residual / var_returns.clamp_min(1e-8)).detach()
    return ValueLossOutput(loss=loss, clip_frac=clip_frac, explained_variance=explained)
