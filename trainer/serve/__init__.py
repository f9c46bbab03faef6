"""vLLM as a server: ``proctor serve MODEL`` and the trainer's client for it."""

from .client import EngineClient, serialize_buckets
from .errors import EngineServerError, ServerTimeout, ServerUnreachable

__all__ = ["EngineClient", "EngineServerError", "ServerTimeout", "ServerUnreachable", "serialize_buckets"]
