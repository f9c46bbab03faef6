"""One reward interface for every environment: a verifier, and a rubric of weighted parts.

A ``Verifier`` judges correctness: ``verify(task, completion) -> Verdict``, and
``verify_batch`` for many at once (code verifiers send the whole batch to the
sandbox, math verifiers to a worker pool). A ``Rubric`` adds named parts (format,
length penalty, ...) with weights; the reward is their weighted mean, in [0, 1].
"""

from __future__ import annotations

import asyncio
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from .types import Task, Verdict

PartFn = Callable[[Task, str], float]


class Verifier(ABC):
    """Judges whether a completion solves a task. Subclass and implement ``verify``.

    ``verify`` must not raise for anything the completion contains: garbage in is
    a verdict of 0. Only a failure of the scoring machinery itself (the sandbox
    gone, a scorer that timed out for reasons not the completion's) is an
    ``infra_error`` verdict (``Verdict.infra``), which trainers drop.
    """

    name: str = "correct"

    @abstractmethod
    def verify(self, task: Task, completion: str) -> Verdict:
        ...

    def verify_batch(self, tasks: Sequence[Task], completions: Sequence[str]) -> list[Verdict]:
        """Judge many completions; override to batch (the default judges one by one)."""
        _check_lengths(tasks, completions)
        return [self.verify(t, c) for t, c in zip(tasks, completions)]

    async def averify_batch(self, tasks: Sequence[Task], completions: Sequence[str]) -> list[Verdict]:
        """The same, without blocking an event loop (scoring overlaps generation)."""
        return await asyncio.to_thread(self.verify_batch, tasks, completions)

    def close(self) -> None:
        """Release pools and sandboxes."""


@dataclass(frozen=True)
class Part:
    """A named reward component in [0, 1] with its weight in the rubric."""

    name: str
    fn: PartFn
    weight: float = 1.0


class Rubric:
    """Correctness from a verifier plus weighted extra parts.

    ``reward = (w_correct * correct + sum(w_i * part_i)) / (w_correct + sum(w_i))``.
    An ``infra_error`` from the verifier passes through untouched: a sample that
    was not judged gets no reward at all, not a partial one.
    """

    def __init__(self, verifier: Verifier, weight: float = 1.0, parts: Sequence[Part] = ()) -> None:
        if weight < 0 or any(p.weight < 0 for p in parts):
            raise ValueError("rubric weights must be >= 0")
        names = [verifier.name, *(p.name for p in parts)]
        if len(set(names)) != len(names):
            raise ValueError(f"rubric part names must be distinct, got {names}")
        if weight + sum(p.weight for p in parts) <= 0:
            raise ValueError("at least one rubric weight must be > 0")
        self.verifier = verifier
        self.weight = weight
        self.parts = tuple(parts)

    @property
    def weights(self) -> dict[str, float]:
        return {self.verifier.name: self.weight, **{p.name: p.weight for p in self.parts}}

    def score(self, task: Task, completion: str) -> Verdict:
        return self.score_batch([task], [completion])[0]

    def score_batch(self, tasks: Sequence[Task], completions: Sequence[str]) -> list[Verdict]:
        _check_lengths(tasks, completions)
        base = self.verifier.verify_batch(tasks, completions)
        return [self._combine(t, c, v) for t, c, v in zip(tasks, completions, base)]

    async def ascore_batch(self, tasks: Sequence[Task], completions: Sequence[str]) -> list[Verdict]:
        return await asyncio.to_thread(self.score_batch, tasks, completions)

    def _combine(self, task: Task, completion: str, verdict: Verdict) -> Verdict:
        if not verdict.scored or not self.parts:
            return verdict
        values = {self.verifier.name: verdict.reward}
        for part in self.parts:
            values[part.name] = _clamp(part.fn(task, completion), part.name)
        weights = self.weights
        reward = sum(weights[n] * v for n, v in values.items()) / sum(weights.values())
        return Verdict(reward=min(1.0, max(0.0, reward)), parts={**verdict.parts, **values},
                       correct=verdict.correct, feedback=verdict.feedback, info=verdict.info)

    def close(self) -> None:
        self.verifier.close()


def _clamp(value: float, name: str) -> float:
    value = float(value)
    if math.isnan(value):
        raise ValueError(f"reward part {name!r} returned NaN")
    return min(1.0, max(0.0, value))


def _check_lengths(tasks: Sequence[Task], completions: Sequence[str]) -> None:
    if len(tasks) != len(completions):
        raise ValueError(f"{len(tasks)} tasks but {len(completions)} completions: they go in pairs")


def all_verdicts(out: Sequence[Optional[Verdict]], where: str) -> list[Verdict]:
    """``out`` as a list of verdicts, one per input; a missing one raises.

    Dropping the gaps instead would make the list short, and every later reward would
    land on the wrong completion."""
    missing = [i for i, v in enumerate(out) if v is None]
    if missing:
        raise RuntimeError(f"{where}: no verdict for {len(missing)} of {len(out)} completions (first: index "
                           f"{missing[0]}); a verifier must return one verdict per completion")
    return list(out)  # type: ignore[arg-type]


def exact_verdict(correct: bool, *, info: Optional[dict] = None, feedback: Optional[str] = None,
                  name: str = "correct") -> Verdict:
    """A 0/1 verdict with its one part."""
    value = 1.0 if correct else 0.0
    return Verdict(reward=value, parts={name: value}, correct=correct, info=info or {}, feedback=feedback)
