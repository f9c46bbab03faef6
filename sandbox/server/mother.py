"""The mother of every Python process of every job: forked before the first job, never given one.

Stdlib only: copied into the images beside the fork server.

A Python program runs in a forked interpreter, not a new one (a fork costs about a
millisecond, a new python3 twenty). A child forked from the server would inherit the
server's memory, and freed objects stay in a heap until it reuses them: the server's
heap holds what earlier jobs sent (code, tests, inputs), which a program could read
out of its own copy. The mother is forked when the server starts, before any job
exists, and the only request it ever gets is "fork n runners": it never sees a byte
of a job. It hands the server, per runner, its end of a fresh socket pair, on which
the runner receives its request and file descriptors (pycandidate or pyjudge), and it
reports each runner's exit status (its wait status and CPU time) as it reaps it.

Messages, mother -> server: {"pids": [...]} with one socket fd per pid, answering a
fork request; {"exit": pid, "status", "cpu_s"} whenever a runner ends. A runner
confirms on its report fd that its set-up worked ("ok"), or says why it failed.
"""

from __future__ import annotations

import gc
import os
import select
import signal
import socket
import traceback

import procs

# Imported once here, so a program's `from typing import List` costs nothing in a
# forked child. Safe to share: random re-seeds itself in every forked child.
WARM_MODULES = ("typing", "math", "cmath", "collections", "itertools", "functools", "re", "string", "heapq",
                "bisect", "random", "statistics", "fractions", "decimal", "datetime", "json", "copy",
                "operator", "hashlib", "unittest", "dataclasses", "enum", "abc", "numbers", "linecache",
                "importlib", "array", "textwrap", "struct")
MAX_FDS = 8


class Mother:
    """The server's handle on the mother process and on the runners it has forked ahead.

    Runners are forked ahead (``READY`` of them wait idle, as root, for a request), so
    a run does not wait for forks: a fresh runner is a copy of the mother whenever it
    was forked, and holds nothing until it gets its request. Every runner the mother
    forked is known here before anything is swept (``settle``), so no clean-up ever
    kills a runner that a later run would be handed.
    """

    READY = 2

    def __init__(self, close_fds: tuple[int, ...]) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        pid = os.fork()
        if pid == 0:
            ours.close()
            try:
                devnull = os.open("/dev/null", os.O_RDWR)
                os.dup2(devnull, 0)
                for fd in close_fds:   # the server's link to the host
                    os.close(fd)
                mother_loop(theirs)
            except BaseException:
                traceback.print_exc()
            os._exit(0)
        theirs.close()
        self.pid, self.sock = pid, ours
        self.exits: dict[int, tuple[int, float]] = {}   # runner pid -> (wait status, CPU seconds)
        self.ready: list[tuple[int, int]] = []          # (pid, socket fd) of idle runners
        self.pending = 0                                # runners asked for, not yet handed over
        self.dead = False                               # the mother stopped answering
        self.top_up()

    def keep(self) -> tuple[int, ...]:
        """The processes no sweep may kill: the mother and its idle runners."""
        return (self.pid, *(pid for pid, _ in self.ready))

    def top_up(self) -> None:
        """Ask for runners until READY are idle or coming (the forks happen while the server works)."""
        want = self.READY - len(self.ready) - self.pending
        if want > 0 and not self.dead:
            procs.send_msg(self.sock, {"op": "fork", "n": want})
            self.pending += want

    def settle(self) -> None:
        """Wait for every fork asked for: after this, keep() names every runner that exists."""
        while self.pending and not self.dead:
            try:
                self._read_one(timeout=10)
            except OSError:
                self.dead = True

    def runners(self, requests: list[tuple[dict, dict[str, int]]]) -> list[int]:
        """Hand one idle runner each (request, fds); return their pids. Raises OSError."""
        while len(self.ready) < len(requests):
            if self.dead:
                raise OSError("the mother process is gone (the container is retired after this job)")
            if not self.pending:
                procs.send_msg(self.sock, {"op": "fork", "n": len(requests) - len(self.ready)})
                self.pending += len(requests) - len(self.ready)
            self._read_one(timeout=10)
        taken, self.ready = self.ready[:len(requests)], self.ready[len(requests):]
        pids = []
        for (request, fds), (pid, link_fd) in zip(requests, taken):
            link = socket.socket(fileno=link_fd)
            try:
                names = list(fds)
                procs.send_msg(link, {**request, "fds": names}, [fds[n] for n in names])
            finally:
                link.close()
            pids.append(pid)
        return pids

    def read_exits(self) -> None:
        """Take the messages waiting on the socket (call when poll says it is readable).

        A mother that died (the OOM killer, say) only stops reporting: its runners are
        PID 1's now, reaped there; the server retires the container after the job.
        """
        while not self.dead and select.select([self.sock], [], [], 0)[0]:
            try:
                self._read_one(timeout=10)
            except OSError:
                self.dead = True

    def _read_one(self, timeout: float) -> None:
        self.sock.settimeout(timeout)
        try:
            message, fds = procs.recv_msg(self.sock, max_fds=MAX_FDS)
        except (EOFError, ValueError, socket.timeout) as exc:
            raise OSError(f"the mother process did not answer: {exc!r}") from None
        finally:
            self.sock.settimeout(None)
        if "exit" in message:
            self.exits[int(message["exit"])] = (int(message["status"]), float(message["cpu_s"]))
        elif "pids" in message:
            self.pending -= len(message["pids"])
            self.ready.extend(zip((int(p) for p in message["pids"]), fds))
        else:
            self.pending = 0
            raise OSError(f"the mother process could not fork runners: {message.get('error', message)}")


