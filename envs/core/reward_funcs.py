"""Rewards as plain callables, with TRL's signature, so TRL users bring their functions unchanged.

    def accuracy(prompts, completions, solution, **kwargs) -> list[float | None]: ...
    verifier = RewardFunctionsVerifier([accuracy, "my_rewards:fmt"], weights=[1.0, 0.2])

A function is called once per batch as ``f(prompts=..., completions=..., **columns)``,
exactly as TRL calls it on the same dataset: ``prompts`` is each task's prompt column
(``task.prompt``: text, or chat messages), ``completions`` a str each, or
``[{"role": "assistant", "content": text}]`` when the prompt is chat messages (TRL's
"conversational" test), ``columns`` the task's other fields as lists (a row's
fields, ``task_id``, and ``answer`` when the task has one). TRL's ``completion_ids``,
``trainer_state``, ``log_extra`` and ``log_metric`` are not passed. ``async def``
functions run concurrently. A function may be given as a ``module:name`` reference.

The one rule for combining several rewards (TRL's ``sum_then_normalize``, before the
trainer normalises by group):

    reward = sum over terms k that gave a number of  w_k * r_k

``None`` (or NaN) from a function means "does not apply to this sample" and is left
out of the sum. On top of an env, the env's verdict is one more term (``env_weight``).
A sample no term applies to is not judged (as TRL marks it NaN: no baseline share, no
advantage). A sample the env could not judge, or a batch in which a function raised,
is not judged either, and the verdict names the error: never a silent 0. A function
that returns the wrong number of values, or something that is not a number, raises
:class:`RewardFuncError` naming it: that is a bug to fix, not a sample to skip.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import math
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from .env import VerifiableEnv
from .refs import load_object
from .types import Prompt, Task, Verdict
from .verifier import Rubric, Verifier, _check_lengths

RewardFunc = Callable[..., Sequence[Optional[float]]]   # f(prompts, completions, **columns) -> list[float | None]
FuncSpec = Union[RewardFunc, str]                        # a callable, or "module:name" / "file.py:name"
# What TRL never passes as a column (it passes them itself, or not at all).
RESERVED = frozenset({"prompt", "prompts", "completion", "completions", "completion_ids"})


class RewardFuncError(ValueError):
    """A reward function broke its contract (count or type of its values); names the function."""


def combine_rewards(values: Sequence[Optional[float]], weights: Sequence[float]) -> Optional[float]:
    """The combining rule: ``sum_k w_k * r_k`` over the values that are not None; None if all are None."""
    terms = [w * v for v, w in zip(values, weights, strict=True) if v is not None]
    return math.fsum(terms) if terms else None


def _func_name(func: RewardFunc) -> str:
    # TRL logs rewards/<__name__>; a functools.partial or a callable object may have none.
    return str(getattr(func, "__name__", None) or type(func).__name__)


def _check_signature(func: RewardFunc, name: str) -> None:
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):   # builtins and some C callables have no readable signature
        return
    if not any(p.kind is p.VAR_KEYWORD or p.name == "completions" for p in params):
        raise RewardFuncError(f"reward function {name!r} takes neither completions= nor **kwargs; a reward "
                              "function is called as f(prompts=..., completions=..., **columns) (TRL's signature)")


@dataclass(frozen=True)
class RewardFunctions:
    """Reward functions with their weights and the names their values are logged under."""

    funcs: tuple[RewardFunc, ...]
    weights: tuple[float, ...]
    names: tuple[str, ...]

    @classmethod
    def of(cls, funcs: Sequence[FuncSpec], weights: Optional[Sequence[float]] = None,
           reserved_names: Sequence[str] = ()) -> "RewardFunctions":
        """Resolve references, check each function, default every weight to 1, make names distinct."""
        if isinstance(funcs, (str, bytes)) or callable(funcs):
            funcs = [funcs]  # type: ignore[list-item]
        resolved = [load_object(f, "reward function") if isinstance(f, str) else f for f in funcs]
        if not resolved:
            raise RewardFuncError("reward_funcs is empty: give at least one function")
        for i, f in enumerate(resolved):
            if not callable(f):
                raise RewardFuncError(f"reward_funcs[{i}] is a {type(f).__name__}, not a function")
        weights = [1.0] * len(resolved) if weights is None else list(weights)
        if len(weights) != len(resolved):
            raise RewardFuncError(f"{len(weights)} reward_weights for {len(resolved)} reward_funcs: give one each")
        if not all(isinstance(w, (int, float)) and math.isfinite(w) for w in weights):
            raise RewardFuncError(f"reward_weights must be finite numbers, got {weights}")
        names: list[str] = []
        taken = set(reserved_names)
        for f in resolved:
            base = name = _func_name(f)
            k = 2
            while name in taken:           # two lambdas, or a function named like the env's term
                name, k = f"{base}_{k}", k + 1
            taken.add(name)
            names.append(name)
            _check_signature(f, name)
        return cls(tuple(resolved), tuple(float(w) for w in weights), tuple(names))

    def evaluate(self, prompts: Sequence[Prompt], completions: Sequence[Any], columns: Mapping[str, list]
                 ) -> tuple[list[list[Optional[float]]], dict[str, str]]:
        """Each function's values (None where it does not apply), and the error of each that raised."""
        n = len(completions)
        outputs: list[Any] = []
        errors: dict[str, str] = {}
        pending: dict[int, Any] = {}
        for i, (func, name) in enumerate(zip(self.funcs, self.names)):
            try:
                # fresh lists for each function: one that edits its arguments cannot reach the next
                out = func(prompts=list(prompts), completions=list(completions),
                           **{k: list(v) for k, v in columns.items()})
            except Exception as exc:  # noqa: BLE001 - a raising reward function: not judged, error named
                errors[name] = f"{type(exc).__name__}: {exc}"
                out = None
            if inspect.isawaitable(out):
                pending[i] = out
            outputs.append(out)
        for i, result in _await_all(pending).items():
            if isinstance(result, BaseException):
                errors[self.names[i]] = f"{type(result).__name__}: {result}"
                outputs[i] = None
            else:
                outputs[i] = result
        values = [[None] * n if name in errors else _values(name, out, n)
                  for name, out in zip(self.names, outputs)]
        return values, errors


