"""Pre-rollout selection: which prompts are worth G rollouts, decided before paying for them.

A group whose G completions all get the same reward has zero advantage. Two predictions
keep such groups from being generated at all:

* **The frontier** (envs that declare a ``DifficultyKnob``): a Beta pass-rate estimate per
  difficulty level, updated from every scored group and decayed each step (the policy
  moves). Each prompt is drawn from the levels whose predicted pass rate lies in the
  target band ``[lo, hi]``, uniformly over their tasks; a level outside the band is drawn
  with probability ``explore`` times its share, so it can come back. When no level is in
  the band, the one nearest to it is the frontier. This generalises across prompts: on a
  pool of thousands of questions most prompts are never seen twice, but their level is.
* **The prompt's own record** (``skip``, GRESO-style): a prompt whose Beta posterior gives
  ``P(all G right or all G wrong) > skip_threshold`` is skipped, except with probability
  ``explore`` (``trainer/select/passrate.py``). The posterior's prior is what prompts like it do:
  its level's pass rate (else its env's) as the mean, ``PRIOR_STRENGTH`` trials strong, so
  one all-wrong group of a prompt from a hard level already predicts the next.

Both change the prompt mix. Each drawn prompt carries its importance weight
``P_uniform(prompt) / P_selected(prompt)`` (the level's task share over its chance of
being chosen, times 1 / P(kept)); ``data.skip_reweight`` applies the weights, normalised by
the batch mean, to undo the change in expectation. Without it the objective favours the
frontier on purpose; ``bench/signal_efficiency.py`` measures what that does to held-out.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

import numpy as np

from proctor.envs import DifficultyKnob, SuiteItem

from .passrate import PassRateMemory


PRIOR_STRENGTH = 2.0   # pseudo-trials the level's (or env's) pass rate weighs in a prompt's prior


def prior_from(rate: Optional[float]) -> Optional[tuple[float, float]]:
    """A Beta prior with mean ``rate`` (kept off 0 and 1) and ``PRIOR_STRENGTH`` pseudo-trials."""
    if rate is None:
        return None
    rate = min(max(rate, 0.01), 0.99)
    return rate * PRIOR_STRENGTH, (1 - rate) * PRIOR_STRENGTH


@dataclass(frozen=True)
class SelectionRules:
    """What the drawer may skip; every probability is in [0, 1] (checked in the config)."""

    group_size: int
    skip: bool = False                              # the prompt's own record (GRESO)
    skip_threshold: float = 0.9                     # predicted P(zero-signal) above which a prompt is skipped
    skip_after: int = 0                             # ... or whose last this many groups taught nothing (0: off)
    explore: float = 0.1                            # chance a skippable prompt / out-of-band level is drawn anyway
    band: Optional[tuple[float, float]] = None      # the frontier's target pass-rate band; None: off
    level_decay: float = 0.9                        # per-step factor on a level's old evidence
    probe_pool: int = 4                             # answer probe: candidates probed per prompt drawn
    group_sizes: Optional[tuple[int, int]] = None   # answer probe: [min, max] per-prompt group sizes; None: G each


@dataclass(frozen=True)
class Draw:
    """A drawn prompt and its importance weight P_uniform / P_selected (before skipping)."""

    item: SuiteItem
    weight: float
    level: Optional[int] = None


class Frontier:
    """Per-level pass rates for the envs with a difficulty knob; draws at the policy's frontier."""

    def __init__(self, envs: Mapping[str, tuple[Any, DifficultyKnob]], rules: SelectionRules) -> None:
        assert rules.band is not None
        self.band = rules.band
        self.explore = rules.explore
        self.sources = {name: source for name, (source, _) in envs.items()}
        self.knobs = {name: knob for name, (_, knob) in envs.items()}
        self.bins = {name: knob.bins(source) for name, (source, knob) in envs.items()}
        # min_trials=1: a level's estimate counts from its first judged group
        self.memory = PassRateMemory(rules.group_size, min_trials=1, decay=rules.level_decay)
        self.drawn: dict[str, list[int]] = {}   # env → levels drawn since the last report

    def covers(self, env: str) -> bool:
        return env in self.knobs

    def level_probs(self, env: str) -> tuple[np.ndarray, np.ndarray]:
        """(chance of drawing each level now, each level's share of the env's tasks)."""
        bins = self.bins[env]
        share = np.array([len(b) for b in bins], dtype=float)
        share /= share.sum()
        rates = [self.memory.pass_rate(_key(env, level)) for level in range(len(bins))]
        lo, hi = self.band
        in_band = np.array([bool(b) and (r is None or lo <= r <= hi) for b, r in zip(bins, rates)])
        if not in_band.any():   # the whole env is too easy or too hard: its nearest level is the frontier
            gaps = [max(lo - r, r - hi) if b and r is not None else np.inf for b, r in zip(bins, rates)]
            in_band[int(np.argmin(gaps))] = True
        probs = share * np.where(in_band, 1.0, self.explore)
        return probs / probs.sum(), share

    def draw(self, item: SuiteItem, rng: np.random.Generator) -> Draw:
        """``item``'s env at a level chosen for the frontier, and the task's importance weight."""
        probs, share = self.level_probs(item.env)
        level = int(rng.choice(len(probs), p=probs))
        index = self.bins[item.env][level][int(rng.integers(len(self.bins[item.env][level])))]
        self.drawn.setdefault(item.env, []).append(level)
        return Draw(SuiteItem(item.env, self.sources[item.env][index]), float(share[level] / probs[level]), level)

    def level_rate(self, env: str, task: Any) -> Optional[float]:
        """The predicted pass rate of ``task``'s level (None before its level was seen)."""
        return self.memory.pass_rate(_key(env, self.knobs[env].level_of(task)))

    def observe(self, env: str, task: Any, correct: list[bool], step: int) -> None:
        if env in self.knobs and correct:
            self.memory.update(_key(env, self.knobs[env].level_of(task)), correct, step)

    def report(self) -> dict[str, float]:
        """Per env: the mean level drawn since the last report and the frontier's predicted pass rate."""
        out: dict[str, float] = {}
        for env, levels in self.drawn.items():
            out[f"frontier_{env}_level"] = float(np.mean(levels))
            probs, _ = self.level_probs(env)
            rates = [self.memory.pass_rate(_key(env, lv)) for lv in range(len(probs))]
            known = [(p, r) for p, r in zip(probs, rates) if r is not None]
            if known:
                out[f"frontier_{env}_predicted_pass"] = float(sum(p * r for p, r in known) / sum(p for p, _ in known))
        self.drawn = {}
        return out

    def state_dict(self) -> dict[str, Any]:
        return self.memory.records_state()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.memory.load_records(state)


def _key(env: str, level: int) -> str:
    return f"{env}#level{level}"


__all__ = ["Draw", "Frontier", "PRIOR_STRENGTH", "SelectionRules", "prior_from"]
