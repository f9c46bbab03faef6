"""Bridges from a verifiable environment to other trainers (TRL's GRPOTrainer first).

    env = VerifiableEnv(source, verifier)
    trainer = GRPOTrainer(model, reward_funcs=[as_reward_func(env)], train_dataset=to_hf_dataset(env), ...)

The dataset carries each task's id; TRL hands dataset columns to reward
functions as keyword lists, so the reward function finds each row's task by
id and scores the whole batch with one ``score_batch`` call (a sandbox or a
worker pool then runs it concurrently). A sample the verifier could not judge
(``infra_error``) gets ``None``, which TRL turns into NaN and leaves out of the
reward statistics and advantages: it is never counted as a wrong answer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Optional, Protocol, Sequence, Union, runtime_checkable

from .core.sources import TaskSource
from .core.types import Prompt, Task, Verdict

if TYPE_CHECKING:
    import datasets

Completion = Union[str, Sequence[Mapping[str, Any]]]   # text, or chat messages (TRL's conversational form)


@runtime_checkable
class ScoringEnv(Protocol):
    """What the adapters need: a task source and batch scoring (a ``VerifiableEnv``, or a
    suite of envs that exposes the union of their tasks as one source)."""

    source: TaskSource

    def score_batch(self, tasks: Sequence[Task], completions: Sequence[str]) -> list[Verdict]: ...


def _unwrap(env: Any) -> ScoringEnv:
    """The environment itself: ``gymnasium.make`` returns it inside wrappers, which (since
    Gymnasium 1.0) no longer forward attributes such as ``source``."""
    inner = env
    if not (hasattr(inner, "source") and hasattr(inner, "score_batch")):
        inner = getattr(env, "unwrapped", env)
    if not (hasattr(inner, "source") and hasattr(inner, "score_batch")):
        raise TypeError(f"{type(env).__name__} is not a scoring environment: it needs a `source` of tasks and "
                        "`score_batch(tasks, completions)` (use a proctor VerifiableEnv)")
    return inner


def env_name(env: Any) -> str:
    """The registered id (``proctor/Math-v0``) when made by ``gymnasium.make``, else the class name."""
    spec = getattr(env, "spec", None) or getattr(getattr(env, "unwrapped", None), "spec", None)
    spec_id = getattr(spec, "id", None)
    return str(spec_id) if spec_id else type(getattr(env, "unwrapped", env)).__name__


def completion_text(completion: Completion) -> str:
    """The text a model wrote: TRL passes a str for text prompts, and a list of messages
    (the assistant's reply, possibly in several parts) for chat prompts."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):      # a single message rather than a list of them
        return _content_text(completion.get("content"))
    parts = [m for m in completion if isinstance(m, Mapping)]
    if len(parts) != len(completion):
        raise TypeError(f"a completion must be a str or a list of chat messages (dicts), got {completion!r:.200}")
    assistant = [m for m in parts if m.get("role", "assistant") == "assistant"]
    return "".join(_content_text(m.get("content")) for m in (assistant or parts))


def _content_text(content: Any) -> str:
    """Message content is a str, or (multimodal chat format) a list of typed parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    return str(content)


class TaskIndex:
    """Task id -> task over an environment's source, built once."""

    def __init__(self, env: ScoringEnv, name: str) -> None:
        source = env.source
        self.name = name
        self.by_id: dict[str, Task] = {}
        for i in range(len(source)):
            task = source[i]
            self.by_id.setdefault(task.id, task)

    def __getitem__(self, task_id: Any) -> Task:
        try:
            return self.by_id[str(task_id)]
        except KeyError:
            sample = ", ".join(repr(k) for k in list(self.by_id)[:3])
            raise KeyError(f"task id {task_id!r} is not in env {self.name!r} ({len(self.by_id)} tasks, e.g. "
                           f"{sample}); build the dataset with to_hf_dataset(env) from the same env") from None


class EnvRewardFunc:
    """A TRL reward function backed by an environment (see :func:`as_reward_func`).

    A class rather than a closure so that it pickles with its env (TRL and
    accelerate may copy reward functions) and shows its env in ``repr``.
    """

    def __init__(self, env: Any, task_id_column: str = "task_id") -> None:
        self.env = _unwrap(env)
        self.task_id_column = task_id_column
        self.__name__ = env_name(env)     # TRL logs `rewards/<__name__>/mean`
        self.index = TaskIndex(self.env, self.__name__)

    def __call__(self, prompts: Sequence[Prompt], completions: Sequence[Completion], **columns: Any
                 ) -> list[Optional[float]]:
        if self.task_id_column not in columns:
            present = ", ".join(sorted(k for k in columns if not k.startswith(("trainer_state", "log_")))) or "none"
            raise KeyError(f"reward function {self.__name__!r}: no {self.task_id_column!r} column in the batch "
                           f"(columns: {present}); train on to_hf_dataset(env), or keep that column in your dataset "
                           "(and remove_unused_columns=False if you set it)")
        task_ids = list(columns[self.task_id_column])
        if len(task_ids) != len(completions):
            raise ValueError(f"reward function {self.__name__!r}: {len(completions)} completions but "
                             f"{len(task_ids)} task ids; they must pair up")
        tasks = [self.index[t] for t in task_ids]
        texts = [completion_text(c) for c in completions]
        verdicts = self.env.score_batch(tasks, texts)
        if len(verdicts) != len(texts):
            raise RuntimeError(f"env {self.__name__!r} returned {len(verdicts)} verdicts for {len(texts)} completions")
        return [float(v.reward) if v.scored else None for v in verdicts]

    def __repr__(self) -> str:
        return f"EnvRewardFunc({self.__name__!r}, task_id_column={self.task_id_column!r})"


def as_reward_func(env_or_suite: Any, *, task_id_column: str = "task_id") -> EnvRewardFunc:
    """A TRL-style reward function ``f(prompts, completions, **columns) -> list[float | None]``.

    Each row's task is found by the dataset column ``task_id_column``; the batch
    is scored in one ``score_batch`` call; rewards are in [0, 1], and ``None``
    where the verifier had an infrastructure error (TRL: "not applicable").
    """
    return EnvRewardFunc(env_or_suite, task_id_column)


def to_hf_dataset(env: Any, n: Optional[int] = None, *, task_id_column: str = "task_id") -> "datasets.Dataset":
    """A ``datasets.Dataset`` of the env's tasks (all, or the first ``n``) with columns
    ``prompt`` (chat messages if ``env.chat``, else text, with the env's system prompt)
    and ``task_id``."""
    import datasets

    inner = _unwrap(env)
    source = inner.source
    count = len(source) if n is None else min(int(n), len(source))
    if count < 1:
        raise ValueError(f"to_hf_dataset: n must be >= 1 (env {env_name(env)!r} has {len(source)} tasks), got {n}")
    tasks = [source[i] for i in range(count)]
    prompt_of = getattr(inner, "prompt_of", None)
    prompts = [prompt_of(t) if prompt_of else t.prompt for t in tasks]
    # Arrow wants one type per column: mixed text and chat prompts cannot share it.
    if len({isinstance(p, str) for p in prompts}) > 1:
        raise ValueError(f"env {env_name(env)!r} mixes text and chat prompts; set env.chat so all are one kind")
    return datasets.Dataset.from_dict({"prompt": prompts, task_id_column: [t.id for t in tasks]})
