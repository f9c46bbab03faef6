"""`ToolEnv`: a verifiable environment whose model may call tools before it answers.

    env = ToolEnv(source, MathVerifier(), tools=[PythonTool()], limits=ToolLimits(max_turns=4))
    obs, info = env.reset(seed=0)            # chat messages; info["tools"]: the OpenAI schemas
    obs, reward, terminated, truncated, info = env.step(reply)

The tools reach the model through the chat template: prompts are rendered with
``apply_chat_template(messages, tools=env.tool_schemas())`` (the trainer does this). Each
reply goes to the episode (`ToolEpisode.act`): a reply with calls gets its ``tool``
messages as the next observation (reward 0, not terminated); a reply without is the answer,
judged by the rubric on its text (calls removed) and the episode ends. An episode that
reaches ``limits.max_turns`` replies without answering ends ``truncated``; a tool's
infrastructure failure ends it as ``infra_error`` (NaN reward, ``info["drop"]``). Every
final verdict carries the episode's tool counts in ``info["tools"]``.

The trainer's token-level rollouts follow the same rule through ``open_episode`` and
``finish_batch``, with the tools of many episodes running at once (``concurrency``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from ..core.env import VerifiableEnv
from ..core.sources import TaskSource
from ..core.types import Message, Prompt, Task, Verdict
from ..core.verifier import Rubric, Verifier
from .episode import ToolEpisode, ToolLimits, ToolStats, ToolStep
from .parsers import ToolCallParser, get_parser
from .schema import Tool, as_tool

ToolLike = Union[Tool, Callable[..., Any]]


class ToolEnv(VerifiableEnv):
    """Tasks, a rubric, and ``tools`` (`Tool` objects or plain functions) the model may call.

    ``parser``: how the model family writes calls (``"hermes"``, ``"openai"``, a registered name
    or a `ToolCallParser`). ``limits``: a `ToolLimits` or a mapping of its fields; its
    ``max_turns`` is the env's. ``concurrency``: episodes whose tools a trainer runs at once."""

    def __init__(self, source: TaskSource, rubric: Rubric | Verifier, *, tools: Sequence[ToolLike],
                 parser: Union[str, ToolCallParser] = "hermes",
                 limits: Union[ToolLimits, Mapping[str, Any], None] = None, concurrency: int = 16,
                 **kwargs: Any) -> None:
        if "max_turns" in kwargs:
            raise ValueError("ToolEnv: the turns of an episode are limits.max_turns (ToolLimits(max_turns=...) or "
                             "limits={'max_turns': ...}), not max_turns")
        if kwargs.get("chat") is False:
            raise ValueError("ToolEnv needs chat prompts (chat=True): the chat template renders its tools")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"ToolEnv: concurrency must be an integer >= 1, got {concurrency!r}")
        self.limits = ToolLimits.of(limits)
        super().__init__(source, rubric, max_turns=self.limits.max_turns, **kwargs)
        self.tools = _tool_table(tools)
        self.parser = get_parser(parser)
        self.concurrency = concurrency
        self.episode: Optional[ToolEpisode] = None

    # ------------------------------------------------------------------ tools
    def tool_schemas(self) -> list[dict[str, Any]]:
        """The tools as OpenAI function schemas, for ``apply_chat_template(tools=...)``."""
        return [tool.schema() for tool in self.tools.values()]

    def open_episode(self, task: Task) -> ToolEpisode:
        """A fresh episode of ``task``; close it when it ends (its sessions are freed there)."""
        return ToolEpisode(self.tools, self.parser, self.limits, task)

    def finish_batch(self, tasks: Sequence[Task], replies: Sequence[str], steps: Sequence[ToolStep],
                     stats: Sequence[ToolStats]) -> list[Verdict]:
        """The verdicts of finished episodes: each final reply's text (its calls removed) judged by
        the rubric in one batch, an infrastructure failure as ``Verdict.infra``; each with its
        episode's tool counts in ``info["tools"]``."""
        if not len(tasks) == len(replies) == len(steps) == len(stats):
            raise ValueError(f"finish_batch: {len(tasks)} tasks, {len(replies)} replies, {len(steps)} steps and "
                             f"{len(stats)} stats must pair up")
        judged = [i for i, step in enumerate(steps) if step.infra_error is None]
        verdicts = dict(zip(judged, self.rubric.score_batch(
            [tasks[i] for i in judged], [self.parser.parse(replies[i]).content for i in judged])))
        out = []
        for i, (step, s) in enumerate(zip(steps, stats)):
            verdict = verdicts.get(i) or Verdict.infra(step.infra_error or "tool failure")
            out.append(replace(verdict, info={**verdict.info, "tools": s.as_info(), "tool_end": step.reason}))
        return out

    # ------------------------------------------------------------------ Gymnasium API
    def reset(self, *, seed: Optional[int] = None, options: Optional[dict[str, Any]] = None
              ) -> tuple[Prompt, dict[str, Any]]:
        self._end_episode()
        obs, info = super().reset(seed=seed, options=options)
        assert self.task is not None
        self.episode = self.open_episode(self.task)
        return obs, {**info, "tools": self.tool_schemas()}

    def step(self, action: str) -> tuple[Prompt, float, bool, bool, dict[str, Any]]:
        if self.task is None or self.episode is None:
            raise RuntimeError("call reset() before step() (an episode that ended needs a new reset())")
        if not isinstance(action, str):
            raise TypeError(f"step() takes the reply text (str), got {type(action).__name__}")
        self.turn += 1
        step = self.episode.act(action)
        self.history.append({"role": "assistant", "content": action})
        info: dict[str, Any] = {"turn": self.turn, "task_id": self.task.id, "tool_step": step.reason}
        if not step.final:
            self.history.extend(dict(m) for m in step.messages)
            info.update(verdict=None, tools=self.episode.stats.as_info(), tool_messages=list(step.messages))
            return self._observation(), 0.0, False, False, info
        stats = self.episode.stats
        self._end_episode()
        verdict = self.finish_batch([self.task], [action], [step], [stats])[0]
        info.update(verdict=verdict, parts=dict(verdict.parts), correct=verdict.correct, status=verdict.status,
                    tools=stats.as_info())
        if not verdict.scored:
            info["drop"] = True
        return self._observation(), float(verdict.reward), True, step.reason == "turn_limit", info

    def continues(self, verdict: Verdict, turn: int) -> bool:
        """Never: an answer ends a tool episode (its further turns are tool turns, ``ToolEpisode.act``)."""
        return False

    def feedback_turn(self, verdict: Verdict) -> Message:
        raise ValueError("a ToolEnv has no feedback turns: its episodes go on through tool calls only")

    def close(self) -> None:
        self._end_episode()
        super().close()
        for tool in self.tools.values():
            tool.close()

    def _end_episode(self) -> None:
        if self.episode is not None:
            self.episode.close()
            self.episode = None


def _tool_table(tools: Sequence[ToolLike]) -> dict[str, Tool]:
    table: dict[str, Tool] = {}
    for tool in map(as_tool, tools):
        tool.schema()   # a bad declaration fails here, with its name
        if tool.name in table:
            raise ValueError(f"two tools are named {tool.name!r}; tool names must be distinct")
        table[tool.name] = tool
    if not table:
        raise ValueError("ToolEnv needs at least one tool (a Tool or a plain function)")
    return table


def is_tool_env(env: Any) -> bool:
    """Whether ``env`` runs tool episodes (``open_episode`` / ``finish_batch`` / ``tool_schemas``)."""
    return isinstance(getattr(env, "unwrapped", env), ToolEnv)


__all__ = ["ToolEnv", "ToolLike", "is_tool_env"]
