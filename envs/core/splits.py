"""Disjoint train and eval question sets, decided by the question itself.

Every question has a *key*: its canonical form (``arith:3+4`` for "What is 3 + 4?",
a file row's whitespace-normalised prompt text). A question is in the eval
partition when the hash of its key falls below ``eval_fraction``:

    in_eval_partition("arith:3+4", 0.1)     # the same answer on every machine, for every seed and n

So the same question is always on the same side, whatever the seed, the number
of tasks drawn or the wording of the prompt template; and the eval set at a
smaller fraction is a subset of the one at a larger fraction (a model built to
never see the 10 % eval questions has never seen the 5 % ones either).

File-backed sources are filtered with :class:`PartitionedSource`; procedural
generators draw until they have ``n`` tasks of the asked partition
(:func:`draw_partition`): the train side as drawn (repeats allowed, as without a
partition), the eval side as distinct questions.
"""

from __future__ import annotations

import hashlib
import re
from typing import Callable, Literal, Optional

from .sources import ListSource, TaskSource
from .types import Task

Partition = Literal["train", "eval"]
PARTITIONS: tuple[str, ...] = ("train", "eval")
DEFAULT_EVAL_FRACTION = 0.1
# Consecutive draws that add nothing before a generator decides its partition's question
# space is exhausted (level 1 arithmetic has 126 questions; missing one of them after this
# many draws has probability about e^-30).
STALE_DRAWS = 5000

KeyFn = Callable[[Task], str]


def check_partition(partition: Optional[str], eval_fraction: float) -> None:
    """Raise a ValueError that says what is allowed when the arguments are not."""
    if partition is not None and partition not in PARTITIONS:
        raise ValueError(f"partition must be 'train', 'eval' or None (every question), got {partition!r}")
    if not isinstance(eval_fraction, (int, float)) or not 0.0 < float(eval_fraction) < 1.0:
        raise ValueError(f"eval_fraction must be a number strictly between 0 and 1, got {eval_fraction!r}")


def check_train_within(train_within: float, eval_fraction: float) -> None:
    if not isinstance(train_within, (int, float)) or not float(eval_fraction) < float(train_within) <= 1.0:
        raise ValueError(f"train_within must be above eval_fraction ({eval_fraction}) and at most 1: the train "
                         f"questions are those whose hash is in [eval_fraction, train_within); got {train_within!r}")


def key_bucket(key: str) -> float:
    """The key's place in [0, 1): the first 8 bytes of its SHA-256, as a fraction."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def in_eval_partition(key: str, eval_fraction: float = DEFAULT_EVAL_FRACTION) -> bool:
    """Whether the question with canonical form ``key`` is held out for evaluation."""
    check_partition(None, eval_fraction)
    return key_bucket(key) < float(eval_fraction)


def partition_of(key: str, eval_fraction: float = DEFAULT_EVAL_FRACTION) -> Partition:
    return "eval" if in_eval_partition(key, eval_fraction) else "train"


def normalise_text(text: str) -> str:
    """Whitespace collapsed and trimmed: the canonical form of a free-text question."""
    return re.sub(r"\s+", " ", text).strip()


def question_key(task: Task) -> str:
    """A task's canonical question: ``task.data["question_key"]`` where its source sets one
    (procedural generators do), else its prompt text with whitespace normalised."""
    key = task.data.get("question_key")
    return key if isinstance(key, str) and key else "text:" + normalise_text(task.text())


class PartitionedSource(ListSource):
    """The tasks of ``source`` whose question is in ``partition`` (order kept, ids kept)."""

    def __init__(self, source: TaskSource, partition: Partition, eval_fraction: float = DEFAULT_EVAL_FRACTION,
                 key: KeyFn = question_key) -> None:
        check_partition(partition, eval_fraction)
        want_eval = partition == "eval"
        tasks = [t for t in (source[i] for i in range(len(source)))
                 if (key_bucket(key(t)) < eval_fraction) == want_eval]
        if not tasks:
            raise ValueError(f"source {source.name!r}: none of its {len(source)} tasks is in the {partition} "
                             f"partition at eval_fraction={eval_fraction}; use more tasks or another eval_fraction")
        super().__init__(tasks, name=f"{source.name}[{partition} {eval_fraction:g}]")
        self.partition, self.eval_fraction = partition, float(eval_fraction)


def draw_partition(make: Callable[[int], Task], n: int, partition: Optional[str],
                   eval_fraction: float = DEFAULT_EVAL_FRACTION, what: str = "source", *,
                   max_draws: Optional[int] = None, train_within: float = 1.0) -> list[Task]:
    """``make(0), make(1), ...`` kept while they fall in ``partition``, until there are ``n``.

    No partition: the first ``n`` tasks, exactly as before partitions existed. "train":
    every task whose question is not held out, repeats included. "eval": distinct
    questions only (an eval set that repeats a question weighs it twice); fewer than
    ``n`` when the held-out part of the question space is smaller (the generator stops
    after ``STALE_DRAWS`` draws in a row add nothing, or after ``max_draws`` draws).
    ``train_within``: the train side keeps only questions whose hash is below it too, e.g.
    0.5 for questions the tiny model's corpus leaves out (it leaves out everything below 0.5).
    """
    check_partition(partition, eval_fraction)
    check_train_within(train_within, eval_fraction)
    if n < 1:
        raise ValueError(f"{what}: n must be >= 1, got {n}")
    if partition is None:
        return [make(i) for i in range(n)]
    want_eval = partition == "eval"
    tasks: list[Task] = []
    seen: set[str] = set()
    index = stale = 0
    while len(tasks) < n and stale < STALE_DRAWS and (max_draws is None or index < max_draws):
        task = make(index)
        index += 1
        key = question_key(task)
        bucket = key_bucket(key)
        if (bucket < eval_fraction) != want_eval or (want_eval and key in seen) or (not want_eval and bucket >= train_within):
            stale += 1
            continue
        stale = 0
        seen.add(key)
        tasks.append(task)
    if not tasks:
        raise ValueError(f"{what}: no question of the {partition} partition in {index} draws at "
                         f"eval_fraction={eval_fraction}; widen the question space or change the fraction")
    return tasks
