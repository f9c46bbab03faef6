"""`EnvSuite`: a weighted mixture of environments, scored together, reported per env."""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

import gymnasium as gym
import numpy as np

from .env import VerifiableEnv
from .spaces import ChatSpace, TextSpace
from .types import Prompt, Task, Verdict
from .verifier import all_verdicts


@dataclass(frozen=True)
class SuiteItem:
    """A task drawn from a suite, with the name of the env it came from."""

    env: str
    task: Task


class EnvSuite(gym.Env):
    """Several envs under one name; ``weights`` set how often each is drawn.

    ``sample(n)`` draws tasks across envs; ``score_batch(items, completions)``
    sends each env its own share in one batch call (all code to the sandbox at
    once, all math to the worker pool at once) and returns verdicts in order;
    ``report`` gives reward and pass rate per env. As a Gymnasium env, ``reset``
    draws an env by weight and delegates the episode to it.
    """

    def __init__(self, envs: Mapping[str, VerifiableEnv], weights: Optional[Mapping[str, float]] = None) -> None:
        if not envs:
            raise ValueError("EnvSuite needs at least one env")
        self.envs = dict(envs)
        weights = dict(weights or {name: 1.0 for name in self.envs})
        unknown = set(weights) - set(self.envs)
        if unknown:
            raise ValueError(f"weights name envs not in the suite: {sorted(unknown)}; suite has {sorted(self.envs)}")
        w = np.array([float(weights.get(name, 0.0)) for name in self.envs])
        if (w < 0).any() or w.sum() <= 0:
            raise ValueError(f"suite weights must be >= 0 with a positive sum, got {weights}")
        self.names = list(self.envs)
        self.probs = w / w.sum()
        chat = {e.chat for e in self.envs.values()}
        self.observation_space = ChatSpace() if chat == {True} else TextSpace()
        self.action_space = TextSpace()
        self.current: Optional[str] = None

    # ------------------------------------------------------------------ batch API
    def sample(self, n: int, rng: Optional[np.random.Generator] = None) -> list[SuiteItem]:
        rng = rng if rng is not None else self.np_random
        picks = rng.choice(len(self.names), size=n, p=self.probs)
        return [SuiteItem(self.names[i], self.envs[self.names[i]].sample_tasks(1, rng)[0]) for i in picks]

    def score_batch(self, items: Sequence[SuiteItem], completions: Sequence[str]) -> list[Verdict]:
        if len(items) != len(completions):
            raise ValueError(f"{len(items)} items but {len(completions)} completions")
        by_env: dict[str, list[int]] = defaultdict(list)
        for i, item in enumerate(items):
            if item.env not in self.envs:
                raise KeyError(f"item {i} names env {item.env!r}, not in the suite {sorted(self.envs)}")
            by_env[item.env].append(i)
        out: list[Optional[Verdict]] = [None] * len(items)
        for name, idx in by_env.items():
            verdicts = self.envs[name].score_batch([items[i].task for i in idx], [completions[i] for i in idx])
            if len(verdicts) != len(idx):
                raise RuntimeError(f"env {name!r}: score_batch returned {len(verdicts)} verdicts for {len(idx)} "
                                   "completions; it must return one per completion, in order")
            for i, v in zip(idx, verdicts):
                out[i] = v
        return all_verdicts(out, "EnvSuite.score_batch")

    def prompt_of(self, item: SuiteItem) -> Prompt:
        return self.envs[item.env].prompt_of(item.task)

    @staticmethod
    def report(items: Sequence[SuiteItem], verdicts: Sequence[Verdict]) -> dict[str, dict[str, float]]:
        """Per env: samples, reward mean, pass rate, and how many could not be judged."""
        acc: dict[str, dict[str, float]] = defaultdict(lambda: {"n": 0, "reward_sum": 0.0, "correct": 0, "infra": 0})
        for item, v in zip(items, verdicts):
            a = acc[item.env]
            a["n"] += 1
            if v.scored:
                a["reward_sum"] += v.reward
                a["correct"] += v.correct
            else:
                a["infra"] += 1
        report = {}
        for name, a in acc.items():
            judged = a["n"] - a["infra"]
            report[name] = {"n": a["n"], "reward_mean": a["reward_sum"] / judged if judged else math.nan,
                            "pass_rate": a["correct"] / judged if judged else math.nan, "infra_errors": a["infra"]}
        return report

    # ------------------------------------------------------------------ Gymnasium API
    def reset(self, *, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None):
        super().reset(seed=seed)
        options = dict(options or {})
        name = options.pop("env", None) or self.names[int(self.np_random.choice(len(self.names), p=self.probs))]
        self.current = name
        sub_seed = int(self.np_random.integers(2**31)) if seed is not None else None
        obs, info = self.envs[name].reset(seed=sub_seed, options=options)
        return obs, {**info, "env": name}

    def step(self, action: str):
        if self.current is None:
            raise RuntimeError("call reset() before step()")
        obs, reward, terminated, truncated, info = self.envs[self.current].step(action)
        return obs, reward, terminated, truncated, {**info, "env": self.current}

    def close(self) -> None:
        for env in self.envs.values():
            env.close()
