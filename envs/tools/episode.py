"""One episode with tools: each reply is read for calls, the calls are run, their results come back.

    episode = ToolEpisode(tools, parser, limits, task)
    step = episode.act(reply)      # ToolStep: the tool messages to show next, or final
    ...
    episode.close()                # every tool's per-episode state (a sandbox session) released

``act`` is the one rule for what a reply does, followed by ``ToolEnv.step`` and by the
trainer's token-level rollouts alike:

* no call in the reply: the episode ends, the reply is the answer (``reason="answer"``);
* calls, and it was the episode's last allowed reply (``ToolLimits.max_turns``): it ends
  unanswered (``"turn_limit"``), judged on that reply as it is;
* otherwise every call gets one ``tool`` message: the result, or for a malformed call, an
  unknown tool, bad arguments, a call over the limits, a failure or a timeout, an error
  message the model reads (counted in ``ToolStats`` by kind, never raised);
* a tool whose machinery failed (``infra_error``: the sandbox died) ends the episode at once
  as not judged (``ToolStep.infra_error``): it is dropped from training, never scored wrong.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Optional

from ..core.types import Message, Task
from .parsers import ToolCall, ToolCallParser
from .schema import Tool, ToolContext, ToolOutput, check_arguments

StepReason = Literal["answer", "tool_calls", "turn_limit", "cut_off", "infra_error"]
# Kinds of tool error, as counted in ToolStats.error_kinds.
ERROR_KINDS = ("malformed", "unknown_tool", "bad_arguments", "limit", "error", "timeout")


@dataclass(frozen=True)
class ToolLimits:
    """Per episode: ``max_turns`` model replies (the last must answer), ``max_calls`` tool calls
    (``max_calls_per_turn`` in one reply), ``episode_time_s`` seconds in tools; per call:
    ``timeout_s`` seconds and ``max_result_chars`` characters of result shown (the middle is cut)."""

    max_turns: int = 4
    max_calls: int = 8
    max_calls_per_turn: int = 4
    timeout_s: float = 10.0
    episode_time_s: float = 60.0
    max_result_chars: int = 2000

    def __post_init__(self) -> None:
        for name in ("max_turns", "max_calls", "max_calls_per_turn", "max_result_chars"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ToolLimits.{name} must be an integer >= 1, got {value!r}")
        for name in ("timeout_s", "episode_time_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"ToolLimits.{name} must be a positive number of seconds, got {value!r}")
        if self.max_result_chars < 100:
            raise ValueError(f"ToolLimits.max_result_chars must be >= 100, got {self.max_result_chars}")

    @classmethod
    def of(cls, spec: "ToolLimits | Mapping[str, Any] | None") -> "ToolLimits":
        """A ToolLimits from itself, a mapping of its fields (a config file's), or None (defaults)."""
        if spec is None or isinstance(spec, ToolLimits):
            return spec or cls()
        if not isinstance(spec, Mapping):
            raise TypeError(f"tool_limits must be a ToolLimits or a mapping of its fields, got {type(spec).__name__}")
        unknown = sorted(set(spec) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"tool_limits.{unknown[0]} is not a ToolLimits field; the fields are "
                             f"{', '.join(cls.__dataclass_fields__)}")
        return cls(**spec)


@dataclass(frozen=True)
class ToolStats:
    """What an episode's tools did: calls (each counted once, errors included), errors by kind,
    seconds spent in tools, model replies (``turns``), and calls per tool."""

    calls: int = 0
    errors: int = 0
    error_kinds: Mapping[str, int] = field(default_factory=dict)
    time_s: float = 0.0
    turns: int = 0
    by_tool: Mapping[str, int] = field(default_factory=dict)

    def as_info(self) -> dict[str, Any]:
        """Plain data for ``Verdict.info["tools"]`` and ``Rollout.extra["tools"]``."""
        return {"calls": self.calls, "errors": self.errors, "error_kinds": dict(self.error_kinds),
                "time_s": round(self.time_s, 6), "turns": self.turns, "by_tool": dict(self.by_tool)}


@dataclass(frozen=True)
class ToolStep:
    """What one reply did. ``messages``: the ``tool`` messages that follow it (none when final)."""

    final: bool
    reason: StepReason
    messages: tuple[Message, ...] = ()
    infra_error: Optional[str] = None


class ToolEpisode:
    """One episode's calls, limits and counts; not thread-safe (one episode, one caller)."""

    def __init__(self, tools: Mapping[str, Tool], parser: ToolCallParser, limits: ToolLimits, task: Task) -> None:
        self.tools = dict(tools)
        self.parser = parser
        self.limits = limits
        self.context = ToolContext(task)
        self.turns = 0
        self.calls = 0
        self.time_s = 0.0
        self.kinds: Counter[str] = Counter()
        self.by_tool: Counter[str] = Counter()
        self.closed = False

    @property
    def stats(self) -> ToolStats:
        return ToolStats(self.calls, sum(self.kinds.values()), dict(self.kinds), self.time_s, self.turns,
                         dict(self.by_tool))

    def act(self, reply: str) -> ToolStep:
        """Read ``reply`` for calls and run them (see the module docstring for the rule)."""
        if self.closed:
            raise RuntimeError("this tool episode is closed; open a new one for the next episode")
        self.turns += 1
        calls = self.parser.parse(reply).calls
        if not calls:
            return ToolStep(True, "answer")
        if self.turns >= self.limits.max_turns:
            return ToolStep(True, "turn_limit")
        messages = []
        runs = self.limits.max_calls_per_turn
        for n, call in enumerate(calls[:runs]):
            output, kind = self._one(call)
            if output.status == "infra_error":
                return ToolStep(True, "infra_error", infra_error=f"tool {call.name!r}: {output.content}")
            if kind is not None:
                self.kinds[kind] += 1
            messages.append(tool_message(call, self._shown(output.content), f"call_{self.turns}_{n}"))
        if len(calls) > runs:   # one message for the rest: a reply cannot fill the context with errors
            self.calls += len(calls) - runs
            self.kinds["limit"] += len(calls) - runs
            note = (f"Error: {len(calls) - runs} more tool call(s) in this reply were not run: at most {runs} are "
                    "run per reply")
            messages.append(tool_message(calls[runs], note, f"call_{self.turns}_{runs}"))
        return ToolStep(False, "tool_calls", tuple(messages))

    def cut_off(self) -> ToolStep:
        """A reply cut at the generation length limit ends the episode unread: its calls are not
        run (half a call is not one), and the reply is judged as it stands (the trainer's rule)."""
        self.turns += 1
        return ToolStep(True, "cut_off")

    def _one(self, call: ToolCall) -> tuple[ToolOutput, Optional[str]]:
        """(the call's output, its error kind or None)."""
        self.calls += 1
        left = self.limits.episode_time_s - self.time_s
        if self.calls > self.limits.max_calls or left <= 0:
            why = (f"the limit of {self.limits.max_calls} tool calls per episode is reached"
                   if self.calls > self.limits.max_calls else
                   f"the episode's {self.limits.episode_time_s:g} s of tool time are spent")
            return ToolOutput(f"Error: {why}; answer without more tool calls", "error"), "limit"
        if call.malformed:
            return ToolOutput(f"Error: malformed tool call: {call.error}. Write a call as "
                              f"{self.parser.format_call('<name>', {'<argument>': '<value>'})}", "error"), "malformed"
        tool = self.tools.get(call.name)
        if tool is None:
            return ToolOutput(f"Error: unknown tool {call.name!r}; the tools are "
                              f"{', '.join(sorted(self.tools)) or 'none'}", "error"), "unknown_tool"
        self.by_tool[call.name] += 1
        problem = check_arguments(tool.parameters, call.arguments)
        if problem:
            return ToolOutput(f"Error: bad arguments for {call.name}: {problem}", "error"), "bad_arguments"
        self.context.timeout_s = min(self.limits.timeout_s, left)
        start = time.perf_counter()
        output = tool.call(call.arguments, self.context)
        self.time_s += time.perf_counter() - start
        return output, {"error": "error", "timeout": "timeout"}.get(output.status)

    def _shown(self, text: str) -> str:
        """``text`` within ``max_result_chars``: its head and tail, the middle cut with a note."""
        limit = self.limits.max_result_chars
        if len(text) <= limit:
            return text
        note = "\n[... {} characters cut ...]\n"
        keep = limit - len(note) - 8
        head, tail = text[:keep // 2], text[len(text) - (keep - keep // 2):]
        return head + note.format(len(text) - len(head) - len(tail)) + tail

    def close(self) -> None:
        """Release every tool's per-episode state (idempotent)."""
        if self.closed:
            return
        self.closed = True
        for tool in self.tools.values():
            tool.end_episode(self.context)


def tool_message(call: ToolCall, content: str, default_id: str) -> Message:
    """The ``tool`` message that answers ``call`` (OpenAI's fields: name, tool_call_id)."""
    return {"role": "tool", "name": call.name, "tool_call_id": call.id or default_id, "content": content}


__all__ = ["ERROR_KINDS", "StepReason", "ToolEpisode", "ToolLimits", "ToolStats", "ToolStep", "tool_message"]
