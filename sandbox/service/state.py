"""What every route of the service shares: the sandbox, the queue, the open sessions, the metrics.

The sandbox's calls block (they wait for containers); routes run them on worker
threads bounded by ``limiter``, so a burst of requests cannot start unbounded threads:
the admission bound (429) comes first, the limiter only sizes the thread pool to it.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Optional, TypeVar

import anyio

from ..errors import SessionClosed
from ..runner import JobRunner
from ..session import SessionLimits, closed_message
from .admission import Admission
from .metrics import Metrics
from .settings import ServiceSettings
from .status import SandboxStatus, ServedSession

T = TypeVar("T")


class UnknownSession(LookupError):
    """No session of this id is open here (never opened, or closed and forgotten): 404."""


class ServiceState:
    def __init__(self, sandbox: JobRunner, status: SandboxStatus, settings: ServiceSettings) -> None:
        self.sandbox, self.status = sandbox, status
        self.settings = settings
        self.admission = Admission(settings.max_pending, settings.max_sessions)
        self.metrics = Metrics()
        self.metrics.queue_max.set(settings.max_pending)
        self.metrics.slots.set(status.gauges().slots)
        # Worker threads: every admitted job may wait in one, and every session call.
        self.limiter = anyio.CapacityLimiter(settings.max_pending + settings.max_sessions + 8)
        self.sessions: dict[str, ServedSession] = {}
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[float, Any]] = {}

    def cached(self, key: str, ttl_s: float, make: Callable[[], Any]) -> Any:
        """``make()``'s value, made again only after ``ttl_s`` (for slow engine queries of /health)."""
        hit = self._cache.get(key)
        if hit is None or now() - hit[0] > ttl_s:
            hit = (now(), make())
            self._cache[key] = hit
        return hit[1]

    async def blocking(self, fn: Callable[..., T], *args: object) -> T:
        return await anyio.to_thread.run_sync(fn, *args, limiter=self.limiter)

    # ------------------------------------------------------------------ sessions
    def open_session(self, language: str, limits: Optional[SessionLimits]) -> ServedSession:
        """A new session counted against max_sessions (Full when there is no room). Blocking."""
        self.admission.take_session()
        try:
            session = self.sandbox.session(language, limits=limits)
        except BaseException:
            self.admission.give_session()
            raise
        with self._lock:
            self.sessions[session.id] = session
        self.metrics.sessions.set(self.admission.sessions)
        return session

    def session(self, session_id: str) -> ServedSession:
        """The open session of this id: UnknownSession when there is none, SessionClosed when it has ended."""
        with self._lock:
            session = self.sessions.get(session_id)
        if session is None:
            raise UnknownSession(f"no open session {session_id!r}: open one with POST /v1/sessions")
        if session.closed:
            self.forget(session)
            raise SessionClosed(closed_message(session.id, session.close_reason or "closed"))
        return session

    def forget(self, session: ServedSession) -> None:
        with self._lock:
            if self.sessions.pop(session.id, None) is None:
                return
        self.admission.give_session()
        self.metrics.sessions.set(self.admission.sessions)

    def close_session(self, session: ServedSession) -> None:
        session.close()
        self.forget(session)

    def sweep_sessions(self) -> int:
        """Forget sessions the sandbox closed (idle TTL, budget, crash): their places become free."""
        with self._lock:
            ended = [s for s in self.sessions.values() if s.closed]
        for session in ended:
            self.forget(session)
        return len(ended)

    def refresh_gauges(self) -> None:
        gauges = self.status.gauges()
        self.metrics.queue.set(self.admission.pending)
        self.metrics.sessions.set(self.admission.sessions)
        self.metrics.slots.set(gauges.slots)
        self.metrics.idle.set(gauges.idle)
        self.metrics.hosts_up.set(gauges.hosts_up)
        self.metrics.cache_hits.set(gauges.cache_saved)

    def close(self) -> None:
        with self._lock:
            sessions = list(self.sessions.values())
        for session in sessions:
            self.close_session(session)


def now() -> float:
    return time.monotonic()


__all__ = ["ServiceState", "UnknownSession", "now"]
