"""`SandboxHost`: one node's share of the fleet, run as a Ray actor on that node.

It owns a `Sandbox` on the node's own Docker engine, reached over its unix socket (no
Docker API listens on the network), and runs the jobs the router sends it. Ray runs
each call on a thread of the actor (``max_concurrency``); the `Sandbox` is thread-safe
and bounds jobs running at once to its slots.

Jobs travel in batches, not one actor call each (a Ray call costs the router about a
millisecond of CPU, more than routing the job): ``submit`` queues tagged jobs on the
node's slots, and ``take`` hands back the finished ones, waiting until enough of the
queue has drained that one reply carries several results, never so long that the
node's slots run dry. ``exchange`` is both in one call: the router sends each refill
with its next take.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Optional, Sequence, Union

from ..errors import SessionClosed
from ..sandbox import Sandbox
from ..session import CellResult, Session, SessionLimits
from ..types import Job, Limits, Result
from .options import FleetOptions, HostInfo
from .security import local_engine, require_token_auth

# What ``take`` hands back per job: its Result, or why this host could not run it (a bug or a
# refusal here, not the program's doing; the router tries another node or says infra_error).
Outcome = Union[Result, str]
log = logging.getLogger("proctor.sandbox.fleet")


def normal_priority() -> None:
    """Undo Ray's niceness for this worker process (Ray starts workers at nice 15).

    The host and the router only wait on Docker and on each other, but the trainer waits on
    them: at nice 15 on a busy node they got a third of their speed (measured: a host ran
    35 jobs/s where the same `Sandbox` outside Ray ran 95). Raising priority needs root
    or CAP_SYS_NICE; without it they stay as Ray made them, and say so.
    """
    try:
        if os.getpriority(os.PRIO_PROCESS, 0) > 0:
            os.setpriority(os.PRIO_PROCESS, 0, 0)
    except PermissionError:
        log.warning("sandbox fleet: this process stays at nice %d (raising priority needs root or "
                    "CAP_SYS_NICE); under CPU load its jobs wait longer", os.getpriority(os.PRIO_PROCESS, 0))


class SandboxHost:
    """A `Sandbox` on this node's engine; the router's only way to run jobs here."""

    def __init__(self, options: FleetOptions, slots: int) -> None:
        import ray

        require_token_auth(options.allow_unauthenticated)   # before touching the Docker socket
        normal_priority()
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
        self._workers = ThreadPoolExecutor(max_workers=slots, thread_name_prefix="proctor-fleet-job")
        self._done: list[tuple[int, Outcome]] = []
        self._changed = threading.Condition()
        self._waiting = 0    # submitted, not started: they wait for one of the slots
        self._running = 0
        self._low_water = -1   # that of the take waiting now: it is woken only when it may answer

    def describe(self) -> HostInfo:
        return self.info

    # ------------------------------------------------------------------ jobs
    def submit(self, jobs: Sequence[tuple[int, Job]]) -> None:
        """Queue ``(tag, job)`` pairs on this node's slots; ``take`` returns their outcomes by tag."""
        with self._changed:
            self._waiting += len(jobs)
        for tag, job in jobs:
            self._workers.submit(self._run_one, tag, job)

    def _run_one(self, tag: int, job: Job) -> None:
        with self._changed:
            self._waiting -= 1
            self._running += 1
        try:
            outcome: Outcome = self.sandbox.run(job)
        except Exception as exc:   # never lost: the router hears of every job it sent
            outcome = f"{type(exc).__name__}: {exc}"
        with self._changed:
            self._running -= 1
            self._done.append((tag, outcome))
            if len(self._done) == 1 or self._refill_or_idle(self._low_water):
                self._changed.notify_all()

    def exchange(self, jobs: Sequence[tuple[int, Job]], wait_s: float, low_water: int,
                 linger_s: float) -> list[tuple[int, Outcome]]:
        """``submit(jobs)``, then ``take(...)``: the router's usual call, one per refill."""
        if jobs:
            self.submit(jobs)
        return self.take(wait_s, low_water, linger_s)

    def take(self, wait_s: float, low_water: int, linger_s: float) -> list[tuple[int, Outcome]]:
        """Outcomes finished since the last call. Waits up to ``wait_s`` for the first, then
        returns once at most ``low_water`` submitted jobs still wait for a slot (so the router
        refills the queue before it runs dry; -1: it has nothing to refill with), once no job
        is left here (a batch's last result is never held back), or after ``linger_s``."""
        with self._changed:
            self._low_water = low_water
            self._changed.wait_for(lambda: self._done, timeout=wait_s)
            if self._done:
                self._changed.wait_for(lambda: self._refill_or_idle(low_water), timeout=linger_s)
            done, self._done = self._done, []
        return done

    def _refill_or_idle(self, low_water: int) -> bool:
        """Whether a take that has results answers now: the queue is down to ``low_water``, or no job is left."""
        return self._waiting <= low_water or not (self._waiting or self._running)

    def warmup(self, languages: Sequence[str], limits: Optional[Limits]) -> None:
        self.sandbox.warmup(languages, limits=limits)

    def images(self) -> dict:
        """{image name: {present, ref}} on this node's engine."""
        from ..images import image_status_doc

        return image_status_doc(self.sandbox.pools[0].client)

    def stats(self) -> dict:
        with self._changed:
            jobs = {"waiting": self._waiting, "running": self._running}
        return {"pool": self.sandbox.stats(), "health": {h: s.up for h, s in self.sandbox.health().items()},
                "sessions": len(self._sessions), "jobs": jobs}

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
        self._workers.shutdown(wait=False, cancel_futures=True)
        self.sandbox.close()


__all__ = ["SandboxHost"]
