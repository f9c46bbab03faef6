"""One way to load an environment by name, for ``proctor envs check``, ``proctor eval`` and ``proctor train``.

    make_env("proctor/Math-v0", tasks="math.jsonl")        # a registered Gymnasium id
    make_env("my_envs:make_env", level=3)                   # module:factory (the current directory is searched)
    make_env("path/to/file.py:make_env")                    # a file's factory
    make_env("proctor/Arithmetic-v0", partition="train")    # its train questions only
    make_eval_env("proctor/Arithmetic-v0", limit=200)       # its held-out questions (at most 200)

``partition`` / ``eval_fraction`` give disjoint train and eval question sets
(``proctor.envs.core.splits``): the built-in envs draw them at the source; an env
from any other factory is built as usual and its tasks are then filtered by question.
"""

from __future__ import annotations

from typing import Any, Optional

import gymnasium as gym

from .core.env import VerifiableEnv
from .core.refs import RefError, is_ref, load_object
from .core.sources import ListSource
from .core.splits import DEFAULT_EVAL_FRACTION, PartitionedSource, check_partition
from .registry import SPECS, registered

BUILTIN_IDS = frozenset(spec.id for spec in SPECS)


class EnvLoadError(ValueError):
    """An env name that cannot be loaded; the message says what exists or what to fix."""


def make_env(target: str, /, *, partition: Optional[str] = None, eval_fraction: float = DEFAULT_EVAL_FRACTION,
             **kwargs: Any) -> gym.Env:
    """The env ``target`` names, made with ``kwargs``: a registered id (``proctor/Math-v0``,
    also Gymnasium's ``module:Env-v0``), ``module:factory`` or ``path/to/file.py:factory``.

    Gymnasium's wrappers are removed (``.unwrapped``): trainers and the checker need the
    env itself. ``partition="train" | "eval"`` keeps only those questions.
    """
    try:
        check_partition(partition, eval_fraction)
    except ValueError as exc:
        raise EnvLoadError(f"{target}: {exc}") from None
    builtin = target in BUILTIN_IDS
    if builtin and partition is not None:
        kwargs = {**kwargs, "partition": partition, "eval_fraction": eval_fraction}
    env = _build(target, kwargs)
    if partition is not None and not builtin:
        inner = _verifiable(env, target, "partition")
        inner.source = PartitionedSource(inner.source, partition, eval_fraction)  # type: ignore[arg-type]
    return env


def make_eval_env(target: str, /, *, eval_fraction: float = DEFAULT_EVAL_FRACTION, limit: Optional[int] = None,
                  **kwargs: Any) -> VerifiableEnv:
    """The eval side of ``make_env(target, partition="train", eval_fraction=..., **kwargs)``:
    the same env over its held-out questions only, the first ``limit`` of them if given.

    Procedural envs give distinct questions here (fewer than ``n`` when the held-out part
    of their question space is smaller: level 1 arithmetic holds out 20 of its 126 questions).
    """
    if limit is not None and limit < 1:
        raise EnvLoadError(f"{target}: limit must be >= 1 (or None for every eval question), got {limit}")
    made = make_env(target, partition="eval", eval_fraction=eval_fraction, **kwargs)
    return limit_tasks(_verifiable(made, target, "an eval split"), limit)


def limit_tasks(env: VerifiableEnv, limit: Optional[int]) -> VerifiableEnv:
    """The env over its first ``limit`` tasks (all if None): a fixed eval set, not a draw."""
    if limit is not None and limit < len(env.source):
        env.source = ListSource([env.source[i] for i in range(limit)], name=f"{env.source.name}[:{limit}]")
    return env


def _build(target: str, kwargs: dict[str, Any]) -> gym.Env:
    if target in gym.registry:
        return _gym_make(target, kwargs)
    if is_ref(target):
        try:
            factory = load_object(target, "env factory")
        except RefError as exc:
            raise EnvLoadError(str(exc)) from None
        if not callable(factory):
            raise EnvLoadError(f"env factory {target!r} is a {type(factory).__name__}, not a class or function")
        env = factory(**kwargs)
        return env.unwrapped if isinstance(env, gym.Env) else env
    if ":" in target:                        # Gymnasium's own "module:Env-v0": it imports the module
        return _gym_make(target, kwargs)
    known = ", ".join(i for i, _ in registered())
    raise EnvLoadError(f"{target!r} is neither a registered env ({known}) nor module:factory "
                       "or path/to/file.py:factory (see `proctor envs list`)")


def _gym_make(target: str, kwargs: dict[str, Any]) -> gym.Env:
    try:
        return gym.make(target, **kwargs).unwrapped
    except (gym.error.Error, ModuleNotFoundError) as exc:
        raise EnvLoadError(f"{target}: {exc}") from None


def _verifiable(env: gym.Env, target: str, what: str) -> VerifiableEnv:
    if not isinstance(env, VerifiableEnv):
        raise EnvLoadError(f"{target}: {what} needs a proctor VerifiableEnv (its tasks come from a source), "
                           f"got {type(env).__name__}")
    return env
