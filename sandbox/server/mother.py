"""The mother of every Python process of every job: forked before the first job, never given one.

Stdlib only: copied into the images beside the fork server.

A Python program runs in a forked interpreter, not a new one (a fork costs about a
millisecond, a new python3 twenty). A child forked from the server would inherit the
server's memory, and freed objects stay in a heap until it reuses them: the server's
heap holds what earlier jobs sent (code, tests, inputs), which a program could read
out of its own copy. The mother is forked when the server starts, before any job
exists, and the only request it ever gets is "fork": it never sees a byte of a job.

Per request it forks twice (the middle child exits at once), so the runner is
re-parented to PID 1 and the server reaps it like any other job process, and hands
the server its end of a fresh socket pair. On that socket the runner says its pid,
then receives its request and file descriptors: the program's source (pycandidate)
or the tests (pyjudge).
"""

from __future__ import annotations

import gc
import os
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
    """The server's handle on the mother process."""

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

    def runner(self, request: dict, fds: dict[str, int]) -> int:
        """Fork a runner, hand it ``request`` and ``fds`` (name -> fd); return its pid. Raises OSError."""
        self.sock.settimeout(10)
        try:
            procs.send_msg(self.sock, {"op": "fork"})
            reply, got = procs.recv_msg(self.sock, max_fds=1)
        except (EOFError, ValueError) as exc:
            raise OSError(f"the mother process did not answer: {exc!r}") from None
        finally:
            self.sock.settimeout(None)
        if not got or "error" in reply:
            raise OSError(f"the mother process could not fork a runner: {reply.get('error', 'no socket')}")
        link = socket.socket(fileno=got[0])
        try:
            link.settimeout(10)
            hello, _ = procs.recv_msg(link)
            names = list(fds)
            procs.send_msg(link, {**request, "fds": names}, [fds[n] for n in names])
        except (EOFError, ValueError) as exc:
            raise OSError(f"a runner forked by the mother did not start: {exc!r}") from None
        finally:
            link.close()
        return int(hello["pid"])


def mother_loop(sock: socket.socket) -> None:
    for name in WARM_MODULES:
        try:
            __import__(name)
        except ImportError:
            pass
    import pycandidate  # noqa: F401 - imported here so that every runner has them warm
    import pyjudge  # noqa: F401
    # Objects moved to the permanent generation are never traversed by a child's
    # collector, so the child copies far fewer pages on write.
    gc.freeze()
    while True:
        try:
            procs.recv_msg(sock)
        except (EOFError, OSError, ValueError):
            return
        try:
            server_end = fork_runner()
        except OSError as exc:
            procs.send_msg(sock, {"error": str(exc)})
            continue
        procs.send_msg(sock, {"ok": True}, [server_end.fileno()])
        server_end.close()


def fork_runner() -> socket.socket:
    server_end, runner_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    middle = os.fork()
    if middle == 0:
        try:
            server_end.close()
            if os.fork() == 0:
                runner_main(runner_end)
        finally:
            os._exit(0)
    runner_end.close()
    os.waitpid(middle, 0)
    return server_end


def runner_main(link: socket.socket) -> None:
    """A fresh copy of the mother: report the pid, take one request, run it. Never returns."""
    import pycandidate
    import pyjudge

    try:
        procs.send_msg(link, {"pid": os.getpid()})
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
