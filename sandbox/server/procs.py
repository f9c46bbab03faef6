"""What every process of a job does before any of its code runs, and the messages between server processes.

Stdlib only: copied into the images beside the fork server.
"""

from __future__ import annotations

import fcntl
import json
import os
import resource
import signal
import socket
import struct

import confine
import layout
from hygiene import set_limit

# Signals whose default action stops or ends a process and that can be caught: PID 1
# (the fork server) ignores each, every child restores the default. Not 32/33, which
# glibc keeps for itself (thread cancellation, setxid).
PID1_IGNORED = tuple(sig for sig in signal.valid_signals()
                     if (sig < 32 or sig >= signal.SIGRTMIN)
                     and sig not in (signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD, signal.SIGCONT,
                                     signal.SIGWINCH, signal.SIGURG))

# What a program sees: the usual paths (/work is a symlink into /job).
CHILD_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/work", "TMPDIR": "/tmp", "LANG": "C.UTF-8",
             "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8"}
JUDGE_ENV = {**CHILD_ENV, "HOME": layout.JUDGE_TMP, "TMPDIR": layout.JUDGE_TMP}
REPORT_FD = 255   # the highest fd under the container's nofile limit of 256
MAX_MESSAGE = 256 << 20


# --------------------------------------------------------------------------- messages

def send_msg(sock: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    """4-byte big-endian length + JSON, with ``fds`` passed alongside the header."""
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
    if length > MAX_MESSAGE:
        raise ValueError(f"message of {length} bytes")
    body = bytearray()
    while len(body) < length:
        chunk = sock.recv(length - len(body))
        if not chunk:
            raise EOFError
        body += chunk
    return json.loads(body), list(fds)


# --------------------------------------------------------------------------- a job's process

def job_defaults() -> None:
    """What every job process starts with and a child of PID 1 must undo: the default
    signal dispositions (PID 1 ignores most) and no core dumps. The mother sets these
    once for all its runners (they inherit them); a child of the server, in child_setup."""
    for sig in (*PID1_IGNORED, signal.SIGCHLD):
        signal.signal(sig, signal.SIG_DFL)
    set_limit(resource.RLIMIT_CORE, 0)


def set_oom_score(value: int) -> None:
    """This process's place in the OOM killer's line (1000: first).

    A job may lower it again, down to the server's 0 (that takes CAP_SYS_RESOURCE,
    which an engine may not grant). If the OOM killer then takes the server, the
    container stops and the host scores the job `memory`; if it takes the mother,
    the run goes on, its step says `oom`, and the container is retired after the job.
    """
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write(str(value))
    except OSError:
        pass


def child_setup(limits: dict, stdin_fd: int | None, out_w: int, err_w: int, keep: dict[int, int],
                cpu_s: float, report_fd: int | None = None, judge: bool = False, cwd: str = layout.WORK,
                defaults_done: bool = False) -> None:
    """In a fresh child, before any program code: this process tree's own limits, fds and uid.

    ``keep``: target fd -> source fd, placed after stdin/stdout/stderr. ``report_fd``
    (close-on-exec) is kept as REPORT_FD, for saying why an exec failed. ``judge``:
    become the judge (the tests' process) instead of the program. ``cwd``: the work
    dir, or the build dir for a compiler. ``defaults_done``: job_defaults() ran in an
    ancestor (the mother).
    """
    os.setsid()
    if not defaults_done:
        job_defaults()
    set_oom_score(1000)   # if the cgroup runs out, the job dies first
    stdin = stdin_fd if stdin_fd is not None else os.open("/dev/null", os.O_RDONLY)
    wanted = {0: stdin, 1: out_w, 2: err_w, **keep}
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
    # Last, since the job's uid may no longer write /proc/self: from here on no signal
    # reaches the server, and no message queue or memfd can be made.
    if judge:
        confine.confine_judge()
        try:
            os.chdir(cwd)   # the work dir, read through the job's group: the tests may read its files
        except OSError:
            # The program (running beside the judge) closed its work dir: the tests cannot
            # read it, which is the program's doing; never a judge that fails to start.
            os.chdir(layout.JUDGE_TMP)
    else:
        confine.confine_job()
        try:
            os.chdir(cwd)
        except OSError:
            os.chdir("/")   # an earlier run of this job closed its work dir: the program's doing


def setup_done() -> None:
    """Tell the server the runner's set-up worked: "ok", then EOF on REPORT_FD."""
    os.write(REPORT_FD, b"ok")
    os.close(REPORT_FD)


def setup_failed() -> None:
    """The set-up of a runner failed before the program ran: tell the server on REPORT_FD, and exit.

    The server then reports an infra error: never the program's doing.
    """
    import traceback

    try:
        os.write(REPORT_FD, traceback.format_exc(limit=3)[-1500:].encode())
    finally:
        os._exit(127)


def child_failed() -> None:
    """The runner itself failed after the program started: say why on stderr, and exit."""
    import traceback

    try:
        traceback.print_exc()
    finally:
        os._exit(127)
