"""Group-relative advantages (GRPO) from scalar rewards, with invalid samples left out.

GRPO has no critic: the baseline for a completion is the mean reward of the G completions
sampled for the same prompt (its *group*). Samples are laid out group-contiguous,
``N = num_groups * G``, and a batch never splits a group. Groups may also differ in size
(``rollout.adaptive_group_size``): then ``group_size`` is the sizes in order, and each group's
statistics are over its own samples (laid out as a [num_groups, max size] table whose empty
cells count like invalid samples: NaN, outside every mean and std).

    A_i = (r_i - mean_g(r)) / (std_g(r) + eps)    scale="group"  (GRPO, DeepSeekMath)
    A_i = (r_i - mean_g(r)) / (std_B(r) + eps)    scale="batch"  (std over the whole batch)
    A_i =  r_i - mean_g(r)                         scale="none"   (Dr. GRPO: no std, no length bias)

The arithmetic is TRL 1.16's (``GRPOTrainer._generate_and_score_completions``): the std
has Bessel's correction (NaN for one sample), eps = 1e-4 is added to the std, and any
advantage that comes out NaN is set to 0.

Invalid samples: a sample that was not judged (verifier ``infra_error``, a timeout of the
grader itself) is *not* a wrong answer, and scoring it 0 would both bias its group's
baseline and push the policy away from it. It is left out of its group's mean and std
and gets advantage exactly 0. A reward of NaN (TRL: every reward function returned None)
or +-inf is treated the same way as ``valid=False``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Sequence

import torch
from torch import Tensor

Scale = Literal["group", "batch", "none"]
Center = Literal["group", "batch"]
Aggregation = Literal["sum_then_normalize", "normalize_then_sum"]


@dataclass(frozen=True)
class AdvantageStats:
    """Advantages and the group statistics behind them, all per sample (shape [N])."""

    advantages: Tensor     # [N]; exactly 0 for invalid samples
    group_mean: Tensor     # [N]; mean of the valid rewards of the sample's group (NaN if none is valid)
    group_std: Tensor      # [N]; Bessel std of the group's valid rewards (NaN if fewer than 2 are valid)
    zero_signal: Tensor    # [N] bool; the group's valid rewards are all equal (within atol): nothing to learn
    valid: Tensor          # [N] bool; the samples that took part (valid and a finite reward)
    frac_zero_signal: float  # fraction of *groups* with zero signal


def nanstd(x: Tensor, dim: int | None = None, keepdim: bool = False) -> Tensor:
    """Standard deviation ignoring NaNs, with Bessel's correction; NaN where fewer than 2 values."""
    if dim is None:
        x, dim = x.reshape(-1), 0
    present = ~torch.isnan(x)
    n = present.sum(dim=dim, keepdim=True)
    deviation = torch.where(present, x - torch.nanmean(x, dim=dim, keepdim=True), 0.0)
    variance = deviation.square().sum(dim=dim, keepdim=True) / (n - 1).clamp(min=1)
    std = torch.where(n > 1, variance.sqrt(), torch.nan)
    return std if keepdim else std.squeeze(dim)


def _check_groups(n: int, group_size: int) -> None:
    if group_size < 1 or n % group_size != 0:
        raise ValueError(f"{n} samples do not split into whole groups of {group_size}")


