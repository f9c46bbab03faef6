"""GRPO arithmetic as pure torch functions: advantages, the KL estimators, the clipped loss.

No model code here: these take rewards and per-token log-probs and return tensors, so they
can be tested numerically against TRL (tests/test_grpo_trl_parity.py).
"""

from .advantages import AdvantageStats, group_advantages, nanstd, rewards_from_parts
from .kl import kl_estimate
from .loss import LossOutput, mask_truncated, masked_mean, policy_loss

__all__ = [
    "AdvantageStats", "LossOutput", "group_advantages", "kl_estimate", "mask_truncated",
    "masked_mean", "nanstd", "policy_loss", "rewards_from_parts",
]
