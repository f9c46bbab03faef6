"""Gymnasium spaces for text environments: any string, or a list of chat messages."""

from __future__ import annotations

from typing import Any

from gymnasium import spaces


class TextSpace(spaces.Space[str]):
    """Any Python string up to ``max_length`` characters (Gymnasium's Text limits the charset)."""

    def __init__(self, max_length: int = 1 << 20, seed: int | None = None) -> None:
        self.max_length = max_length
        super().__init__(dtype=object, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        n = int(self.np_random.integers(0, 32))
        return "".join(chr(int(c)) for c in self.np_random.integers(32, 127, size=n))

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length})"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, TextSpace) and other.max_length == self.max_length


class ChatSpace(spaces.Space[list]):
    """A list of ``{"role": ..., "content": ...}`` messages."""

    ROLES = ("system", "user", "assistant", "tool")

    def __init__(self, seed: int | None = None) -> None:
        super().__init__(dtype=object, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, list) and all(
            isinstance(m, dict) and m.get("role") in self.ROLES and isinstance(m.get("content"), str) for m in x)

    def sample(self, mask: Any = None, probability: Any = None) -> list:
        return [{"role": "user", "content": TextSpace().sample()}]

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "ChatSpace()"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, ChatSpace)


__all__ = ["TextSpace", "ChatSpace"]
