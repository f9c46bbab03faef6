"""Errors between the trainer and a ``proctor serve`` engine: each names the server, the
call and what to do, so a stuck sync is an exception with a cause, never a silent hang."""

from __future__ import annotations


class EngineServerError(RuntimeError):
    """The engine server refused or failed a call (its message comes from the server)."""


class ServerUnreachable(EngineServerError):
    """Nothing answers at the URL (not started, crashed, wrong port)."""


class ServerTimeout(EngineServerError):
    """A call got no answer in time; the message names the call and what it was carrying."""


__all__ = ["EngineServerError", "ServerTimeout", "ServerUnreachable"]
