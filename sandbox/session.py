"""Stateful sessions: a Python interpreter whose variables, imports and files survive between calls.

    with Sandbox() as sb, sb.session("python") as s:
        s.run("import math; x = 2")
        r = s.run("math.sqrt(x)")      # CellResult(status="ok", value="1.4142135623730951", ...)

Every session gets a container of its own, started for it from the Python image with
the same confinement as a job's (uid 1000, no capability, seccomp and no-new-privs,
read-only root, no network, pids and memory limits: container.py, server/confine.py).
That container is never put in a pool: ``close`` removes it, so nothing a session did
can meet a job or another session. Inside, the fork server hands the container over
to server/session_server.py, which runs the cells in one kernel process
(server/session_kernel.py).

Between calls nothing of a session runs: when a cell ends, the kernel (with every
thread it started) is stopped (SIGSTOP) and every other process it started is killed;
the next call continues it. A thread the cell left behind therefore runs on in the
next call, counted in that call's limits and writing to that call's output. The
result of a cell (value, error, traceback) travels on a channel of its own, never in
the program's stdout, so nothing a program prints can pose as a result.

After a timeout, a memory kill, an output limit or the kernel's own death, the
session is reset: a fresh kernel and an empty work dir (variables, imports and files
are gone); the CellResult says so in ``reset`` and ``error``. Infrastructure failures
(the container died, Docker failed) close the session: that call returns an
``infra_error`` CellResult and later calls raise `SessionClosed`.
"""

from __future__ import annotations

import base64
import secrets
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Literal, Mapping, Optional, Sequence, Union

from .container import ContainerSpec, WarmContainer
from .errors import BadJob, InfraError, SandboxError, SessionClosed
from .verdict import decode_output

CellStatus = Literal["ok", "error", "timeout", "memory", "output_limit", "infra_error"]
CELL_STATUSES: tuple[str, ...] = ("ok", "error", "timeout", "memory", "output_limit", "infra_error")
SESSION_LANGUAGES: tuple[str, ...] = ("python",)
# Files through put_files/get_files: one file, and all of one call (a frame holds them base64).
MAX_FILE_BYTES = 16 << 20
MAX_FILES_BYTES = 64 << 20
# Beyond a call's wall limit: the server's own work after a cell (a reset scrubs and forks).
REPLY_SLACK_S = 20.0
CLOSE_REASONS = {
    "closed": "it was closed",
    "idle_ttl": "it was idle for longer than its idle_ttl_s",
    "budget": "it spent its CPU budget (SessionLimits.budget_s)",
    "crashed": "its container or the session's process failed",
}