def mother_loop(sock: socket.socket) -> None:
    for name in WARM_MODULES:
        try:
            __import__(name)
        except ImportError:
            pass
    import pycandidate
    import pyjudge  # noqa: F401 - imported here so that every runner has it warm

    pycandidate.Start.prepare()
    procs.job_defaults()   # inherited by every runner
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)   # a handler, so the wake-up byte arrives
    # Objects moved to the permanent generation are never traversed by a child's
    # collector, so the child copies far fewer pages on write.
    gc.freeze()
    while True:
        ready, _, _ = select.select([sock, wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 512)
            report_exits(sock)
        if sock in ready:
            try:
                request, _ = procs.recv_msg(sock)
            except (EOFError, OSError, ValueError):
                return
            fork_runners(sock, int(request.get("n", 1)), (sock.fileno(), wake_r, wake_w))


def report_exits(sock: socket.socket) -> None:
    while True:
        try:
            pid, status, rusage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        procs.send_msg(sock, {"exit": pid, "status": status, "cpu_s": rusage.ru_utime + rusage.ru_stime})


def fork_runners(sock: socket.socket, n: int, close: tuple[int, ...]) -> None:
    pids, ends = [], []
    try:
        for _ in range(n):
            server_end, runner_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            pid = os.fork()
            if pid == 0:
                try:
                    server_end.close()
                    for other in ends:
                        os.close(other)
                    for fd in close:
                        os.close(fd)
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    runner_main(runner_end)
                finally:
                    os._exit(0)
            runner_end.close()
            pids.append(pid)
            ends.append(server_end.detach())
    except OSError as exc:
        procs.send_msg(sock, {"error": str(exc)})
    else:
        procs.send_msg(sock, {"pids": pids}, ends)
    for fd in ends:
        os.close(fd)


def runner_main(link: socket.socket) -> None:
    """A fresh copy of the mother: take one request, run it. Never returns."""
    import pycandidate
    import pyjudge

    try:
        request, got = procs.recv_msg(link, max_fds=MAX_FDS)
        link.close()
        fds = dict(zip(request.pop("fds"), got))
    except BaseException:
        os._exit(0)
    if request.get("role") == "judge":
        pyjudge.run(request, fds)
    else:
        pycandidate.run(request, fds)
    os._exit(127)
