"""`VerifiableEnv`: a Gymnasium environment whose reward comes from a verifier.

    env = gymnasium.make("proctor/Math-v0")
    prompt, info = env.reset(seed=0)          # a task's prompt: chat messages (or text)
    obs, reward, terminated, truncated, info = env.step(completion)
    info["verdict"]                           # reward parts, the verifier's details

Single-turn by default (``max_turns=1``). With ``max_turns > 1`` a wrong answer
that the verifier has feedback for (a failing test's output) comes back as the
next observation, until the task is solved or the turns run out. Whether an episode
goes on is the env's decision alone: ``continues(verdict, turn)`` says it, and both
``step()`` and the trainer's token-level rollouts (``proctor.trainer.rollout.multiturn``) ask it;
``feedback_turn(verdict)`` is the user message that carries the feedback.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence

import gymnasium as gym
import numpy as np

from .difficulty import DifficultyKnob
from .sources import TaskSource
from .spaces import ChatSpace, TextSpace
from .types import Prompt, Task, Verdict
from .verifier import Rubric, Verifier

# Text-mode (``chat=False``) observations join the episode's turns with this.
TEXT_TURN_SEPARATOR = "\n\n"


class VerifiableEnv(gym.Env):
    """Draws tasks from a source; scores completions with a rubric."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, source: TaskSource, rubric: Rubric | Verifier, *, chat: bool = True,
                 system_prompt: Optional[str] = None, max_turns: int = 1,
                 feedback_template: str = "{feedback}\n\nPlease fix your answer.",
                 reference: Optional[Callable[[Task], Optional[str]]] = None,
                 difficulty: Optional[DifficultyKnob] = None,
                 render_mode: Optional[str] = None) -> None:
        if len(source) == 0:
            raise ValueError(f"task source {source.name!r} has no tasks")
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        self.source = source
        self.rubric = rubric if isinstance(rubric, Rubric) else Rubric(rubric)
        self.chat = chat
        self.system_prompt = system_prompt
        self.max_turns = max_turns
        self.feedback_template = feedback_template
        self.render_mode = render_mode
        # A known-good completion for a task, when the env can write one: the env
        # checker feeds it back to make sure the verifier accepts it.
        self.reference = reference
        # How hard each task is, when the env can say (``proctor.envs.core.difficulty``): the
        # trainer's selector aims each group at the policy's frontier with it.
        if difficulty is not None and not isinstance(difficulty, DifficultyKnob):
            raise TypeError(f"difficulty must be a DifficultyKnob, got {type(difficulty).__name__}")
        self.difficulty = difficulty
        self.observation_space = ChatSpace() if chat else TextSpace()
        self.action_space = TextSpace()
        self.task: Optional[Task] = None
        self.turn = 0
        self.history: list[dict[str, str]] = []

    # ------------------------------------------------------------------ Gymnasium API
    def reset(self, *, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None
              ) -> tuple[Prompt, dict[str, Any]]:
        super().reset(seed=seed)
        options = options or {}
        if "task" in options:
            task = options["task"]
        elif "index" in options:
            task = self.source[int(options["index"])]
        else:
            task = self.source[int(self.np_random.integers(len(self.source)))]
        self.task, self.turn = task, 0
        self.history = task.messages(self.system_prompt)
        return self._observation(), {"task": task, "task_id": task.id}

    def step(self, action: str) -> tuple[Prompt, float, bool, bool, dict[str, Any]]:
        if self.task is None:
            raise RuntimeError("call reset() before step()")
        if not isinstance(action, str):
            raise TypeError(f"step() takes the completion text (str), got {type(action).__name__}")
        self.turn += 1
        verdict = self.rubric.score(self.task, action)
        self.history.append({"role": "assistant", "content": action})
        solved = verdict.scored and verdict.correct
        more = self.continues(verdict, self.turn)
        info: dict[str, Any] = {"verdict": verdict, "parts": dict(verdict.parts), "correct": verdict.correct,
                                "status": verdict.status, "turn": self.turn, "task_id": self.task.id}
        if not verdict.scored:
            info["drop"] = True   # not judged: train on nothing, count nothing
        if more:
            self.history.append(self.feedback_turn(verdict))
            return self._observation(), float(verdict.reward), False, False, info
        truncated = not solved and self.turn >= self.max_turns and self.max_turns > 1
        return self._observation(), float(verdict.reward), True, truncated, info

    def render(self) -> Optional[str]:
        if self.render_mode == "ansi":
            return "\n".join(f"[{m['role']}] {m['content']}" for m in self.history)
        return None

    def close(self) -> None:
        self.rubric.close()

    # ------------------------------------------------------------------ multi-turn rule
    def continues(self, verdict: Verdict, turn: int) -> bool:
        """Whether the episode goes on after the answer of turn ``turn`` (1 for the first
        answer) was judged ``verdict``: a judged, wrong answer with feedback, and turns left.
        ``step()`` and the trainer's multi-turn rollouts both follow this; override it (and
        ``feedback_turn``) to change the rule, never one of them alone."""
        return (verdict.scored and not verdict.correct and verdict.feedback is not None
                and turn < self.max_turns)

    def feedback_turn(self, verdict: Verdict) -> dict[str, str]:
        """The user message that follows an answer ``continues`` goes on from."""
        if verdict.feedback is None:
            raise ValueError("feedback_turn() needs a verdict with feedback")
        return {"role": "user", "content": self.feedback_template.format(feedback=verdict.feedback)}

    # ------------------------------------------------------------------ batch API (trainers)
    def score_batch(self, tasks: Sequence[Task], completions: Sequence[str]) -> list[Verdict]:
        """Score a whole group set at once (the sandbox or worker pool runs them concurrently)."""
        return self.rubric.score_batch(tasks, completions)

    async def ascore_batch(self, tasks: Sequence[Task], completions: Sequence[str]) -> list[Verdict]:
        return await self.rubric.ascore_batch(tasks, completions)

    def sample_tasks(self, n: int, rng: Optional[np.random.Generator] = None) -> list[Task]:
        rng = rng if rng is not None else self.np_random
        return [self.source[int(i)] for i in rng.integers(len(self.source), size=n)]

    def prompt_of(self, task: Task) -> Prompt:
        return task.messages(self.system_prompt) if self.chat else _text_prompt(task, self.system_prompt)

    # ------------------------------------------------------------------ helpers
    def _observation(self) -> Prompt:
        if self.chat:
            return [dict(m) for m in self.history]
        if self.task is None:
            return ""
        return _text_prompt(self.task, self.system_prompt) if self.turn == 0 else TEXT_TURN_SEPARATOR.join(
            m["content"] for m in self.history if m["role"] != "system")


def _text_prompt(task: Task, system_prompt: Optional[str]) -> str:
    text = task.text()
    return f"{system_prompt}\n\n{text}" if system_prompt else text


def mean_reward(verdicts: Sequence[Verdict]) -> float:
    scored = [v.reward for v in verdicts if v.scored]
    return sum(scored) / len(scored) if scored else math.nan
