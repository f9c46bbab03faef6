"""Gymnasium-style verifiable environments: math, code, text, behind one reward interface.

    import gymnasium, proctor.envs
    env = gymnasium.make("proctor/Math-v0")
    prompt, info = env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(completion)

Importing this package registers the built-in envs (``proctor envs list``).
``make_env(name, **kwargs)`` loads any env by id, ``module:factory`` or
``file.py:factory``; ``make_eval_env`` gives its held-out questions
(``partition``/``eval_fraction``, see ``core/splits.py``); ``with_reward_funcs``
adds TRL-style reward functions on top of an env (``core/reward_funcs.py``).
"""

from .core import (BadRow, ChatSpace, CheckReport, DifficultyKnob, EnvSuite, ListSource, Part, Problem, Rubric, RowSource,
                   SuiteItem, Task, TaskSource, TextSpace, VerifiableEnv, Verdict, Verifier, check_env,
                   exact_verdict, load_rows, mean_reward)
from .core.reward_funcs import (RewardFuncError, RewardFunctions, RewardFunctionsVerifier, combine_rewards,
                                with_reward_funcs)
from .core.splits import DEFAULT_EVAL_FRACTION, PartitionedSource, in_eval_partition, question_key
from .loader import EnvLoadError, limit_tasks, make_env, make_eval_env
from .registry import SPECS, register_all, registered

register_all()


def as_reward_func(env, **kw):  # noqa: ANN001, ANN201 - typed in proctor.envs.adapters
    """A TRL-style reward function over this env (see ``proctor.envs.adapters``)."""
    from .adapters import as_reward_func as _as_reward_func

    return _as_reward_func(env, **kw)


__all__ = [
    "BadRow", "ChatSpace", "CheckReport", "DifficultyKnob", "EnvSuite", "ListSource", "Part", "Problem", "Rubric", "RowSource",
    "SuiteItem", "Task", "TaskSource", "TextSpace", "VerifiableEnv", "Verdict", "Verifier", "check_env",
    "exact_verdict", "load_rows", "mean_reward", "SPECS", "register_all", "registered", "as_reward_func",
    "RewardFuncError", "RewardFunctions", "RewardFunctionsVerifier", "combine_rewards", "with_reward_funcs",
    "DEFAULT_EVAL_FRACTION", "PartitionedSource", "in_eval_partition", "question_key", "EnvLoadError", "make_env",
    "make_eval_env", "limit_tasks",
]
