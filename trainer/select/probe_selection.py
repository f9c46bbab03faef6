"""The answer probe's side of prompt selection: which candidates of a probed pool fill a step's slots.

``ProbeSelection.choose`` takes a pool of candidates (each with the importance weight its draw
already carries) and the probe's predicted pass rate of each. ``choose_sized`` fills a budget of
completions instead of a count of prompts: each chosen prompt gets a group size from its
predicted pass rate (``sized_group``: few samples near 0.5, more near the band's ends). Each slot takes, with probability
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
from itertools import islice
from typing import Any, Iterator, Optional, Protocol, Sequence

import numpy as np

from proctor.envs import SuiteItem

from .probe import fit_size, signal_chance, sized_group


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
        self.kept: list[tuple[float, int]] = []    # (predicted pass rate, group size) of the prompts chosen since the report
        self.counts = [0, 0, 0]                    # candidates probed, in band, topped up, since the report
        self.tokens_reported = 0
        self.predicted: dict[tuple[str, str], float] = {}   # (env, task id) → the probe's rate at its draw
        self.calibration = [0.0, 0.0, 0]           # predicted, observed pass rates summed, over groups
        self.miscalibrated = False                 # warned once

    def choose(self, pool: list[tuple[SuiteItem, float]], n: int, rng: random.Random) -> list[tuple[SuiteItem, float]]:
        """n of the pool's (item, weight) pairs, probed in one pass, each with its weight times its
        selection weight."""
        rates = self.probe.pass_rates([item for item, _ in pool])
        return [self._keep(pool, rates, i, w, self.group_size) for i, w in islice(self._slots(pool, rates, rng), n)]

    def choose_sized(self, pool: list[tuple[SuiteItem, float]], rows: int, sizes: tuple[int, int],
                     rng: random.Random) -> list[tuple[SuiteItem, float, int]]:
        """(item, weight, group size) triples whose sizes sum to ``rows``: prompts taken in the
        order ``choose`` takes them, each sized by ``sized_group`` from its predicted pass rate."""
        rates = self.probe.pass_rates([item for item, _ in pool])
        out, left = [], rows
        for i, w in self._slots(pool, rates, rng):
            if left < sizes[0]:
                break
            g = fit_size(sized_group(rates[i], sizes, self.group_size), left, sizes[0])
            out.append((*self._keep(pool, rates, i, w, g), g))
            left -= g
        if left:
            raise ValueError(f"data.probe_pool: {len(pool)} candidates cannot fill a step's {rows} completions in "
                             f"groups of {sizes[0]} to {sizes[1]}; raise data.probe_pool")
        return out

    def _keep(self, pool: list[tuple[SuiteItem, float]], rates: list[Optional[float]], index: int, weight: float,
              size: int) -> tuple[SuiteItem, float]:
        """A chosen candidate, its prediction remembered: (item, draw weight x selection weight)."""
        item = pool[index][0]
        if rates[index] is not None:
            self.kept.append((rates[index], size))
            self.predicted[(item.env, item.task.id)] = rates[index]
        return item, pool[index][1] * weight

    def _slots(self, pool: list[tuple[SuiteItem, float]], rates: list[Optional[float]],
               rng: random.Random) -> Iterator[tuple[int, float]]:
        """(pool index, selection weight) pairs, as many as asked for (at most the pool): the band
        first, with ``explore`` chances outside."""
        lo, hi = self.band
        inside = [i for i, p in enumerate(rates) if p is None or lo <= p <= hi]
        outside = sorted((i for i, p in enumerate(rates) if not (p is None or lo <= p <= hi)),
                         key=lambda i: max(lo - rates[i], rates[i] - hi))
        share_in, share_out = len(inside) / len(pool), len(outside) / len(pool)
        explore = self.explore if inside and outside else (1.0 if outside else 0.0)
        probed = sum(p is not None for p in rates)
        self.counts[0] += probed
        self.counts[1] += probed - len(outside)
        while inside or outside:
            if outside and (not inside or rng.random() < explore):
                j = rng.randrange(len(outside)) if inside else 0   # a top-up takes the nearest
                index, weight = outside.pop(j), share_out / explore if inside else 1.0
                self.counts[2] += not inside
            else:
                index, weight = inside.pop(0), share_in / (1.0 - explore)
            yield index, weight

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
            out["probe_predicted_pass"] = float(np.mean([p for p, _ in self.kept]))
            out["probe_predicted_signal"] = float(np.mean([signal_chance(p, g) for p, g in self.kept]))
            out["probe_group_size"] = float(np.mean([g for _, g in self.kept]))
        self.kept, self.counts, self.tokens_reported = [], [0, 0, 0], self.probe.tokens
        return out

    def state_dict(self) -> dict[str, Any]:
        """Plain data: the probe's token count, the counters since the last report, the
        predictions awaiting their group ([env, task id, rate]) and the calibration sums."""
        return {"tokens": self.probe.tokens, "tokens_reported": self.tokens_reported,
                "kept": [list(pair) for pair in self.kept],
                "counts": list(self.counts), "predicted": [[env, task_id, rate] for (env, task_id), rate
                                                          in self.predicted.items()],
                "calibration": list(self.calibration), "miscalibrated": self.miscalibrated}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.probe.tokens = state.get("tokens", 0)
        self.tokens_reported = state.get("tokens_reported", self.probe.tokens)
        # before group sizes were kept: bare rates, each of rollout.group_size
        self.kept = [(k[0], int(k[1])) if isinstance(k, list) else (k, self.group_size) for k in state.get("kept", [])]
        self.counts = list(state.get("counts", [0, 0, 0]))
        self.predicted = {(env, task_id): rate for env, task_id, rate in state.get("predicted", [])}
        self.calibration = list(state.get("calibration", [0.0, 0.0, 0]))
        self.miscalibrated = bool(state.get("miscalibrated", False))


__all__ = ["PassRateProbe", "ProbeCalibrationWarning", "ProbeSelection"]
