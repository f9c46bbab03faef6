"""Python jobs: a zygote forked before the job arrives, and the child that runs the program.

Why a zygote: a child forked from the server would inherit the server's memory,
and with it the job's expected outputs and nonce, all reachable from the
program by walking frames. The zygote is forked between jobs, so its memory
holds nothing of any job; per run it receives only the program's source, its
stdin path and the file descriptors to use, and forks the child that runs it.

Stdlib only: copied into the images beside the fork server.
"""

from __future__ import annotations

import atexit
import builtins
import fcntl
import gc
import io
import json
import os
import resource
import signal
import socket
import struct
import sys
import threading
import traceback
import types

import confine
from hygiene import WORK, set_dumpable, set_limit

# Signals whose default action stops or ends a process and that can be caught: PID 1
# (the fork server) ignores each, every child restores the default. Not 32/33, which
# glibc keeps for itself (thread cancellation, setxid).
PID1_IGNORED = tuple(sig for sig in signal.valid_signals()
                     if (sig < 32 or sig >= signal.SIGRTMIN)
                     and sig not in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD, signal.SIGCONT,
                                     signal.SIGWINCH, signal.SIGURG))

# Imported once here, so a program's `from typing import List` costs nothing in a
# forked child. Safe to share: random re-seeds itself in every forked child.
WARM_MODULES = ("typing", "math", "cmath", "collections", "itertools", "functools", "re", "string", "heapq",
                "bisect", "random", "statistics", "fractions", "decimal", "datetime", "json", "copy",
                "operator", "hashlib", "unittest", "dataclasses", "enum", "abc", "numbers")
for _name in WARM_MODULES:
    try:
        __import__(_name)
    except ImportError:
        pass

CHILD_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": WORK, "LANG": "C.UTF-8",
             "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8"}
MARKER_FD = 3
REPORT_FD = 255   # the highest fd under the container's nofile limit of 256
EXIT_AFTER_SYNTAX_ERROR = 3
# Audit events that could reach the harness (its frames, its memory): refused.
_BLOCKED_EVENTS = ("gc.get_objects", "gc.get_referrers", "gc.get_referents", "sys.settrace", "sys.setprofile")
_BLOCKED_PREFIXES = ("ctypes.",)


# --------------------------------------------------------------------------- messages

