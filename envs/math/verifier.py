"""``MathVerifier``: the project's reward interface for math tasks.

gold = ``task.answer``; reward 1 when the completion's final answer equals it, else
0. ``info`` holds ``extracted``, ``source``, ``tier`` and ``reason``. Timeouts and
oversized answers are the completion's fault (reward 0, reason "timeout" /
"too_complex"). ``infra_error`` (not judged, dropped by trainers) is a worker pool
that cannot start or a bug inside the matcher (tier "error"): never a reward of 0.
"""

from __future__ import annotations

from typing import Optional, Sequence

from ..core.types import Task, Verdict
from ..core.verifier import Verifier, _check_lengths, all_verdicts, exact_verdict
from .extract import MODES, Extraction
from .matcher import DEFAULT_TIMEOUT_S, MatchResult, extract_for, fast_match, match_many, parse_gold
from .pool import PoolError


class MathVerifier(Verifier):
    """Judges a completion's final answer against ``task.answer``.

    ``extract``: extraction mode (auto | boxed | tags | answer_is | last_number);
    ``strict``: only an answer in that mode's format, ending the completion, counts
    (auto: a box, ``<answer>`` tags or a final ``Answer:`` line; see ``strict.py``);
    ``timeout_s``: deadline of one symbolic comparison in a worker process.
    """

    name = "correct"

    def __init__(self, *, timeout_s: float = DEFAULT_TIMEOUT_S, extract: str = "auto", strict: bool = False) -> None:
        _check_options(extract, strict)
        if not timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s!r}")
        self.timeout_s = float(timeout_s)
        self.extract_mode = extract
        self.strict = strict

    def verify(self, task: Task, completion: str) -> Verdict:
        return self.verify_batch([task], [completion])[0]

    def verify_batch(self, tasks: Sequence[Task], completions: Sequence[str]) -> list[Verdict]:
        """Fast tiers inline; every undecided pair of the batch goes to the pool at once."""
        _check_lengths(tasks, completions)
        extractions: list[Extraction] = []
        verdicts: list[Optional[Verdict]] = []
        todo: list[int] = []
        golds = {}
        for i, (task, completion) in enumerate(zip(tasks, completions)):
            if task.answer is None:
                raise ValueError(f"task {task.id!r} has no answer: a math task needs its gold in Task.answer")
            if task.answer not in golds:
                golds[task.answer] = parse_gold(task.answer)   # once per group, not per completion
            gold = golds[task.answer]
            ex = extract_for(completion, gold, self.extract_mode, strict=self.strict)
            extractions.append(ex)
            if ex.answer is None:
                verdicts.append(_verdict(MatchResult(False, "guard", ex.reason or "no_answer"), ex))
                continue
            result, key = fast_match(ex.answer, gold)
            verdicts.append(_verdict(result, ex) if result is not None else None)
            if result is None:
                todo.append(i)
        if todo:
            try:
                results = match_many([extractions[i].answer for i in todo],
                                     [golds[tasks[i].answer] for i in todo], self.timeout_s)
            except PoolError as exc:
                for i in todo:
                    verdicts[i] = Verdict.infra(str(exc), extracted=extractions[i].answer)
            else:
                if len(results) != len(todo):
                    raise RuntimeError(f"MathVerifier: {len(results)} results for {len(todo)} comparisons")
                for i, r in zip(todo, results):
                    verdicts[i] = _verdict(r, extractions[i])
        return all_verdicts(verdicts, "MathVerifier.verify_batch")

    def close(self) -> None:
        """The pool is shared by every MathVerifier; ``shutdown_pool()`` stops it."""


def _verdict(r: MatchResult, ex: Extraction) -> Verdict:
    if r.tier == "error":
        return Verdict.infra(f"math matcher failed: {r.reason}", extracted=ex.answer, source=ex.source)
    return exact_verdict(r.equal, info={"extracted": ex.answer, "source": ex.source,
                                        "tier": r.tier, "reason": r.reason})


def verify(completion: str, gold: str, *, timeout_s: float = DEFAULT_TIMEOUT_S, extract: str = "auto",
           strict: bool = False) -> bool:
    """True when the final answer in ``completion`` equals ``gold`` (``extract``,
    ``strict``: as ``MathVerifier``'s). Never raises for any completion; raises
    ``ValueError`` for an unknown mode, ``PoolError`` if the symbolic worker pool cannot
    start and ``MatchError`` if the matcher itself failed (a bug: not a judgement of
    the answer; ``MathVerifier`` reports it as an ``infra_error`` verdict instead)."""
    _check_options(extract, strict)
    g = parse_gold(gold)
    ex = extract_for(completion, g, extract, strict=strict)
    if ex.answer is None:
        return False
    r = match_many([ex.answer], [g], timeout_s)[0]
    if r.tier == "error":
        raise MatchError(f"the math matcher failed on {ex.answer!r} vs {gold!r}: {r.reason}")
    return r.equal


def _check_options(extract: str, strict: bool) -> None:
    if extract not in MODES:
        raise ValueError(f"unknown extraction mode extract={extract!r}: use one of {', '.join(MODES)}")
    if not isinstance(strict, bool):
        raise ValueError(f"strict must be True or False, got {strict!r}")
    if strict and extract == "last_number":
        raise ValueError("strict=True needs an answer format: set extract to auto, boxed, tags or answer_is "
                         "('last_number' has no format to check)")


class MatchError(RuntimeError):
    """The matcher itself failed (a bug), so the answer was not judged."""