def _await_all(pending: Mapping[int, Any]) -> dict[int, Any]:
    """Await the async functions' results together (TRL gathers them); exceptions are returned."""
    if not pending:
        return {}

    async def gather() -> list[Any]:
        return await asyncio.gather(*pending.values(), return_exceptions=True)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        results = asyncio.run(gather())
    else:   # called from inside an event loop: run ours in a thread rather than nest loops
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            results = pool.submit(asyncio.run, gather()).result()
    return dict(zip(pending, results))


def _values(name: str, out: Any, n: int) -> list[Optional[float]]:
    if out is None or isinstance(out, (str, bytes, Mapping)):
        raise RewardFuncError(f"reward function {name!r} returned {type(out).__name__}; it must return a list "
                              f"of {n} floats (or None where it does not apply)")
    values = list(out)
    if len(values) != n:
        raise RewardFuncError(f"reward function {name!r} returned {len(values)} rewards for {n} completions; it "
                              "must return exactly one per completion (None where it does not apply)")
    return [_value(name, i, v) for i, v in enumerate(values)]


def _value(name: str, i: int, v: Any) -> Optional[float]:
    if v is None:
        return None
    if isinstance(v, (str, bytes)):
        raise RewardFuncError(f"reward function {name!r} returned {v!r} (a string) for completion {i}; return a float")
    try:
        x = float(v)
    except (TypeError, ValueError):
        raise RewardFuncError(f"reward function {name!r} returned a {type(v).__name__} for completion {i}; "
                              "return a float (or None)") from None
    if math.isnan(x):
        return None                  # TRL: NaN and None are the same "does not apply"
    if math.isinf(x):
        raise RewardFuncError(f"reward function {name!r} returned {x} for completion {i}; return a finite float")
    return x


def trl_completion(prompt: Prompt, text: str) -> Any:
    """A completion as TRL hands it to reward functions: messages when the prompt is messages."""
    return [{"role": "assistant", "content": text}] if isinstance(prompt, list) else text


def task_columns(tasks: Sequence[Task]) -> dict[str, list]:
    """The batch's columns: every field of the tasks' ``data`` (None where a task lacks it),
    ``task_id``, and ``answer`` when a task has one and no field is called so."""
    rows = []
    for task in tasks:
        row = {k: v for k, v in task.data.items() if k not in RESERVED}
        row.setdefault("task_id", task.id)
        if task.answer is not None:
            row.setdefault("answer", task.answer)
        rows.append(row)
    keys = list(dict.fromkeys(k for row in rows for k in row))
    return {k: [row.get(k) for row in rows] for k in keys}


