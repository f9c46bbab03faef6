"""A pool of killable worker processes for the symbolic tier.

Why processes and SIGKILL: a SymPy/latex2sympy call can spend minutes inside one
C-level big-integer operation that holds the GIL; no signal handler and no thread
can stop it (Math-Verify #65). ``future.result(timeout)`` only stops *waiting*, and
``shutdown(wait=True)`` joins the hung worker forever (AReaL #1426). So each call
here owns one worker for one task, waits on its pipe with a deadline, and on a
miss SIGKILLs that worker and starts a replacement in the background. No signals
are used in the caller: any thread, asyncio's default executor included, may call.

Workers are forked by a helper process that has imported SymPy once
(``zygote.py``), so a replacement costs milliseconds, not the ~1 s of a fresh
interpreter, and the caller's ``__main__`` is never re-imported.
"""

from __future__ import annotations

import math
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Optional, Sequence

START_TIMEOUT_S = 120.0   # a cold helper imports SymPy first; a loaded CI box is slow


class PoolError(RuntimeError):
    """The symbolic worker pool cannot start or was closed (infrastructure, not input)."""


@dataclass(eq=False)
class _Worker:
    pid: int
    conn: Connection


class _Zygote:
    """The helper process that forks workers (see ``zygote.py``)."""

    def __init__(self) -> None:
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = dict(os.environ)
        # The helper must import this package the way the caller did.
        paths = [p for p in sys.path if p and os.path.isdir(p)]
        env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", "import sys; from proctor.envs.math.zygote import main; "
                                       "main(int(sys.argv[1]))", str(child.fileno())],
                pass_fds=[child.fileno()], env=env, stdin=subprocess.DEVNULL, start_new_session=True)
        except OSError as exc:
            raise PoolError(f"cannot start the math worker helper ({exc}); check the process limits") from exc
        finally:
            child.close()
        self.sock = parent
        self.lock = threading.Lock()
        parent.settimeout(START_TIMEOUT_S)
        try:
            ready = parent.recv(1)
        except OSError:
            ready = b""
        if ready != b"R":
            self.close()
            raise PoolError("the math worker helper did not start (see its traceback above); is "
                            "`import sympy, latex2sympy2_extended, math_verify` working in this venv?")
        parent.settimeout(30.0)

    def fork(self, memory_bytes: int) -> tuple[int, Connection]:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with self.lock:
                socket.send_fds(self.sock, [b"F" + struct.pack("<q", memory_bytes)], [theirs.fileno()])
                reply = b""
                while len(reply) < 8:
                    chunk = self.sock.recv(8 - len(reply))
                    if not chunk:
                        raise OSError("the math worker helper exited")
                    reply += chunk
        except OSError:
            mine.close()
            raise
        finally:
            theirs.close()
        return struct.unpack("<q", reply)[0], Connection(mine.detach())

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
        if self.proc.poll() is None:
            self.proc.kill()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def default_workers() -> int:
    env = os.environ.get("PROCTOR_MATH_WORKERS")
    if env:
        return max(1, int(env))
    return max(1, min(4, os.cpu_count() or 1))


