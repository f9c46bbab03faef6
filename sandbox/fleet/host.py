"""`SandboxHost`: one node's share of the fleet, run as a Ray actor on that node.

It owns a `Sandbox` on the node's own Docker engine, reached over its unix socket (no
Docker API listens on the network), and runs the jobs the router sends it. Ray runs
each call on a thread of the actor (``max_concurrency``); the `Sandbox` is thread-safe
and bounds jobs running at once to its slots.
"""

from __future__ import annotations

import threading
from typing import Optional, Sequence

from ..errors import SessionClosed
from ..sandbox import Sandbox
from ..session import CellResult, Session, SessionLimits
from ..types import Job, Limits, Result
from .options import FleetOptions, HostInfo
from .security import local_engine, require_token_auth


class SandboxHost:
    """A `Sandbox` on this node's engine; the router's only way to run jobs here."""

    def __init__(self, options: FleetOptions, slots: int) -> None:
        import ray

        require_token_auth(options.allow_unauthenticated)   # before touching the Docker socket
        engine = local_engine()
        self.sandbox = Sandbox(hosts=[engine], slots=slots, retries=options.retries, runtime=options.runtime,
                               cpus_per_job=options.cpus_per_job, auto_build=options.auto_build,
                               startup_check=options.startup_check)
        ctx = ray.get_runtime_context()
        node = ray.util.get_node_ip_address()
        self.info = HostInfo(node_id=ctx.get_node_id(), address=node, engine=engine, slots=slots,
                             pool=self.sandbox.pool_id)
        self._sessions: dict[str, Session] = {}
        self._lock = threading.Lock()

    def describe(self) -> HostInfo:
        return self.info

    def run(self, job: Job) -> Result:
        return self.sandbox.run(job)

    def warmup(self, languages: Sequence[str], limits: Optional[Limits]) -> None:
        self.sandbox.warmup(languages, limits=limits)

    def stats(self) -> dict:
        return {"pool": self.sandbox.stats(), "health": {h: s.up for h, s in self.sandbox.health().items()},
                "sessions": len(self._sessions)}

    # ------------------------------------------------------------------ sessions
    def open_session(self, language: str, limits: Optional[SessionLimits]) -> tuple[str, SessionLimits]:
        session = self.sandbox.session(language, limits=limits)
        with self._lock:
            self._sessions[session.id] = session
        return session.id, session.limits

    def session_run(self, session_id: str, code: str, limits: Optional[SessionLimits]) -> CellResult:
        return self._session(session_id).run(code, limits=limits)

    def session_put_files(self, session_id: str, files: dict) -> None:
        self._session(session_id).put_files(files)

    def session_get_files(self, session_id: str, paths: Sequence[str]) -> dict[str, Optional[bytes]]:
        return self._session(session_id).get_files(paths)

    def session_close(self, session_id: str) -> None:
        with self._lock:
            session = self._sessions.pop(session_id, None)
        if session is not None:
            session.close()

    def _session(self, session_id: str) -> Session:
        with self._lock:
            session = self._sessions.get(session_id)
        if session is None:
            raise SessionClosed(f"session {session_id} is not open on {self.info.address}; open a new one")
        return session

    def close(self) -> None:
        """Stop every session and container of this host (the router calls it before it goes)."""
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), {}
        for session in sessions:
            session.close()
        self.sandbox.close()


__all__ = ["SandboxHost"]