@dataclass(frozen=True)
class SessionLimits:
    """Limits of a session: per call (cpu_s, wall_s, output_bytes), the container's memory, and lifetime.

    ``cpu_s``: CPU seconds of the session's whole process tree during one call.
    ``memory_mb``: what the session's interpreter may hold (its container gets this plus
    room for its files and the server). ``idle_ttl_s``: closed when unused this long.
    ``budget_s``: total CPU seconds over all calls; then closed.
    """

    cpu_s: float = 10.0
    wall_s: float = 30.0
    memory_mb: int = 512
    output_bytes: int = 1 << 20
    idle_ttl_s: float = 300.0
    budget_s: float = 600.0

    def __post_init__(self) -> None:
        for name in ("cpu_s", "wall_s", "idle_ttl_s", "budget_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise BadJob(f"SessionLimits.{name} must be a positive number of seconds, got {value!r}")
        for name, low in (("memory_mb", 32), ("output_bytes", 256)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise BadJob(f"SessionLimits.{name} must be an integer >= {low}, got {value!r}")


@dataclass(frozen=True)
class CellResult:
    """What one call of a session did.

    ``value``: repr() of the cell's last expression (None if the cell ends in a
    statement). ``error``: "ExcType: message" when status is "error"; for timeout,
    memory and output_limit, what was hit; for infra_error, what failed. ``traceback``:
    the formatted traceback of an "error". ``reset``: the session's state (variables,
    imports, files) was discarded after this call and a fresh kernel waits.
    """

    status: CellStatus
    stdout: str
    stderr: str
    value: Optional[str]
    error: Optional[str]
    traceback: Optional[str]
    wall_s: float
    cpu_s: float
    reset: bool = False


class Session:
    """One stateful Python interpreter in a container of its own; a context manager.

    Thread-safe: calls are serialised. Opened by `Sandbox.session`.
    """

    def __init__(self, container: WarmContainer, limits: SessionLimits, language: str = "python",
                 on_close: Optional["weakref.WeakMethod"] = None) -> None:
        self.id = secrets.token_urlsafe(18)
        self.language = language
        self.limits = limits
        self.host = container.host
        self.cpu_spent_s = 0.0
        self.calls = 0
        self.last_used = time.monotonic()
        self._container: Optional[WarmContainer] = container
        self._lock = threading.Lock()
        self._reason: Optional[str] = None
        self._ids = iter(range(1, 1 << 62))
        self._on_close = on_close

    # ------------------------------------------------------------------ context
    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._reason is not None

    @property
    def close_reason(self) -> Optional[str]:
        """None while open; then "closed", "idle_ttl", "budget" or "crashed"."""
        return self._reason

    @property
    def busy(self) -> bool:
        return self._lock.locked()

    # ------------------------------------------------------------------ calls
    def run(self, code: str, *, limits: Optional[SessionLimits] = None) -> CellResult:
        """Run one cell in the session's interpreter. Raises SessionClosed on a closed session.

        ``limits``: this call's cpu_s, wall_s and output_bytes (default: the session's);
        its memory, TTL and budget fields are not used (they belong to the session).
        """
        if not isinstance(code, str):
            raise BadJob(f"Session.run: code must be a str, got {type(code).__name__}")
        if limits is not None and not isinstance(limits, SessionLimits):
            raise BadJob(f"Session.run: limits must be a SessionLimits or None, got {type(limits).__name__}")
        lim = limits or self.limits
        with self._lock:
            container = self._open_container()
            left = self.limits.budget_s - self.cpu_spent_s
            cpu_s = min(lim.cpu_s, left)   # a call never runs past the session's budget
            request = {"type": "cell", "id": next(self._ids), "code": code, "cpu_s": cpu_s,
                       "wall_s": lim.wall_s, "output_bytes": lim.output_bytes}
            t0 = time.monotonic()
            try:
                reply = self._exchange(container, request, lim.wall_s + REPLY_SLACK_S, "cell_result")
            except InfraError as exc:
                return self._failed(container, exc, round(time.monotonic() - t0, 6))
            result = cell_result(reply, lim.output_bytes)
            self.calls += 1
            self.cpu_spent_s += result.cpu_s
            self.last_used = time.monotonic()
            if self.cpu_spent_s >= self.limits.budget_s - 1e-3:
                self._close_locked("budget")
            return result

    def put_files(self, files: Mapping[str, Union[str, bytes]]) -> None:
        """Write files into the session's work dir (/work), as the session's user; directories are made."""
        encoded = encode_files(files)
        with self._lock:
            container = self._open_container()
            self._files_call(container, {"type": "put_files", "files": encoded})

    def get_files(self, paths: Sequence[str]) -> dict[str, Optional[bytes]]:
        """Read files of the session's work dir (paths relative to /work); None: no such readable file."""
        if isinstance(paths, str) or not isinstance(paths, Sequence):
            raise BadJob(f"Session.get_files: paths must be a sequence of relative paths, got {paths!r:.80}")
        for path in paths:
            check_path(path, "Session.get_files")
        with self._lock:
            container = self._open_container()
            reply = self._files_call(container, {"type": "get_files", "paths": list(paths),
                                                 "max_bytes": MAX_FILE_BYTES})
        got = reply.get("files") or {}
        return {p: (None if got.get(p) is None else base64.b64decode(got[p])) for p in paths}

    def close(self) -> None:
        """Remove the session's container (idempotent); later calls raise SessionClosed."""
        self._close("closed")

    # ------------------------------------------------------------------ internals
    def _open_container(self) -> WarmContainer:
        if self._reason is not None or self._container is None:
            raise SessionClosed(closed_message(self.id, self._reason or "closed"))
        return self._container

    def _exchange(self, container: WarmContainer, request: dict, timeout_s: float, answer: str) -> dict:
        """Send a request, return the server's answer of type ``answer``. Raises InfraError."""
        channel = container.channel
        if channel is None:
            raise InfraError("the session's container is not running")
        channel.send(request)
        reply = channel.receive(timeout_s)
        if reply.get("type") == "error":
            raise InfraError(f"the session server failed: {str(reply.get('error', ''))[-800:]}")
        if reply.get("type") != answer or reply.get("id") != request["id"]:
            raise InfraError(f"out-of-order reply from the session server: {str(reply)[:200]}")
        return reply

    def _files_call(self, container: WarmContainer, request: dict) -> dict:
        request["id"] = next(self._ids)
        try:
            reply = self._exchange(container, request, 60.0, "files")
        except InfraError as exc:
            self._close_locked("crashed")
            raise SessionClosed(f"{closed_message(self.id, 'crashed')} ({exc})") from None
        self.last_used = time.monotonic()
        if reply.get("error"):
            raise SandboxError(f"session {self.id}: {reply['error']}")
        return reply

    def _failed(self, container: WarmContainer, exc: InfraError, wall_s: float) -> CellResult:
        """The container failed during a cell: memory if the OOM killer took it, else infra_error. Closes."""
        if self._reason is not None:   # closed by another thread (Sandbox.close, the reaper) meanwhile
            raise SessionClosed(closed_message(self.id, self._reason)) from None
        oom = container.oom_killed()
        self._close_locked("crashed")
        if oom:
            return CellResult("memory", "", "", None, "the cell exhausted the session's memory and the OOM "
                              "killer stopped its container: the session is closed", None, wall_s, 0.0, True)
        return CellResult("infra_error", "", "", None, f"the session's container failed: {exc}; the session "
                          "is closed, open a new one", None, wall_s, 0.0, True)

    def _close(self, reason: str) -> None:
        with self._lock:
            self._close_locked(reason)

    def _close_locked(self, reason: str) -> None:
        if self._reason is None:
            self._reason = reason
        container, self._container = self._container, None
        if container is not None:
            container.remove()
            if self._on_close is not None:
                forget = self._on_close()
                if forget is not None:
                    forget(self)

    def _kill(self, reason: str) -> None:
        """Close now even while a call runs (Sandbox.close, the reaper): the call then raises SessionClosed."""
        if self._reason is None:
            self._reason = reason
        container = self._container
        if container is not None:
            container.remove()
        self._close(reason)


def session_args(language: object, limits: object) -> SessionLimits:
    """Sandbox.session's arguments checked: the session's limits. Raises BadJob naming the argument."""
    if language not in SESSION_LANGUAGES:
        raise BadJob(f"Sandbox.session: language must be one of {', '.join(SESSION_LANGUAGES)}, got {language!r}")
    if limits is not None and not isinstance(limits, SessionLimits):
        raise BadJob(f"Sandbox.session: limits must be a SessionLimits or None, got {type(limits).__name__}")
    return limits or SessionLimits()


def cell_result(reply: dict, output_bytes: int) -> CellResult:
    """A CellResult from the server's cell_result frame (fields checked: a bad frame is an InfraError)."""
    status = reply.get("status")
    if status not in CELL_STATUSES or status == "infra_error":
        raise InfraError(f"the session server sent an unknown cell status {status!r}")

    def text(name: str) -> Optional[str]:
        value = reply.get(name)
        return value if isinstance(value, str) else None

    return CellResult(
        status=status,
        stdout=decode_output(base64.b64decode(reply.get("stdout") or ""), output_bytes),
        stderr=decode_output(base64.b64decode(reply.get("stderr") or ""), output_bytes),
        value=text("value"), error=text("error"), traceback=text("traceback"),
        wall_s=float(reply.get("wall_s") or 0.0), cpu_s=float(reply.get("cpu_s") or 0.0),
        reset=bool(reply.get("reset")))


def closed_message(session_id: str, reason: str) -> str:
    why = CLOSE_REASONS.get(reason, reason)
    return f"session {session_id} is closed: {why}; its state is gone. Open a new one with Sandbox.session()"


def check_path(path: object, where: str) -> str:
    """A relative path of plain names under the work dir; BadJob otherwise."""
    if not isinstance(path, str) or not path or path.startswith("/") or path.endswith("/"):
        raise BadJob(f"{where}: {path!r} is not a relative file path (e.g. 'data/input.txt')")
    if any(ord(ch) < 0x20 or ord(ch) == 0x7F for ch in path) or len(path.encode("utf-8", "surrogatepass")) > 1024:
        raise BadJob(f"{where}: {path!r:.80} has control characters or is longer than 1024 bytes")
    if any(part in ("", ".", "..") for part in path.split("/")):
        raise BadJob(f"{where}: every part of {path!r} must be a name (no empty part, '.' or '..')")
    return path


def encode_files(files: Mapping[str, Union[str, bytes]]) -> dict[str, str]:
    if not isinstance(files, Mapping):
        raise BadJob(f"Session.put_files takes a mapping of path -> str or bytes, got {type(files).__name__}")
    out, total = {}, 0
    for path, content in files.items():
        check_path(path, "Session.put_files")
        if isinstance(content, str):
            content = content.encode("utf-8", "surrogatepass")
        if not isinstance(content, (bytes, bytearray)):
            raise BadJob(f"Session.put_files[{path!r}] must be str or bytes, got {type(content).__name__}")
        if len(content) > MAX_FILE_BYTES:
            raise BadJob(f"Session.put_files[{path!r}] is {len(content)} bytes; at most {MAX_FILE_BYTES}")
        total += len(content)
        out[path] = base64.b64encode(bytes(content)).decode()
    if total > MAX_FILES_BYTES:
        raise BadJob(f"Session.put_files: {total} bytes in one call; at most {MAX_FILES_BYTES}, split the call")
    return out


class Sessions:
    """The open sessions of one Sandbox, and the reaper that closes idle ones.

    The reaper is a daemon thread started with the first session; it closes a session
    unused for its idle_ttl_s (never one in the middle of a call). ``close`` stops it and
    closes every session.
    """

    def __init__(self) -> None:
        self._open: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._closed = False

    def open(self, spec: ContainerSpec, client: object, host: str, pool_id: str, limits: SessionLimits,
             language: str) -> Session:
        """Start a container for a new session and hand it to its session server. Raises InfraError."""
        with self._lock:
            if self._closed:
                raise SandboxError("Sandbox.session: the Sandbox is closed")
        container = WarmContainer(client, spec, host, pool_id).start()   # type: ignore[arg-type]
        session = Session(container, limits, language, on_close=weakref.WeakMethod(self._forget))
        try:
            request = {"type": "session", "id": 0, "language": language, "memory_mb": limits.memory_mb,
                       "budget_s": limits.budget_s, "limits": asdict_limits(spec)}
            session._exchange(container, request, 60.0, "session_ready")
        except BaseException:
            container.remove()
            raise
        with self._lock:
            if self._closed:
                container.remove()
                raise SandboxError("Sandbox.session: the Sandbox was closed while the session started")
            self._open[session.id] = session
            if self._thread is None:
                self._thread = threading.Thread(target=self._reap, name="proctor-session-reaper", daemon=True)
                self._thread.start()
        return session

    def _forget(self, session: Session) -> None:
        with self._lock:
            self._open.pop(session.id, None)

    def _reap(self) -> None:
        while not self._stop.wait(0.25):
            now = time.monotonic()
            with self._lock:
                sessions = list(self._open.values())
            for session in sessions:
                if now - session.last_used < session.limits.idle_ttl_s:
                    continue
                if session._lock.acquire(blocking=False):   # never close a session in mid-call
                    try:
                        if time.monotonic() - session.last_used >= session.limits.idle_ttl_s:
                            session._close_locked("idle_ttl")
                    finally:
                        session._lock.release()

    def __len__(self) -> int:
        with self._lock:
            return len(self._open)

    def close(self) -> None:
        """Stop the reaper and close every session (a call in flight then raises SessionClosed)."""
        with self._lock:
            self._closed = True
            sessions = list(self._open.values())
        self._stop.set()
        for session in sessions:
            session._kill("closed")
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=5)


def asdict_limits(spec: ContainerSpec) -> dict:
    """What the session server needs of the container's budget (the job-shaped limits child_setup reads)."""
    return {"memory_mb": spec.memory_mb, "disk_mb": spec.disk_mb, "pids": spec.pids}


__all__ = ["CellResult", "Session", "SessionLimits", "Sessions", "CELL_STATUSES", "SESSION_LANGUAGES", "session_args"]
