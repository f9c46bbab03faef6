"""Difficulty as a knob an environment declares.

An env that can say how hard each of its tasks is declares a :class:`DifficultyKnob`:
each task carries a number in ``task.data[key]`` (a procedural env writes it when it
makes the task; a dataset env names a column such as MATH's ``level``), and ``edges``
cut that number into ordered levels, easiest first. The trainer's selector
(``proctor.trainer.select.frontier``) keeps a pass-rate estimate per level and draws each
prompt from the levels whose predicted pass rate lies in a target band: the policy's
frontier, where a group of G completions most likely disagrees and so teaches.

    knob = DifficultyKnob("work", key="work", edges=(1, 2, 3))
    knob.level_of(task)        # 0 for task.data["work"] < 1 ... 3 for >= 3
    knob.bins(env.source)      # task indices per level

``proctor envs check ID --difficulty-model tiny`` measures a model's pass rate per level
(:func:`measure_levels`) and fails a knob that does not change it (:func:`knob_effect_problem`).
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from .types import Task


@dataclass(frozen=True)
class DifficultyKnob:
    """Levels ``0 .. len(edges)``, easiest first: a task's level is how many ``edges`` its
    ``task.data[key]`` reaches (``edges`` ascending; higher numbers are harder)."""

    name: str
    key: str
    edges: tuple[float, ...]

    def __post_init__(self) -> None:
        edges = tuple(self.edges)
        if not edges:
            raise ValueError(f"difficulty knob {self.name!r}: give at least one of its edges (two levels)")
        if any(not isinstance(e, (int, float)) or not math.isfinite(e) for e in edges) or list(edges) != sorted(set(edges)):
            raise ValueError(f"difficulty knob {self.name!r}: edges must be finite numbers in strictly ascending "
                             f"order, got {self.edges!r}")
        object.__setattr__(self, "edges", edges)

    @property
    def num_levels(self) -> int:
        return len(self.edges) + 1

    def labels(self) -> list[str]:
        """``"< 10"``, ``"10-20"``, ..., ``">= 40"``: what each level holds."""
        e = [f"{x:g}" for x in self.edges]
        return [f"< {e[0]}"] + [f"{a}-{b}" for a, b in zip(e, e[1:])] + [f">= {e[-1]}"]

    def level_of(self, task: Task) -> int:
        value = task.data.get(self.key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise ValueError(f"task {task.id!r}: difficulty knob {self.name!r} reads task.data[{self.key!r}], "
                             f"which is {value!r}; the env must give every task a finite number there")
        return bisect.bisect_right(self.edges, value)

    def bins(self, source: Any) -> list[list[int]]:
        """Indices of ``source``'s tasks at each level (a level may be empty)."""
        out: list[list[int]] = [[] for _ in range(self.num_levels)]
        for i in range(len(source)):
            out[self.level_of(source[i])].append(i)
        return out


def check_knob(knob: DifficultyKnob, source: Any) -> Optional[str]:
    """A problem with how the knob places ``source``'s tasks, or None: every task has a level
    and at least two levels hold tasks (one level is no knob at all)."""
    try:
        bins = knob.bins(source)
    except ValueError as exc:
        return str(exc)
    used = sum(1 for b in bins if b)
    if used < 2:
        return (f"difficulty knob {knob.name!r} puts all {len(source)} tasks of {getattr(source, 'name', 'the source')} "
                f"on one level: choose edges inside the range of task.data[{knob.key!r}]")
    return None


@dataclass(frozen=True)
class LevelPassRate:
    level: int
    label: str
    tasks: int          # tasks of the source at this level
    samples: int        # completions judged
    passed: int

    @property
    def rate(self) -> float:
        return self.passed / self.samples if self.samples else math.nan


def measure_levels(knob: DifficultyKnob, source: Any, score: Callable[[Sequence[Task]], Sequence[bool]],
                   per_level: int = 64, seed: int = 0) -> list[LevelPassRate]:
    """Pass rate per level: ``per_level`` tasks of each level (cycled when a level has fewer),
    judged by ``score`` (tasks → whether a policy's completion for each was correct)."""
    rng = random.Random(seed)
    out = []
    for level, (label, idx) in enumerate(zip(knob.labels(), knob.bins(source))):
        if not idx:
            out.append(LevelPassRate(level, label, 0, 0, 0))
            continue
        picks = [source[idx[rng.randrange(len(idx))]] for _ in range(per_level)]
        correct = list(score(picks))
        out.append(LevelPassRate(level, label, len(idx), len(correct), sum(bool(c) for c in correct)))
    return out


def knob_effect_problem(rates: Sequence[LevelPassRate], z_min: float = 2.0) -> Optional[str]:
    """None when the easiest and the hardest measured levels differ in pass rate by more than
    ``z_min`` standard errors (a two-proportion z-test), else what is wrong."""
    measured = [r for r in rates if r.samples]
    if len(measured) < 2:
        return "fewer than two levels hold tasks: the knob cannot change anything"
    easy, hard = measured[0], measured[-1]
    pooled = (easy.passed + hard.passed) / (easy.samples + hard.samples)
    se = math.sqrt(max(pooled * (1 - pooled), 1e-12) * (1 / easy.samples + 1 / hard.samples))
    z = (easy.rate - hard.rate) / se
    if z < z_min:
        table = ", ".join(f"{r.label}: {r.rate:.2f} ({r.samples})" for r in measured)
        return (f"the knob does not change the pass rate: easiest level {easy.rate:.2f} vs hardest {hard.rate:.2f} "
                f"(z = {z:.1f}, needs >= {z_min}); per level: {table}. Check that higher task.data values are "
                "harder for the model, or measure with a model that solves some of the tasks")
    return None


__all__ = ["DifficultyKnob", "LevelPassRate", "check_knob", "knob_effect_problem", "measure_levels"]
