"""The answer probe's side of prompt selection: which candidates of a probed pool fill a step's slots.

``ProbeSelection.choose`` takes a pool of candidates (each with the importance weight its draw
already carries) and the probe's predicted pass rate of each. Each slot takes, with probability
``explore``, a random candidate predicted outside the band (so the probe's misses can still be
learned from), else the next one inside it; when none is left inside, the one outside nearest
the band. A chosen prompt's weight is P_uniform / P_selected within the pool: its side's share
of the pool over that side's chance of a slot.

It also remembers what it predicted for each prompt it chose, compares that with the pass rate
the prompt's group then had, and warns once when the two part (``ProbeCalibrationWarning``).
"""

from __future__ import annotations

import random
import warnings
from typing import Any, Optional, Protocol, Sequence

import numpy as np

from proctor.envs import SuiteItem

from .probe import signal_chance


class ProbeCalibrationWarning(UserWarning):
    """The answer probe's predictions disagree with the pass rates the groups then had."""


class PassRateProbe(Protocol):
    """What the selection needs of a probe (``AnswerProbe``)."""

    tokens: int

    def pass_rates(self, items: Sequence[SuiteItem]) -> list[Optional[float]]: ...


class ProbeSelection:
    """Slots filled from a probed pool, with the counters the step row reports."""

    def __init__(self, probe: PassRateProbe, band: tuple[float, float], explore: float, group_size: int) -> None:
        self.probe = probe
        self.band = band
        self.explore = explore
        self.group_size = group_size
        self.kept: list[float] = []                # predicted pass rates of the prompts chosen since the report
        self.counts = [0, 0, 0]                    # candidates probed, in band, topped up, since the report
        self.tokens_reported = 0
        self.predicted: dict[tuple[str, str], float] = {}   # (env, task id) → the probe's rate at its draw
        self.calibration = [0.0, 0.0, 0]           # predicted, observed pass rates summed, over groups
        self.miscalibrated = False                 # warned once

    def choose(self, pool: list[tuple[SuiteItem, float]], n: int, rng: random.Random) -> list[tuple[SuiteItem, float]]:
        """n of the pool's (item, weight) pairs, probed in one pass, each with its weight times its
        selection weight."""
        lo, hi = self.band
        rates = self.probe.pass_rates([item for item, _ in pool])
        inside = [i for i, p in enumerate(rates) if p is None or lo <= p <= hi]
        outside = sorted((i for i, p in enumerate(rates) if not (p is None or lo <= p <= hi)),
                         key=lambda i: max(lo - rates[i], rates[i] - hi))
        share_in, share_out = len(inside) / len(pool), len(outside) / len(pool)
        explore = self.explore if inside and outside else (1.0 if outside else 0.0)
        probed = sum(p is not None for p in rates)
        self.counts[0] += probed
        self.counts[1] += probed - len(outside)
        out = []
        for _ in range(n):
            if outside and (not inside or rng.random() < explore):
                j = rng.randrange(len(outside)) if inside else 0   # a top-up takes the nearest
                index, weight = outside.pop(j), share_out / explore if inside else 1.0
                self.counts[2] += not inside
            else:
                index, weight = inside.pop(0), share_in / (1.0 - explore)
            item = pool[index][0]
            if rates[index] is not None:
                self.kept.append(rates[index])
                self.predicted[(item.env, item.task.id)] = rates[index]
            out.append((item, pool[index][1] * weight))
        return out

    def observe(self, item: SuiteItem, correct: list[bool]) -> None:
        """A chosen prompt's judged group: its pass rate against the prediction."""
        predicted = self.predicted.pop((item.env, item.task.id), None)
        if predicted is not None and correct:
            p, o, groups = self.calibration
            self.calibration = [p + predicted, o + sum(correct) / len(correct), groups + 1]

    def check_calibration(self, min_groups: int = 100) -> None:
        """Warn once when the probe's predictions and the groups' pass rates part by more than 2x
        (and 5 points): the reference reply is not how the policy answers, or not what the
        verifier accepts, and the band no longer means what it says."""
        predicted, observed, groups = self.calibration
        if self.miscalibrated or groups < min_groups:
            return
        low, high = sorted((predicted, observed))
        if high <= 2 * low + 0.05 * groups:
            return
        self.miscalibrated = True
        why = ("the policy mostly answers in another form than the reference reply" if observed > predicted
               else "the verifier rejects much of what the reference reply says")
        warnings.warn(f"data.answer_probe: the {groups} prompts it kept were predicted to pass {predicted / groups:.0%} "
                      f"of the time and passed {observed / groups:.0%}: {why}, so the band selects on noise. Set "
                      "data.answer_template to the reply the policy writes and the verifier accepts (the probe scores "
                      "it followed by EOS), or turn data.answer_probe off.", ProbeCalibrationWarning, stacklevel=3)

    def report(self) -> dict[str, float]:
        """Since the last report: probe tokens, the share of candidates in band, top-ups, and what
        the probe expected of the prompts it kept (compare ``pass_rate``, 1 - ``zero_signal_frac``)."""
        probed, in_band, topped = self.counts
        out = {"tokens_probed": self.probe.tokens - self.tokens_reported, "tokens_probed_cumulative": self.probe.tokens,
               "probe_in_band_frac": in_band / probed if probed else 0.0, "probe_topped_up": topped}
        if self.kept:
            out["probe_predicted_pass"] = float(np.mean(self.kept))
            out["probe_predicted_signal"] = float(np.mean([signal_chance(p, self.group_size) for p in self.kept]))
        self.kept, self.counts, self.tokens_reported = [], [0, 0, 0], self.probe.tokens
        return out

    def state_dict(self) -> dict[str, Any]:
        """Plain data: the probe's token count, the counters since the last report, the
        predictions awaiting their group ([env, task id, rate]) and the calibration sums."""
        return {"tokens": self.probe.tokens, "tokens_reported": self.tokens_reported, "kept": list(self.kept),
                "counts": list(self.counts), "predicted": [[env, task_id, rate] for (env, task_id), rate
                                                          in self.predicted.items()],
                "calibration": list(self.calibration), "miscalibrated": self.miscalibrated}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.probe.tokens = state.get("tokens", 0)
        self.tokens_reported = state.get("tokens_reported", self.probe.tokens)
        self.kept = list(state.get("kept", []))
        self.counts = list(state.get("counts", [0, 0, 0]))
        self.predicted = {(env, task_id): rate for env, task_id, rate in state.get("predicted", [])}
        self.calibration = list(state.get("calibration", [0.0, 0.0, 0]))
        self.miscalibrated = bool(state.get("miscalibrated", False))


__all__ = ["PassRateProbe", "ProbeCalibrationWarning", "ProbeSelection"]
