"""Per-token estimators of KL(pi_theta || pi_ref) from tokens sampled from pi_theta.

Schulman, "Approximating KL Divergence" (2020). With the log-ratio
``r = log pi_ref(x) - log pi_theta(x)`` at a token x ~ pi_theta:

* ``k1 = -r``                     unbiased, high variance, can be negative per token;
* ``k2 = r^2 / 2``                biased (exact to second order), always >= 0;
* ``k3 = (e^r - 1) - r``          unbiased (E[e^r] = 1 under x ~ pi_theta) and always >= 0,
                                  since e^r >= 1 + r. GRPO (DeepSeekMath) and TRL use k3.

All three are per-token values: reduce them with the same mask as the loss.
"""

from __future__ import annotations

from typing import Literal

import torch
from torch import Tensor

KLKind = Literal["k1", "k2", "k3"]


def kl_estimate(logp: Tensor, ref_logp: Tensor, kind: KLKind = "k3") -> Tensor:
    """Per-token estimate of KL(pi_theta || pi_ref); ``logp`` are log pi_theta of the sampled tokens.

    No clamping (TRL does none for k3; verl clamps the log-ratio to +-20): a huge value here
    means the policy has drifted far from the reference, and hiding that is worse than seeing it.
    """
    log_ratio = ref_logp - logp  # r = log(pi_ref / pi_theta)
    if kind == "k1":
        return -log_ratio
    if kind == "k2":
        return 0.5 * log_ratio.square()
    if kind == "k3":
        # expm1(r) - r rather than TRL's exp(r) - r - 1: the same value, but without the
        # cancellation that makes the latter slightly negative (-1e-16 in float64, -6e-8 in
        # float32) when pi_theta is close to pi_ref, i.e. most of the time.
        return torch.expm1(log_ratio) - log_ratio
    raise ValueError(f"unknown KL estimator {kind!r}: expected 'k1', 'k2' or 'k3'")