class SymbolicPool:
    """``call(pred, gold, timeout_s)`` -> (equal, tier, reason); thread-safe."""

    def __init__(self, workers: Optional[int] = None, memory_mb: Optional[int] = None) -> None:
        self.size = workers or default_workers()
        self._memory = int(memory_mb or os.environ.get("PROCTOR_MATH_WORKER_MB", 2048)) * 1024 * 1024
        self._zygote: Optional[_Zygote] = None
        self._zygote_lock = threading.Lock()
        self._cond = threading.Condition()
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()
        self._broken: Optional[str] = None
        self._closed = False
        self._executor: Optional[ThreadPoolExecutor] = None
        self.pid = os.getpid()
        self.replaced = 0           # workers killed and replaced (a counter for tests and logs)
        try:
            for _ in range(self.size):
                self._add(self._spawn())
        except PoolError:
            self.close()
            raise

    # --- public ------------------------------------------------------------------

    def call(self, pred: str, gold: str, timeout_s: float) -> tuple[bool, str, str]:
        """Compare in a worker; a miss of the deadline kills that worker."""
        w = self._acquire()
        while self._died_idle(w):       # killed from outside while idle (OOM killer, a test)
            self._discard(w, alive=False)
            w = self._acquire()
        try:
            w.conn.send((pred, gold, math.ceil(timeout_s)))
            ready = w.conn.poll(max(0.001, timeout_s))
        except (OSError, ValueError, EOFError):
            self._discard(w)
            return False, "symbolic", "worker_died"
        if not ready:
            self._discard(w)
            return False, "symbolic", "timeout"
        try:
            equal, tier, reason, retire = w.conn.recv()
        except (EOFError, OSError, ValueError):
            self._discard(w, alive=False)   # killed by its own RLIMIT_CPU / RLIMIT_AS
            return False, "symbolic", "too_complex"
        if retire:
            self._discard(w, alive=False)   # it exits by itself after a MemoryError
        else:
            self._release(w)
        return bool(equal), str(tier), str(reason)

    def map(self, pairs: Sequence[tuple[str, str]], timeout_s: float) -> list[tuple[bool, str, str]]:
        """``call`` for many pairs at once, spread over every worker; order kept."""
        if len(pairs) <= 1:
            return [self.call(p, g, timeout_s) for p, g in pairs]
        with self._cond:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(self.size, thread_name_prefix="proctor-math")
            executor = self._executor
        return list(executor.map(lambda pg: self.call(pg[0], pg[1], timeout_s), pairs))

    def close(self) -> None:
        """Kill every worker (they hold no state worth a graceful stop)."""
        with self._cond:
            self._closed = True
            workers = list(self._all)
            self._all.clear()
            self._idle.clear()
            executor, self._executor = self._executor, None
            self._cond.notify_all()
        for w in workers:
            _kill(w)
        if executor is not None:
            executor.shutdown(wait=False)
        with self._zygote_lock:
            zygote, self._zygote = self._zygote, None
        if zygote is not None:
            zygote.close()

    # --- internals ---------------------------------------------------------------

    def _spawn(self) -> _Worker:
        with self._zygote_lock:
            if self._closed:
                raise PoolError("the math worker pool was shut down")
            if self._zygote is None or not self._zygote.alive():
                if self._zygote is not None:
                    self._zygote.close()
                self._zygote = _Zygote()
            zygote = self._zygote
        try:
            pid, conn = zygote.fork(self._memory)
        except OSError as exc:
            raise PoolError(f"cannot fork a math worker ({exc})") from exc
        w = _Worker(pid, conn)
        try:
            if not conn.poll(START_TIMEOUT_S):
                raise PoolError(f"a math worker did not start within {START_TIMEOUT_S:.0f} s")
            conn.recv()
        except (EOFError, OSError) as exc:
            _kill(w)
            raise PoolError("a math worker died while starting") from exc
        except PoolError:
            _kill(w)
            raise
        return w

    @staticmethod
    def _died_idle(w: _Worker) -> bool:
        try:
            return w.conn.poll(0)          # an idle worker never has anything to say: EOF
        except (OSError, ValueError):
            return True

    def _add(self, w: _Worker) -> None:
        with self._cond:
            if self._closed:
                _kill(w)
                return
            self._all.add(w)
            self._idle.append(w)
            self._cond.notify()

    def _acquire(self) -> _Worker:
        with self._cond:
            while True:
                if self._closed:
                    raise PoolError("the math worker pool was shut down")
                if self._idle:
                    return self._idle.pop()
                if self._broken is not None and not self._all:
                    raise PoolError(self._broken)
                self._cond.wait(1.0)

    def _release(self, w: _Worker) -> None:
        with self._cond:
            if self._closed or w not in self._all:
                _kill(w)
                return
            self._idle.append(w)
            self._cond.notify()

    def _discard(self, w: _Worker, alive: bool = True) -> None:
        """SIGKILL now; replace in the background so the caller returns at once."""
        if alive:
            _signal_kill(w.pid)
        with self._cond:
            self._all.discard(w)
            self.replaced += 1
            closed = self._closed
        if not closed:
            threading.Thread(target=self._replace, args=(w,), name="proctor-math-respawn",
                             daemon=True).start()
        else:
            _close(w)

    def _replace(self, dead: _Worker) -> None:
        _close(dead)
        last: Optional[Exception] = None
        for _ in range(3):
            try:
                self._add(self._spawn())
                return
            except PoolError as exc:
                last = exc
        with self._cond:
            self._broken = f"math workers cannot be restarted: {last}"
            self._cond.notify_all()


def _signal_kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _close(w: _Worker) -> None:
    try:
        w.conn.close()
    except OSError:
        pass


def _kill(w: _Worker) -> None:
    _signal_kill(w.pid)    # the helper reaps it (SIGCHLD ignored there)
    _close(w)


_POOL: Optional[SymbolicPool] = None
_POOL_LOCK = threading.Lock()


def get_pool() -> SymbolicPool:
    """The shared pool, started on first use (and again in a forked child)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL.pid != os.getpid() or _POOL._closed:
            _POOL = SymbolicPool()
        return _POOL


def shutdown_pool() -> None:
    """Kill the shared pool's workers; the next symbolic comparison starts a new pool."""
    global _POOL
    with _POOL_LOCK:
        pool, _POOL = _POOL, None
    if pool is not None and pool.pid == os.getpid():
        pool.close()
