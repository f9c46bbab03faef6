"""The service's bounded queue: jobs admitted and not yet finished, over every request.

A request that would take it past its bound is refused at once (429 with Retry-After)
instead of waiting in memory: the client's retry is the queue. Sessions have a bound
of their own.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Iterator


class Full(Exception):
    """The queue (or the session table) is full: answer 429."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


class Admission:
    def __init__(self, max_pending: int, max_sessions: int) -> None:
        self.max_pending = max_pending
        self.max_sessions = max_sessions
        self.pending = 0
        self.sessions = 0
        self._lock = threading.Lock()

    @contextmanager
    def jobs(self, n: int) -> Iterator[None]:
        """Hold ``n`` places of the queue for the block; `Full` if they are not free."""
        with self._lock:
            if self.pending + n > self.max_pending:
                raise Full(f"the service has {self.pending} jobs pending of at most {self.max_pending}")
            self.pending += n
        try:
            yield
        finally:
            with self._lock:
                self.pending -= n

    def take_session(self) -> None:
        with self._lock:
            if self.sessions >= self.max_sessions:
                raise Full(f"the service has {self.sessions} sessions open of at most {self.max_sessions}: "
                           "close one (DELETE /v1/sessions/ID) or wait for an idle one to expire")
            self.sessions += 1

    def give_session(self) -> None:
        with self._lock:
            self.sessions -= 1


__all__ = ["Admission", "Full"]
