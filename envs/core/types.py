"""What every environment shares: a task, and the verdict a verifier gives a completion."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, Mapping, Optional, Union

Message = dict[str, str]                 # {"role": "user", "content": "..."}
Prompt = Union[str, list[Message]]       # text for base models, chat messages for instruct models
VerdictStatus = Literal["ok", "infra_error"]


@dataclass(frozen=True)
class Task:
    """One verifiable problem.

    ``prompt``: what the model sees. ``answer``: the gold the verifier checks
    against (a math answer, an expected string; code tasks keep their tests in
    ``data``). ``data``: everything else the verifier needs (tests, cases,
    language, choices, ...). ``id`` is stable across runs (logs, pass-rate memory).
    """

    id: str
    prompt: Prompt
    answer: Optional[str] = None
    data: Mapping[str, Any] = field(default_factory=dict)
    source: str = ""

    def messages(self, system_prompt: Optional[str] = None) -> list[Message]:
        """The prompt as chat messages (a text prompt becomes one user message)."""
        msgs = [dict(m) for m in self.prompt] if isinstance(self.prompt, list) else [
            {"role": "user", "content": self.prompt}]
        if system_prompt and not (msgs and msgs[0].get("role") == "system"):
            msgs.insert(0, {"role": "system", "content": system_prompt})
        return msgs

    def text(self) -> str:
        """The prompt as plain text (chat messages joined by role)."""
        if isinstance(self.prompt, str):
            return self.prompt
        return "\n\n".join(f"{m.get('role', 'user')}: {m.get('content', '')}" for m in self.prompt)


@dataclass(frozen=True)
class Verdict:
    """A verifier's judgement of one completion.

    ``reward`` is in [0, 1]: the weighted mean of ``parts`` (each in [0, 1]). A verdict
    of user reward functions (TRL's ``reward_funcs``, which return any real number) is
    ``bounded=False``: its reward and parts need only be finite.
    ``status == "infra_error"`` means the completion was *not judged* (the sandbox
    or the scorer failed after retries): its reward is NaN and the trainer must drop
    the sample, never count it as wrong. ``feedback`` is what a multi-turn env shows
    the model next (a failing test's output); ``info`` holds the verifier's details.
    """

    reward: float
    parts: Mapping[str, float] = field(default_factory=dict)
    correct: bool = False
    status: VerdictStatus = "ok"
    feedback: Optional[str] = None
    info: Mapping[str, Any] = field(default_factory=dict)
    bounded: bool = True

    def __post_init__(self) -> None:
        if self.status == "ok" and not _allowed(self.reward, self.bounded):
            raise ValueError(f"Verdict.reward must be {_RANGE[self.bounded]}, got {self.reward!r}")
        for name, value in self.parts.items():
            if not _allowed(value, self.bounded):
                raise ValueError(f"Verdict.parts[{name!r}] must be {_RANGE[self.bounded]}, got {value!r}")

    @property
    def scored(self) -> bool:
        return self.status == "ok"

    @classmethod
    def infra(cls, error: str, **info: Any) -> "Verdict":
        return cls(reward=math.nan, status="infra_error", info={"error": error, **info})


_RANGE = {True: "in [0, 1]", False: "a finite number"}


def _allowed(value: float, bounded: bool) -> bool:
    return 0.0 <= value <= 1.0 if bounded else math.isfinite(value)