def send_msg(sock: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    body = json.dumps(message).encode()
    header = struct.pack(">I", len(body))
    if fds:
        socket.send_fds(sock, [header], fds)
    else:
        sock.sendall(header)
    sock.sendall(body)


def recv_msg(sock: socket.socket, max_fds: int = 0) -> tuple[dict, list[int]]:
    if max_fds:
        header, fds, _flags, _addr = socket.recv_fds(sock, 4, max_fds)
    else:
        header, fds = sock.recv(4, socket.MSG_WAITALL), []
    if len(header) < 4:
        raise EOFError
    (length,) = struct.unpack(">I", header)
    body = bytearray()
    while len(body) < length:
        chunk = sock.recv(length - len(body))
        if not chunk:
            raise EOFError
        body += chunk
    return json.loads(body), list(fds)


# --------------------------------------------------------------------------- the zygote

def start_zygote(close_fds: tuple[int, ...]) -> tuple[int, socket.socket]:
    """Fork the zygote now, while no job is in memory. Returns (pid, socket to it)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    pid = os.fork()
    if pid == 0:
        ours.close()
        try:
            devnull = os.open("/dev/null", os.O_RDWR)
            os.dup2(devnull, 0)
            for fd in close_fds:   # the server's link to the host
                os.close(fd)
            zygote_loop(theirs)
        except BaseException:
            traceback.print_exc()
        os._exit(0)
    theirs.close()
    return pid, ours


def zygote_loop(sock: socket.socket) -> None:
    """Per request: fork a child for the program, report its pid, then how it ended."""
    # Objects moved to the permanent generation are never traversed by the child's
    # collector, so the child copies far fewer pages on write.
    gc.freeze()
    while True:
        try:
            request, fds = recv_msg(sock, max_fds=3)
        except (EOFError, OSError):
            return
        pid = os.fork()
        if pid == 0:
            sock.close()
            run_child(request, fds)   # never returns
        for fd in fds:
            os.close(fd)
        del request
        send_msg(sock, {"pid": pid})
        _, status, rusage = os.wait4(pid, 0)
        send_msg(sock, {"pid": pid, "status": status, "utime": rusage.ru_utime, "stime": rusage.ru_stime})


# --------------------------------------------------------------------------- the child

def child_setup(limits: dict, stdin_path: str | None, out_w: int, err_w: int, keep: dict[int, int],
                cpu_s: float, report_fd: int | None = None) -> None:
    """In a fresh child, before any program code: this process tree's own limits, fds and uid.

    ``report_fd`` (close-on-exec) is kept as REPORT_FD, for saying why an exec failed.
    """
    os.setsid()
    for sig in (*PID1_IGNORED, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    wanted = {0: os.open(stdin_path or "/dev/null", os.O_RDONLY), 1: out_w, 2: err_w, **keep}
    # Park every source above the targets first, so no dup2 clobbers a source not yet placed.
    parked = {target: fcntl.fcntl(source, fcntl.F_DUPFD, 100) for target, source in wanted.items()}
    for target, source in parked.items():
        os.dup2(source, target)
    if report_fd is not None:
        os.dup2(report_fd, REPORT_FD, inheritable=False)
    # Everything else, the server's link to the host first of all, must be gone.
    os.closerange(max(wanted) + 1, REPORT_FD if report_fd is not None else 65536)
    os.closerange(REPORT_FD + 1, 65536)
    cpu = max(1, int(cpu_s + 0.999))
    set_limit(resource.RLIMIT_CPU, cpu, cpu + 1)
    set_limit(resource.RLIMIT_FSIZE, limits["disk_mb"] << 20)
    set_limit(resource.RLIMIT_CORE, 0)
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")   # if the cgroup runs out, the job dies, not the server
    except OSError:
        pass
    # Last, since the job's uid may no longer write /proc/self: from here on no signal
    # reaches the server or the zygote, and no message queue can be made.
    confine.confine_job()
    os.chdir(WORK)


def run_child(request: dict, fds: list[int]) -> None:
    try:
        out_w, err_w, mark_w = fds
        child_setup(request["limits"], request["stdin_path"], out_w, err_w, {MARKER_FD: mark_w},
                    request["cpu_s"])
        # Address space = what the forked interpreter already maps + the job's budget.
        with open("/proc/self/statm") as f:
            vm = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        set_limit(resource.RLIMIT_AS, vm + (request["limits"]["memory_mb"] << 20))
        # No local of this frame may keep the nonce: the program can walk up to it.
        run_python(request.pop("source"), request.pop("nonce").encode(), request.get("tests_line", 0))
    except BaseException:
        child_failed()
    os._exit(127)


def child_failed() -> None:
    """The set-up of a forked child failed before the program ran: say why, and exit."""
    try:
        traceback.print_exc()
        sys.stderr.flush()
    finally:
        os._exit(127)


def _unittest_codes() -> frozenset:
    """Code objects of the unittest framework, taken before any program runs.

    A test module ending in ``unittest.main()`` finishes by raising SystemExit:
    it counts as having run to its end only if every frame between the tests and
    the exit is one of these (a program cannot forge a code object's identity).
    """
    import inspect
    import unittest
    import unittest.main as ut_main

    codes = set()
    for module in (unittest.case, unittest.suite, unittest.loader, unittest.runner, unittest.result,
                   unittest.signals, ut_main):
        for _name, obj in vars(module).items():
            members = vars(obj).values() if inspect.isclass(obj) else [obj]
            for member in members:
                func = getattr(member, "__func__", member)
                func = getattr(func, "fget", func)
                code = getattr(func, "__code__", None)
                if code is not None:
                    codes.add(code)
    return frozenset(codes)


UNITTEST_CODES = _unittest_codes()


def _tests_exited_cleanly(exc: SystemExit, module_code, tests_line: int) -> bool:
    """True when SystemExit(0) came from unittest.main() called by the tests, not by the program."""
    if _exit_code(exc, quiet=True) != 0 or tests_line <= 0:
        return False
    tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None   # skip this runner
    if tb is None or tb.tb_frame.f_code is not module_code or tb.tb_lineno < tests_line:
        return False
    tb = tb.tb_next
    if tb is None:
        return False
    while tb is not None:
        if tb.tb_frame.f_code not in UNITTEST_CODES:
            return False
        tb = tb.tb_next
    return True


def _guard(runner_frame, nonce: bytes):
    """An audit hook: the only holder of the nonce, and the only writer of the marker.

    The marker is written on the event "proctor.done" when it is raised by the
    runner's own frame, which happens only when the module body returned. Audit
    hooks cannot be removed, and the events that could reach this closure or
    jump inside the runner (gc walks, tracing, ctypes) are refused.
    """
    state = {"done": False}

    def hook(event: str, args: tuple) -> None:
        if event == "proctor.done":
            if not state["done"] and sys._getframe(1) is runner_frame:
                state["done"] = True
                try:
                    os.write(MARKER_FD, nonce)
                except OSError:
                    pass
            return
        if event in _BLOCKED_EVENTS or event.startswith(_BLOCKED_PREFIXES):
            raise RuntimeError(f"{event} is not available in the sandbox")
        if event == "open" and args and isinstance(args[0], str) and args[0].startswith("/proc/") \
                and args[0].endswith(("/mem", "/map_files")):
            raise PermissionError(f"{args[0]} is not available in the sandbox")

    return hook


def run_python(source: str, nonce: bytes, tests_line: int = 0) -> None:
    """Run `source` as __main__ in this process, as `python3 main.py` would."""
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)   # as CPython sets them at start-up
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    set_dumpable(0)   # no process of the job may read this one's memory
    os.environ.clear()
    os.environ.update(CHILD_ENV)
    path = os.path.join(WORK, "main.py")
    sys.argv = [path]
    sys.path[0] = WORK
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8", errors="replace")
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="backslashreplace")
    sys.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                  errors="backslashreplace", line_buffering=True)
    sys.__stdout__, sys.__stderr__, sys.__stdin__ = sys.stdout, sys.stderr, sys.stdin
    atexit._clear()
    module = types.ModuleType("__main__")
    module.__file__ = path
    module.__builtins__ = builtins
    sys.modules["__main__"] = module
    sys.addaudithook(_guard(sys._getframe(0), nonce))
    del nonce

    try:
        code = compile(source, path, "exec")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        traceback.print_exc(limit=0)
        _finish(EXIT_AFTER_SYNTAX_ERROR)
    del source
    try:
        exec(code, module.__dict__)
        threading._shutdown()
    except SystemExit as exc:
        if not _tests_exited_cleanly(exc, code, tests_line):
            _finish(_exit_code(exc))
        del exc
    except BaseException:
        etype, value, tb = sys.exc_info()
        try:
            # Start the traceback at the program's own frame, not at this runner.
            tb = tb.tb_next if tb is not None else None
            sys.excepthook(etype, value.with_traceback(tb) if value is not None else value, tb)
        except BaseException:
            pass
        _finish(1)
    # Reached only when the module body returned: its tests ran to their end.
    sys.audit("proctor.done")
    try:
        atexit._run_exitfuncs()
    except BaseException:
        pass
    _finish(0)


def _finish(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(code)


def _exit_code(exc: SystemExit, quiet: bool = False) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    if not quiet:
        try:
            print(exc.code, file=sys.stderr)
        except BaseException:
            pass
    return 1