def _table(r: Tensor, is_valid: Tensor, group_size: int | Sequence[int]) -> tuple[Tensor, Tensor, Tensor]:
    """The samples [N] laid out by group: (rewards [num_groups, width], NaN in empty cells;
    valid [num_groups, width], False there; each group's size [num_groups])."""
    n = r.numel()
    if isinstance(group_size, int):
        _check_groups(n, group_size)
        sizes = torch.full((n // group_size,), group_size, dtype=torch.long, device=r.device)
        return r.view(-1, group_size), is_valid.view(-1, group_size), sizes
    sizes = torch.tensor(list(group_size), dtype=torch.long, device=r.device)
    if (sizes < 1).any() or int(sizes.sum()) != n:
        raise ValueError(f"{n} samples do not split into groups of sizes {list(group_size)}")
    width = int(sizes.max()) if n else 1
    group = torch.repeat_interleave(torch.arange(sizes.numel(), device=r.device), sizes)     # [N]
    starts = torch.cumsum(sizes, 0) - sizes                                                 # [num_groups]
    cells = group * width + (torch.arange(n, device=r.device) - starts[group])              # [N]
    grouped = torch.full((sizes.numel() * width,), torch.nan, dtype=r.dtype, device=r.device)
    valid = torch.zeros(sizes.numel() * width, dtype=torch.bool, device=r.device)
    grouped[cells], valid[cells] = r, is_valid
    return grouped.view(-1, width), valid.view(-1, width), sizes


def group_advantages(
    rewards: Tensor,
    group_size: int | Sequence[int],
    scale: Scale = "group",
    eps: float = 1e-4,
    valid: Tensor | None = None,
    *,
    center: Center = "group",
    atol: float = 1e-6,
    batch_rewards: Tensor | None = None,
) -> AdvantageStats:
    """GRPO advantages for group-contiguous ``rewards`` [N], in groups of ``group_size`` (or of
    the sizes listed, in order).

    ``valid`` [N] bool marks the samples that were judged; invalid ones (and NaN/inf rewards)
    are excluded from their group's statistics and get advantage 0. ``center="batch"`` uses
    the batch mean as the baseline instead of the group mean: that is what TRL does after
    ``rewards_from_parts(..., "normalize_then_sum")`` (GDPO), together with ``scale="batch"``.
    ``batch_rewards``: the whole batch's rewards over every process, NaN where not judged
    (what TRL gathers before its batch statistics); default: ``rewards`` themselves.
    """
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D [N], got shape {tuple(rewards.shape)}")
    if not rewards.is_floating_point():
        rewards = rewards.float()

    is_valid = torch.isfinite(rewards)
    if valid is not None:
        is_valid = is_valid & valid.to(device=rewards.device, dtype=torch.bool)
    # NaN is how "not in the statistics" is spelled from here on: nanmean/nanstd skip it.
    r = torch.where(is_valid, rewards, torch.nan)
    grouped, valid_grouped, sizes = _table(r, is_valid, group_size)   # [num_groups, width] x2, [num_groups]

    group_mean = torch.nanmean(grouped, dim=1).repeat_interleave(sizes)
    group_std = nanstd(grouped, dim=1).repeat_interleave(sizes)

    everyone = r if batch_rewards is None else batch_rewards.to(device=r.device, dtype=r.dtype)
    baseline = group_mean if center == "group" else torch.nanmean(everyone).expand_as(r)
    advantages = r - baseline
    if scale == "group":
        advantages = advantages / (group_std + eps)
    elif scale == "batch":
        advantages = advantages / (nanstd(everyone) + eps)
    elif scale != "none":
        raise ValueError(f"unknown scale {scale!r}: expected 'group', 'batch' or 'none'")
    # NaN here means: an invalid sample, or a std over fewer than 2 valid samples (no baseline
    # to compare against). Either way there is no signal, so the advantage is 0 (as in TRL).
    advantages = torch.where(torch.isnan(advantages), 0.0, advantages)

    # A group teaches nothing when its valid rewards are all the same (or it has < 2 of them):
    # every advantage is then 0 (up to rounding), whatever the scale.
    hi = torch.where(valid_grouped, grouped, -torch.inf).amax(dim=1)
    lo = torch.where(valid_grouped, grouped, torch.inf).amin(dim=1)
    zero_group = (valid_grouped.sum(dim=1) < 2) | (hi - lo <= atol)

    return AdvantageStats(
        advantages=advantages,
        group_mean=group_mean,
        group_std=group_std,
        zero_signal=zero_group.repeat_interleave(sizes),
        valid=is_valid,
        frac_zero_signal=zero_group.sum().item() / max(1, zero_group.numel()),
    )


def rewards_from_parts(
    parts: Tensor,
    weights: Tensor,
    mode: Aggregation = "sum_then_normalize",
    *,
    group_size: int | None = None,
    eps: float = 1e-4,
) -> Tensor:
    """Combine K reward functions' outputs ``parts`` [N, K] into one reward [N], as TRL does.

    NaN in ``parts`` means "this function does not apply to this sample" and counts as 0 in
    the weighted sum; a row that is NaN for *every* function is unscorable and stays NaN
    (so ``group_advantages`` treats it as invalid).

    * ``sum_then_normalize`` (TRL's default): r = nansum_k w_k R_k, then group_advantages.
    * ``normalize_then_sum`` (GDPO): each function is first normalised within its group,
      R~_k = (R_k - mean_g) / (std_g + eps), then r = nansum_k w_k R~_k. TRL then centres and
      scales r over the batch: ``group_advantages(r, G, scale="batch", center="batch")``.
      Needs ``group_size``.
    """
    if parts.dim() != 2 or weights.shape != parts.shape[1:]:
        raise ValueError(f"parts must be [N, K] and weights [K]; got {tuple(parts.shape)}, {tuple(weights.shape)}")
    weights = weights.to(device=parts.device, dtype=parts.dtype)
    unscorable = torch.isnan(parts).all(dim=1)
    if mode == "normalize_then_sum":
        if group_size is None:
            raise ValueError("normalize_then_sum normalises within groups: pass group_size")
        _check_groups(parts.shape[0], group_size)
        grouped = parts.view(-1, group_size, parts.shape[1])
        mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
        # A group of one has no spread (TRL uses 0, so the normalised reward is 0).
        std_k = nanstd(grouped, dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(mean_k)
        parts = ((grouped - mean_k) / (std_k + eps)).view_as(parts)
    elif mode != "sum_then_normalize":
        raise ValueError(f"unknown mode {mode!r}: expected 'sum_then_normalize' or 'normalize_then_sum'")
    rewards = (parts * weights).nansum(dim=1)
    return torch.where(unscorable, torch.nan, rewards)
