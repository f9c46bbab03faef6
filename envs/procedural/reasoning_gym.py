"""reasoning-gym's procedural generators (100+ task families) as Proctor tasks.

Each generator is made with a size and a seed, so its tasks are reproducible
offline; scoring uses the generator's own ``score_answer`` on the text inside
``<answer>`` tags (reasoning-gym's convention), which may give partial credit.
``partition="train" | "eval"`` gives disjoint question sets (by the question's text).
"""

from __future__ import annotations

from typing import Any, Optional

from ..core.sources import ListSource
from ..core.splits import DEFAULT_EVAL_FRACTION, check_partition, draw_partition, normalise_text
from ..core.types import Task, Verdict
from ..core.verifier import Verifier
from ..text.verifiers import final_text

INSTRUCTION = "\n\nThink it through, then give only the final answer inside <answer></answer>."


def _dataset(name: str, size: int, seed: int, config: dict[str, Any]):
    import reasoning_gym

    try:
        return reasoning_gym.create_dataset(name, size=size, seed=seed, **config)
    except (KeyError, ValueError) as exc:
        from reasoning_gym.factory import DATASETS

        if name not in DATASETS:
            raise ValueError(f"unknown reasoning-gym task {name!r}; choose from: {', '.join(sorted(DATASETS))}") from None
        raise ValueError(f"reasoning-gym task {name!r} rejected its config {config}: {exc}") from None


class ReasoningGymSource(ListSource):
    """``size`` tasks of one reasoning-gym family (``name``, e.g. "basic_arithmetic").

    With a ``partition``, entries are drawn from a larger virtual dataset (same seed:
    entry i is the same entry) until ``size`` fall in the partition.
    """

    def __init__(self, name: str = "basic_arithmetic", size: int = 500, seed: int = 0, *,
                 partition: Optional[str] = None, eval_fraction: float = DEFAULT_EVAL_FRACTION,
                 **config: Any) -> None:
        check_partition(partition, eval_fraction)
        share = 1.0 if partition is None else eval_fraction if partition == "eval" else 1.0 - eval_fraction
        pool = size if partition is None else int(size / share * 2) + 1000
        self.dataset = _dataset(name, pool, seed, config)
        label = f"reasoning_gym({name}, size={size}, seed={seed}"
        label += ")" if partition is None else f", {partition} {eval_fraction:g})"

        def make(i: int) -> Task:
            entry = self.dataset[i]
            return Task(id=f"rg/{name}/s{seed}/{i}", prompt=entry["question"] + INSTRUCTION,
                        answer=None if entry["answer"] is None else str(entry["answer"]),
                        data={"rg_index": i, "question_key": f"rg:{name}:" + normalise_text(entry["question"]),
                              **_numbers(entry.get("metadata") or {})},
                        source=f"reasoning_gym:{name}")

        super().__init__(draw_partition(make, size, partition, eval_fraction, label, max_draws=pool), name=label)


def _numbers(metadata: dict[str, Any]) -> dict[str, float]:
    """The generator's numeric per-question parameters (``num_terms``, ``num_digits``, ...) as
    ``rg_<name>``: what a difficulty knob can read (``difficulty: {key: rg_num_digits, edges: [2, 3]}``)."""
    return {f"rg_{k}": v for k, v in metadata.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


class ReasoningGymVerifier(Verifier):
    """Scores with the generator's own ``score_answer`` (in [0, 1]; 1.0 counts as correct)."""

    def __init__(self, source: ReasoningGymSource) -> None:
        self.source = source

    def verify(self, task: Task, completion: str) -> Verdict:
        entry = self.source.dataset[task.data["rg_index"]]
        answer = final_text(completion)
        try:
            score = float(self.source.dataset.score_answer(answer, entry))
        except Exception as exc:  # noqa: BLE001 - a generator's scorer failing on odd text is a 0, with the reason
            return Verdict(reward=0.0, parts={self.name: 0.0}, info={"extracted": answer, "reason": f"scorer: {exc}"})
        score = min(1.0, max(0.0, score))
        return Verdict(reward=score, parts={self.name: score}, correct=score >= 1.0, info={"extracted": answer})


def reference_completion(task: Task) -> str:
    return f"<answer>{task.answer}</answer>"
