"""Per-prompt pass-rate memory: skip prompts whose group would teach nothing.

A group whose G completions all get the same reward has zero advantage: the
rollout tokens spent on it are wasted. A prompt the policy always solves (or never
solves) will most likely do so again, so before spending G rollouts on it we look
at its record. The estimate is a Beta posterior over the prompt's pass rate; the
predicted chance that a group of G is all-right or all-wrong is
``p^G + (1 - p)^G`` averaged over that posterior. Prompts likely to be zero-signal
are skipped (or down-weighted) and re-tried now and then, since the policy moves.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass, field
from typing import Iterable, Optional


@dataclass
class PromptRecord:
    successes: float = 0.0
    trials: float = 0.0
    last_step: int = -1
    zero_streak: int = 0      # its last groups in a row that taught nothing (all alike)


@dataclass
class PassRateMemory:
    """Beta(prior_a + successes, prior_b + failures) per prompt id, decayed towards the prior.

    ``skip_threshold``: skip a prompt when its predicted zero-signal probability is above it.
    ``min_trials``: never skip a prompt seen fewer times than this.
    ``retry_prob``: chance to draw a skippable prompt anyway (the policy changes).
    ``decay``: per-step factor on old evidence (1.0 keeps it all).
    ``skip_after``: skip a prompt whose last this many groups in a row taught nothing
    (0: the posterior alone decides). On a pool where most prompts the policy fails once it
    keeps failing, this catches them one visit earlier than the posterior does.
    """

    group_size: int
    skip_threshold: float = 0.9
    min_trials: int = 1
    retry_prob: float = 0.1
    decay: float = 0.99   # per step: a prompt seen 70 steps ago counts half
    skip_after: int = 0
    prior_a: float = 0.5
    prior_b: float = 0.5
    records: dict[str, PromptRecord] = field(default_factory=dict)
    skipped: int = 0
    tokens_saved: int = 0

    def update(self, prompt_id: str, correct: Iterable[bool], step: int) -> None:
        """Record one group's outcomes (only judged completions)."""
        outcomes = list(correct)
        if not outcomes:
            return
        rec = self.records.setdefault(prompt_id, PromptRecord())
        if rec.last_step >= 0:
            factor = self.decay ** max(0, step - rec.last_step)
            rec.successes *= factor
            rec.trials *= factor
        rec.successes += sum(outcomes)
        rec.trials += len(outcomes)
        rec.last_step = step
        alike = len(outcomes) >= 2 and len(set(outcomes)) == 1
        rec.zero_streak = rec.zero_streak + 1 if alike else 0

    def pass_rate(self, prompt_id: str) -> Optional[float]:
        rec = self.records.get(prompt_id)
        if rec is None or rec.trials == 0:
            return None
        return (self.prior_a + rec.successes) / (self.prior_a + self.prior_b + rec.trials)

    def zero_signal_prob(self, prompt_id: str, prior: Optional[tuple[float, float]] = None) -> Optional[float]:
        """P(all G right or all G wrong) under the Beta posterior (exact, via Beta functions).

        ``prior``: (a, b) in place of (prior_a, prior_b), e.g. from the pass rate of the
        prompt's difficulty level: what prompts like it do, before its own record."""
        rec = self.records.get(prompt_id)
        if rec is None or rec.trials < self.min_trials:
            return None
        prior_a, prior_b = prior if prior is not None else (self.prior_a, self.prior_b)
        a = prior_a + rec.successes
        b = prior_b + max(0.0, rec.trials - rec.successes)
        g = self.group_size
        # E[p^G] = B(a+G, b)/B(a, b); E[(1-p)^G] = B(a, b+G)/B(a, b)
        log_beta = lambda x, y: math.lgamma(x) + math.lgamma(y) - math.lgamma(x + y)  # noqa: E731
        base = log_beta(a, b)
        return math.exp(log_beta(a + g, b) - base) + math.exp(log_beta(a, b + g) - base)

    def keep_probability(self, prompt_id: str, prior: Optional[tuple[float, float]] = None) -> float:
        """The chance a draw of this prompt is kept: 1, or ``retry_prob`` when it is skippable:
        its last ``skip_after`` groups all taught nothing (GRESO's rule), or the posterior
        predicts a zero-signal group with probability above ``skip_threshold``."""
        rec = self.records.get(prompt_id)
        if rec is not None and self.skip_after and rec.zero_streak >= self.skip_after:
            return self.retry_prob
        prob = self.zero_signal_prob(prompt_id, prior)
        return 1.0 if prob is None or prob <= self.skip_threshold else self.retry_prob

    def should_skip(self, prompt_id: str, rng: random.Random, prior: Optional[tuple[float, float]] = None) -> bool:
        keep = self.keep_probability(prompt_id, prior)
        return keep < 1.0 and rng.random() >= keep

    def records_state(self) -> dict[str, dict[str, float]]:
        """The records as plain data (a checkpoint's)."""
        return {k: asdict(v) for k, v in self.records.items()}

    def load_records(self, state: dict[str, dict[str, float]]) -> None:
        """Records from ``records_state``'s output (ones saved before ``zero_streak`` existed load with 0)."""
        self.records = {k: PromptRecord(**v) for k, v in state.items()}

    def note_skip(self, expected_tokens: int) -> None:
        self.skipped += 1
        self.tokens_saved += expected_tokens
