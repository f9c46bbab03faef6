#!/usr/bin/env python3
"""Importance-sampling correction against completion length: how far each mode's weights
spread, and how much of the sampler/learner mismatch it leaves, on synthetic mismatches (no
model, no engine: seconds on a CPU).

The mismatch. Per position t, the learner's logits z_t ~ N(0, s^2) over V tokens, pi_old =
softmax(z_t); the sampler's are z_t + e_t with e_t ~ N(0, sigma^2), pi_sampler = softmax(z_t + e_t):
kernel and precision noise, independent across positions. Tokens are drawn from pi_sampler and
d_t = log pi_old(x_t) - log pi_sampler(x_t), as ``trainer/algo/is_correction.py`` sees them.
sigma is set so that the mean |d_t| is about 0.01 (``small``) or 0.05 (``large``).

For each mode (``importance_weights`` itself) and length T, over B sequences:

  log_w_std  spread of the raw log-weight before any bound: std of d_t (token modes) or of
             sum_t d_t (sequence modes); grows as sqrt(T) for a sequence
  altered    share of tokens whose weight a bound truncated or set to 0
  ess        effective sample size share of the weights over the units they weigh (tokens for
             token modes, sequences for sequence modes): (sum w)^2 / (n sum w^2); 1 when all are
             equal, small when a few units carry the batch
  left       the mismatch the correction leaves: 1 - E_sampler[w], the share of pi_old's
             probability the weighted samples no longer carry (0 for exact IS, whose E_sampler[r] = 1)

    .venv/bin/python bench/is_correction.py                # the table in docs/training.md
    .venv/bin/python bench/is_correction.py --json /tmp/is.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from proctor.trainer.algo.is_correction import importance_weights  # noqa: E402

V, LOGIT_STD = 16, 2.0
NOISE = {"small": 0.017, "large": 0.08}         # logit noise sigma: mean |d_t| about 0.01 and 0.05
# (label, mode, C_max, C_min): the old default, the new default, and the other modes around them.
MODES = [
    ("sequence_mask C=3 (old default, TRL's)", "sequence_mask", 3.0, None),
    ("sequence_truncate C=3", "sequence_truncate", 3.0, None),
    ("token_truncate C=2 (new default, TIS)", "token_truncate", 2.0, None),
    ("token_mask [0.5, 2]", "token_mask", 2.0, 0.5),
]


def simulate(B: int, T: int, noise: float, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(log pi_old, log pi_sampler) [B, T] of tokens drawn from the sampler (module docstring)."""
    g = torch.Generator().manual_seed(seed)
    z = torch.randn(B, T, V, generator=g) * LOGIT_STD
    old = torch.log_softmax(z, -1)
    sampler = torch.log_softmax(z + noise * torch.randn(B, T, V, generator=g), -1)
    x = torch.multinomial(sampler.exp().view(-1, V), 1, generator=g).view(B, T, 1)
    return old.gather(-1, x).squeeze(-1), sampler.gather(-1, x).squeeze(-1)


def weight_stats(old: torch.Tensor, sampler: torch.Tensor, mode: str, c_max: float,
                 c_min: float | None = None) -> dict[str, float]:
    """log_w_std, altered, ess and left of one mode on one batch (module docstring)."""
    mask = torch.ones_like(old)
    w = importance_weights(old, sampler, mask, mode, c_max, c_min)   # type: ignore[arg-type]
    d = (old - sampler).double()
    per_sequence = mode.startswith("sequence")
    units = (w.weight[:, 0] if per_sequence else w.weight.flatten()).double()
    log_w = d.sum(-1) if per_sequence else d.flatten()
    return {"log_w_std": float(log_w.std()), "altered": float((w.truncated | w.masked).double().mean()),
            "ess": float(units.sum() ** 2 / (units.numel() * (units ** 2).sum()).clamp(min=1e-300)),
            "left": float(1.0 - units.mean())}


def run(B: int, lengths: list[int], seed: int) -> list[dict]:
    rows = []
    for level, noise in NOISE.items():
        for T in lengths:
            old, sampler = simulate(B, T, noise, seed)
            d = old - sampler
            for label, mode, c_max, c_min in MODES:
                rows.append({"mismatch": level, "mean_abs_d": float(d.abs().mean()),
                             "kl_per_token": float(-d.mean()), "T": T, "mode": label,
                             **weight_stats(old, sampler, mode, c_max, c_min)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sequences", type=int, default=256)
    ap.add_argument("--lengths", type=int, nargs="+", default=[64, 512, 4096])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = run(args.sequences, args.lengths, args.seed)
    print("| mismatch (mean abs d) | T | mode | log-weight std | altered | ESS share | left |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['mismatch']} ({r['mean_abs_d']:.3f}) | {r['T']} | {r['mode']} | {r['log_w_std']:.3f} | "
              f"{100 * r['altered']:.1f} % | {r['ess']:.3f} | {r['left']:+.4f} |")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