class RewardFunctionsVerifier(Verifier):
    """Scores with reward functions, alone or on top of a base rubric (an env's).

    ``base``: the env's rubric (or verifier); its reward is the term ``base_name`` with
    weight ``base_weight``, and it says whether a sample is ``correct``. With no base,
    a sample is correct when its reward is at least ``pass_threshold`` (never, if None).
    Verdicts are ``bounded=False``:
    the reward is any finite number, as the functions' weighted sum is.
    """

    name = "reward_funcs"

    def __init__(self, funcs: Sequence[FuncSpec], weights: Optional[Sequence[float]] = None, *,
                 base: Union[Rubric, Verifier, None] = None, base_weight: float = 1.0, base_name: str = "env",
                 pass_threshold: Optional[float] = None) -> None:
        if not math.isfinite(base_weight):
            raise ValueError(f"env_weight must be a finite number, got {base_weight!r}")
        self.funcs = RewardFunctions.of(funcs, weights, reserved_names=(base_name,) if base is not None else ())
        self.base = base if isinstance(base, Rubric) or base is None else Rubric(base)
        self.base_weight, self.base_name = float(base_weight), base_name
        self.pass_threshold = pass_threshold

    def verify(self, task: Task, completion: str) -> Verdict:
        return self.verify_batch([task], [completion])[0]

    def verify_batch(self, tasks: Sequence[Task], completions: Sequence[str]) -> list[Verdict]:
        _check_lengths(tasks, completions)
        if not tasks:
            return []
        base = self.base.score_batch(tasks, completions) if self.base is not None else [None] * len(tasks)
        if len(base) != len(tasks):
            raise RuntimeError(f"the base rubric returned {len(base)} verdicts for {len(tasks)} completions")
        prompts = [t.prompt for t in tasks]
        values, errors = self.funcs.evaluate(prompts, [trl_completion(p, c) for p, c in zip(prompts, completions)],
                                             task_columns(tasks))
        return [self._verdict(b, [v[i] for v in values], errors) for i, b in enumerate(base)]

    def _verdict(self, base: Optional[Verdict], values: list[Optional[float]], errors: Mapping[str, str]) -> Verdict:
        if base is not None and not base.scored:
            return base                                  # the env could not judge: nor can the sum
        rewards = dict(zip(self.funcs.names, values))
        if errors:
            name, error = next(iter(errors.items()))
            return Verdict.infra(f"reward function {name!r} raised {error}", reward_func_errors=dict(errors))
        terms, weights = list(values), list(self.funcs.weights)
        if base is not None:
            terms.insert(0, base.reward)
            weights.insert(0, self.base_weight)
        reward = combine_rewards(terms, weights)
        if reward is None:
            return Verdict.infra("no reward function applies to this sample (every one returned None)",
                                 rewards=rewards)
        parts = {k: v for k, v in rewards.items() if v is not None}
        info: dict[str, Any] = {"rewards": rewards}
        if base is None:
            correct = self.pass_threshold is not None and reward >= self.pass_threshold
            return Verdict(reward=reward, parts=parts, correct=correct, info=info, bounded=False)
        info = {**base.info, "env_parts": dict(base.parts), **info}
        return Verdict(reward=reward, parts={self.base_name: base.reward, **parts}, correct=base.correct,
                       feedback=base.feedback, info=info, bounded=False)

    def close(self) -> None:
        if self.base is not None:
            self.base.close()


def with_reward_funcs(env: VerifiableEnv, funcs: Sequence[FuncSpec], weights: Optional[Sequence[float]] = None, *,
                      env_weight: float = 1.0, env_name: str = "env") -> VerifiableEnv:
    """A new env over the same tasks whose reward is ``env_weight * env's reward + sum_k w_k * f_k``
    (the rule above); the env's verifier still decides ``correct`` and multi-turn feedback."""
    if not isinstance(env, VerifiableEnv):
        raise TypeError(f"with_reward_funcs needs a proctor VerifiableEnv, got {type(env).__name__}")
    verifier = RewardFunctionsVerifier(funcs, weights, base=env.rubric, base_weight=env_weight, base_name=env_name)
    return VerifiableEnv(env.source, verifier, chat=env.chat, system_prompt=env.system_prompt,
                         max_turns=env.max_turns, feedback_template=env.feedback_template, reference=env.reference,
                         difficulty=env.difficulty, render_mode=env.render_mode)
