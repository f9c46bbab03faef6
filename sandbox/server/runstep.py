"""One run of a job's program (or compiler): start it, watch it to its end or its limit, measure it.

Stdlib only: copied into the images beside the fork server.

A run is one of:
  exec      a compiled program, a runtime (java, node) or a compiler, forked from the
            server and exec'd at once: nothing of the server survives exec;
  python    a Python program, in a runner forked from the mother (mother.py);
  judged    a Python program with tests: the program's runner and a judge runner
            (pyjudge.py) linked by a socket pair; the run is the judge's.

The server measures and the host judges: exit status, signal, CPU and wall time,
the limits that were hit, the marker (the nonce written back on fd 3), and for a
stdin/stdout case the sha256 of the normalized output, which the host compares
with the expected output it never sent.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import os
import resource
import select
import signal
import socket
import time
import traceback
from dataclasses import dataclass, field

import confine
import procs
from hygiene import GVISOR, REAPED, cgroup_cpu_s, oom_kills, other_pids, reap, set_limit, sweep
from calls import Caller
from judge import normalize_output
from layout import WORK
from mother import Mother

NONCE_FD = 4
MARKER_FD = 3
EXIT_AFTER_SYNTAX_ERROR = 3
SYNTAX_MARK = b"syntax:"   # pycandidate.py's
# A case's output is hashed here in full; only this much of it travels back, so a job
# with many cases cannot make the server hold (and ship) hundreds of megabytes.
CASE_SHIP = 64 << 10
# Under gVisor glibc programs also get RLIMIT_AS: their budget plus room for the binary,
# libraries, a thread arena and stacks.
AS_SLACK = 128 << 20
F_SETPIPE_SZ = 1031


class ExecFailed(RuntimeError):
    """The sandbox could not start a compiler, runtime, runner or program: never the program's doing."""


@dataclass
class Launch:
    """How to start a run. Exactly one of ``argv``, ``python``, ``judged``, ``called`` is set."""

    argv: list[str] | None = None
    python: str | None = None        # a Python program's source ("main" mode)
    judged: tuple[str, str] | None = None   # (program source, tests source)
    called: tuple[str, list, str] | None = None   # (program, literal plan, tests): the server judges (calls.py)
    data_limit: bool = False         # RLIMIT_DATA = the memory budget (native programs)
    as_limit: bool = False           # RLIMIT_AS under gVisor (native programs)
    as_bytes: int = 0                # an explicit RLIMIT_AS (compilers), 0: none
    fsize_bytes: int = 0             # an explicit RLIMIT_FSIZE (compilers), 0: the disk budget
    nonce_fd: bool = False           # hand the program the nonce on fd 4 (in-process test guards)
    nonce_private: bool = False      # that pipe is root's: no reopening it through /proc/self/fd
    extra: dict[int, bytes] = field(default_factory=dict)   # fd -> contents, on a pipe the launcher drains
    cwd: str = WORK
    env: dict[str, str] = field(default_factory=dict)      # on top of procs.CHILD_ENV


# --------------------------------------------------------------------------- starting

def memfd_with(data: bytes, name: str) -> int:
    """A read-only fd of an anonymous file holding ``data`` (nothing on any disk the job sees)."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        return os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(fd)


def spawn_exec(launch: Launch, limits: dict, fds: dict, cpu_s: float) -> int:
    """Fork and exec ``launch.argv``. Raises ExecFailed when the child could not be set up or exec."""
    report_r, report_w = os.pipe()   # close-on-exec: EOF as soon as the exec succeeded
    pid = os.fork()
    if pid == 0:
        try:
            os.close(report_r)
            procs.child_setup(limits, fds["stdin"], fds["out"], fds["err"], fds["keep"], cpu_s,
                              report_fd=report_w, cwd=launch.cwd)
            if launch.fsize_bytes:
                set_limit(resource.RLIMIT_FSIZE, launch.fsize_bytes)
            if launch.data_limit:
                set_limit(resource.RLIMIT_DATA, limits["memory_mb"] << 20)
            if launch.as_limit and GVISOR:
                # gVisor holds only brk, not mmap, to RLIMIT_DATA (measured): a program that
                # mmaps past the cgroup would take the whole sandbox down. Its RLIMIT_AS holds.
                set_limit(resource.RLIMIT_AS, (limits["memory_mb"] << 20) + AS_SLACK)
            if launch.as_bytes:
                set_limit(resource.RLIMIT_AS, launch.as_bytes)
            os.execve(launch.argv[0], launch.argv, {**procs.CHILD_ENV, **launch.env})
        except BaseException:
            report_child_failure(report_w)
        os._exit(127)
    os.close(report_w)
    wait_report(report_r, launch.argv[0])
    return pid


def report_child_failure(report_w: int) -> None:
    why = traceback.format_exc(limit=2)[-1500:].encode()
    for fd in (procs.REPORT_FD, report_w):
        try:
            os.write(fd, why)
            break
        except OSError:
            pass


def wait_report(report_r: int, what: str, ok: bytes = b"") -> None:
    """Read a set-up report to its end: ``ok`` means started (a runner says "ok"; an exec, nothing)."""
    why = bytearray()
    while chunk := os.read(report_r, 4096):
        why += chunk
    os.close(report_r)
    if bytes(why) != ok:
        detail = why.decode(errors="replace") or "it ended before its set-up did"
        raise ExecFailed(f"the sandbox could not start {what} as the job's user:\n{detail}")


def spawn_runners(mother: Mother, runs: list[tuple[dict, dict[str, int]]]) -> list[int]:
    """Runners forked by the mother (a Python program, a judge), all at once; raises ExecFailed if a set-up failed."""
    reports = [os.pipe() for _ in runs]
    try:
        pids = mother.runners([(request, {**fds, "report": w}) for (request, fds), (_, w) in zip(runs, reports)])
    except OSError as exc:
        for r, _ in reports:
            os.close(r)
        raise ExecFailed(str(exc)) from None
    finally:
        for _, w in reports:
            os.close(w)
    failures = []
    for (request, _), (r, _) in zip(runs, reports):
        try:
            wait_report(r, f"the Python {request['role']}", ok=b"ok")
        except ExecFailed as exc:
            failures.append(str(exc))
    if failures:
        raise ExecFailed("; ".join(failures))
    return pids


# --------------------------------------------------------------------------- one run

@dataclass
class Pipes:
    out: tuple[int, int]
    err: tuple[int, int]
    mark: tuple[int, int]

    @classmethod
    def open(cls) -> "Pipes":
        # Owned by the job's user: a runtime that reopens its fds through /proc/self/fd
        # (the Java and Node launchers) is then allowed to, non-dumpable as it is.
        with confine.as_job():
            return cls(os.pipe(), os.pipe(), os.pipe())

    def close_write_ends(self) -> None:
        for _, w in (self.out, self.err, self.mark):
            os.close(w)


def input_pipes(extra: dict[int, bytes], private: bool = False) -> tuple[dict[int, int], dict[int, memoryview]]:
    """A pipe per input: (target fd -> read end, write end -> what is left to write).

    Pipes, not files: a launcher reads its input to the end before any code of the
    program runs, and after that a reopened /proc/self/fd/N holds nothing. Owned by
    the job's user, so that the launcher may reopen them through /proc/self/fd, unless
    ``private``: then root's, which nobody in the job may reopen.
    """
    read_ends, feeds = {}, {}
    for target, data in extra.items():
        if private:
            r, w = os.pipe()
        else:
            with confine.as_job():
                r, w = os.pipe()
        try:
            fcntl.fcntl(w, F_SETPIPE_SZ, min(max(len(data), 4096), 1 << 20))
        except OSError:
            pass   # the default size: the rest is written while the program runs
        os.set_blocking(w, False)
        read_ends[target], feeds[w] = r, memoryview(data)
    return read_ends, feeds


def feed(feeds: dict[int, memoryview]) -> None:
    """Write what the pipes take now; close the ones that are done (or whose reader left)."""
    for w, data in list(feeds.items()):
        try:
            while data:
                data = data[os.write(w, data[:1 << 16]):]
        except BlockingIOError:
            feeds[w] = data
            continue
        except OSError:
            pass
        os.close(w)
        del feeds[w]


def start(launch: Launch, limits: dict, pipes: Pipes, stdin_fd: int | None, nonce: str, cpu_s: float,
          mother: Mother) -> tuple[int, int | None, dict[int, memoryview], "Caller | None"]:
    """Start the run's processes: (pid whose end is the run's end, pid of the program beside it,
    input feeds, the server's caller when the server judges literal tests)."""
    base = {"out": pipes.out[1], "err": pipes.err[1]}
    if launch.argv is not None:
        keep = {MARKER_FD: pipes.mark[1]}
        extra, feeds = input_pipes({NONCE_FD: nonce.encode()} if launch.nonce_fd else {}, launch.nonce_private)
        more, more_feeds = input_pipes(launch.extra)
        extra.update(more)
        feeds.update(more_feeds)
        keep.update(extra)
        feed(feeds)   # before the program starts: a nonce or a small input is whole when it reads
        try:
            pid = spawn_exec(launch, limits, {**base, "stdin": stdin_fd, "keep": keep}, cpu_s)
        except ExecFailed:
            for w in feeds:
                os.close(w)
            raise
        finally:
            for fd in extra.values():
                os.close(fd)
        feed(feeds)
        return pid, None, feeds, None
    common = {"limits": limits, "cpu_s": cpu_s, "nonce": nonce}
    if launch.python is not None:
        fds = {**base, "mark": pipes.mark[1], **({"stdin": stdin_fd} if stdin_fd is not None else {})}
        (pid,) = spawn_runners(mother, [({**common, "role": "candidate", "source": launch.python}, fds)])
        return pid, None, {}, None
    if launch.called is not None:
        server_end, program_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with open(os.devnull, "wb") as unused:
                (pid,) = spawn_runners(mother, [
                    ({**common, "role": "candidate", "source": launch.called[0], "nonce": ""},
                     {**base, "mark": unused.fileno(), "rpc": program_end.fileno()})])
        except ExecFailed:
            server_end.close()
            raise
        finally:
            program_end.close()
        return pid, None, {}, Caller(server_end.detach(), launch.called[1])
    program, tests = launch.judged   # type: ignore[misc]
    judge_end, program_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        with open(os.devnull, "wb") as unused:
            program_pid, judge_pid = spawn_runners(mother, [
                ({**common, "role": "candidate", "source": program, "nonce": ""},
                 {**base, "mark": unused.fileno(), "rpc": program_end.fileno()}),
                ({**common, "role": "judge", "tests": tests},
                 {**base, "mark": pipes.mark[1], "rpc": judge_end.fileno()}),
            ])
    finally:
        judge_end.close()
        program_end.close()
    return judge_pid, program_pid, {}, None


def run_step(kind: str, limits: dict, launch: Launch, *, mother: Mother, wall_s: float, cpu_s: float,
             nonce: str = "", stdin: bytes | None = None, hash_output: bool = False) -> dict:
    """Run one program to its end or its limit; measure everything the verdict needs."""
    cap = limits["output_bytes"]
    pipes = Pipes.open()
    stdin_fd = memfd_with(stdin, "stdin") if stdin is not None else None
    cpu0, oom0, t0 = cgroup_cpu_s(), oom_kills(), time.monotonic()
    try:
        main_pid, peer_pid, feeds, caller = start(launch, limits, pipes, stdin_fd, nonce, cpu_s, mother)
    except ExecFailed:
        pipes.close_write_ends()
        for fd in (pipes.out[0], pipes.err[0], pipes.mark[0]):
            os.close(fd)
        mother.settle()
        sweep(keep=mother.keep())
        raise
    finally:
        if stdin_fd is not None:
            os.close(stdin_fd)
    pipes.close_write_ends()
    started = time.monotonic() - t0
    watch = Watch(pipes, cap, main_pid, peer_pid, mother, t0, cpu0, wall_s, cpu_s, caller)
    watch.loop(feeds)
    wall = time.monotonic() - t0
    mother.settle()
    watch.settle_peer()
    sweep(keep=mother.keep())
    REAPED.clear()
    for pid in (main_pid, peer_pid):
        mother.exits.pop(pid, None)
    step = watch.measure(kind, cap, wall, cpu0, oom0, cpu_s, nonce, launch, hash_output)
    step["start_s"] = round(started, 6)   # of wall_s: starting the processes (diagnostics)
    if caller is not None:
        os.close(caller.fd)
        if caller.unsupported:   # the program bound a tested name to what only a judge can call
            return run_step(kind, limits, Launch(judged=(launch.called[0], launch.called[2])),   # type: ignore[index]
                            mother=mother, wall_s=wall_s, cpu_s=cpu_s, nonce=nonce)
        judged_by_server(step, caller, nonce)
    return step


def syntax_error(python: bool, launch: Launch, mark: bytes, nonce: str, program_exit: int | None) -> bool:
    """Whether a Python program did not parse. A program alone ("main" mode) holds the nonce's
    syntax mark only when it did not parse (it never ran), so its own ``exit(3)`` stays an exit;
    beside tests, the program's runner has no nonce: its exit code 3 and no marker say it."""
    if not python:
        return False
    if launch.python is not None and nonce:
        return mark == SYNTAX_MARK + nonce.encode()
    return program_exit == EXIT_AFTER_SYNTAX_ERROR and not mark


def judged_by_server(step: dict, caller: "Caller", nonce: str) -> None:
    """The step as a judge process would have ended it: exit 0 and the marker, or exit 1 and a traceback."""
    passed = caller.done and caller.passed
    if step["exit_code"] == EXIT_AFTER_SYNTAX_ERROR and not caller.started:
        step["syntax_error"] = True
    step["program_signal"] = step["signal"] if (caller.gone or not caller.done) else None
    step["exit_code"], step["signal"] = (0 if passed else 1), None
    step["marker_ok"] = passed and bool(nonce)
    if caller.report:
        err = base64.b64decode(step["stderr"]) + caller.report.encode("utf-8", "backslashreplace")
        step["stderr"] = base64.b64encode(err).decode()


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


class Watch:
    """The poll loop of one run: reads its outputs, enforces its limits, reaps its processes,
    and (literal tests) lets the server's caller talk to the program."""

    def __init__(self, pipes: Pipes, cap: int, pid: int, peer: int | None, mother: Mother, t0: float,
                 cpu0: float | None, wall_s: float, cpu_s: float, caller: "Caller | None" = None) -> None:
        self.pid, self.peer, self.mother, self.caller = pid, peer, mother, caller
        self.t0, self.cpu0, self.wall_s, self.cpu_s = t0, cpu0, wall_s, cpu_s
        self.out_r, self.err_r, self.mark_r = pipes.out[0], pipes.err[0], pipes.mark[0]
        self.buffers = {self.out_r: bytearray(), self.err_r: bytearray(), self.mark_r: bytearray()}
        self.caps = {self.out_r: cap, self.err_r: cap, self.mark_r: 4096}
        self.status = self.utime = self.peer_status = None
        self.timed_out: str | None = None
        self.output_limit = False
        self.left_behind = 0

    def loop(self, feeds: dict[int, memoryview]) -> None:
        open_fds = set(self.buffers)
        poller = select.poll()
        for fd in open_fds:
            poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        for fd in feeds:
            poller.register(fd, select.POLLOUT | select.POLLERR)
        mother_fd = self.mother.sock.fileno()
        poller.register(mother_fd, select.POLLIN)   # its reports of Python runners' ends
        caller_fd = self.caller.fd if self.caller is not None else -1
        if self.caller is not None:
            poller.register(caller_fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        exited_at = None
        # Once the pipes are closed the process is on its way out, but its end is no event here:
        # wait 1 ms, then 2, 4, ... up to the usual 20 (a fixed 20 ms cost every step and case
        # up to 20 ms of wall, a program that closes its outputs and runs on costs few wake-ups).
        exit_wait_ms = 1
        while open_fds or self.status is None:
            now = time.monotonic()
            if self.status is None and now - self.t0 > self.wall_s:
                self.timed_out = self.timed_out or "wall"
                self.kill()
            elif self.status is None and self.cpu0 is not None and (cgroup_cpu_s() or 0) - self.cpu0 > self.cpu_s:
                self.timed_out = self.timed_out or "cpu"
                self.kill()
            elif exited_at is not None and open_fds and now - exited_at > 0.2:
                self.kill()   # a background process still holds the pipes open
            waiting_for_exit = not open_fds and self.status is None
            for fd, _event in poller.poll(exit_wait_ms if waiting_for_exit else 20):
                if fd == caller_fd:
                    self.caller.on_readable()                                     # type: ignore[union-attr]
                    if self.caller.done:                                          # type: ignore[union-attr]
                        poller.unregister(fd)
                        if self.caller.unsupported:                               # type: ignore[union-attr]
                            self.kill()
                elif fd == mother_fd:
                    self.mother.read_exits()
                elif fd in feeds:
                    feed(feeds)
                    if fd not in feeds:
                        poller.unregister(fd)
                elif fd in open_fds and not self.read(fd):
                    open_fds.discard(fd)
                    poller.unregister(fd)
            if self.status is None:
                self.reap()
            if waiting_for_exit:
                exit_wait_ms = min(2 * exit_wait_ms, 20)
            if self.status is not None and exited_at is None:
                exited_at = time.monotonic()
                self.left_behind = len(other_pids(self.mother.keep()))
                for w in list(feeds):   # an input nobody will read any more
                    poller.unregister(w)
                    os.close(w)
                    del feeds[w]

    def kill(self) -> None:
        """Every process of the run, whatever session it moved to; never the mother's idle runners."""
        self.mother.settle()
        sweep(keep=self.mother.keep())

    def read(self, fd: int) -> bool:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            chunk = b""
        if not chunk:
            return False
        buf = self.buffers[fd]
        buf += chunk[:max(self.caps[fd] + 1 - len(buf), 0)]
        if len(buf) > self.caps[fd] and fd != self.mark_r and not self.output_limit:
            self.output_limit = True
            self.kill()
        return True

    def ended(self, pid: int) -> tuple[int, float] | None:
        """(wait status, CPU s) of a process of this run that ended: reaped here, or by the mother."""
        if pid in REAPED:
            status, rusage = REAPED[pid]
            return status, rusage.ru_utime + rusage.ru_stime
        return self.mother.exits.get(pid)

    def settle_peer(self) -> None:
        """After the run: how the program beside the judge ended, if it ended by itself.

        Its exit may be reported after the judge's (the mother reaps them in any order):
        give the report a moment. A program still alive now is killed by the sweep, which
        says nothing about it.
        """
        if self.peer is None or self.peer_status is not None:
            return
        # A program that just closed its socket may still be on its way out (its files
        # close before it is a zombie): give it a moment before calling it alive.
        deadline = time.monotonic() + 0.5
        alive_until = time.monotonic() + 0.1
        while self.ended(self.peer) is None and time.monotonic() < deadline and not self.mother.dead:
            if os.path.exists(f"/proc/{self.peer}") and not _zombie(self.peer) and time.monotonic() > alive_until:
                return   # alive: the sweep takes it
            select.select([self.mother.sock], [], [], 0.01)
            self.mother.read_exits()
        found = self.ended(self.peer)
        if found is not None:
            self.peer_status = found[0]

    def reap(self) -> None:
        reap()
        peer = self.ended(self.peer) if self.peer is not None and self.peer_status is None else None
        main = self.ended(self.pid)
        if peer is not None:
            self.peer_status = peer[0]
        if main is not None:
            self.status, self.utime = main

    def measure(self, kind: str, cap: int, wall: float, cpu0: float | None, oom0: int, cpu_s: float,
                nonce: str, launch: Launch, hash_output: bool) -> dict:
        for fd in self.buffers:
            os.close(fd)
        cpu1 = cgroup_cpu_s()
        cpu_used = (cpu1 - cpu0) if (cpu0 is not None and cpu1 is not None) else (self.utime or 0.0)
        status = self.status
        signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        timed_out = self.timed_out
        # The program's process (beside a judge, it is the peer) killed at its CPU limit.
        peer_signum = os.WTERMSIG(self.peer_status) if self.peer_status is not None and \
            os.WIFSIGNALED(self.peer_status) else None
        for sig in (signum, peer_signum):
            if sig == signal.SIGXCPU or (sig == signal.SIGKILL and timed_out is None and cpu_used > cpu_s):
                timed_out = timed_out or "cpu"
        out, err = bytes(self.buffers[self.out_r][:cap]), bytes(self.buffers[self.err_r][:cap])
        digest = None
        if hash_output:
            text = normalize_output(out.decode("utf-8", errors="replace"))
            digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
            out, err = out[:CASE_SHIP], err[:CASE_SHIP]
        exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        mark = bytes(self.buffers[self.mark_r])
        program_status = self.peer_status if launch.judged is not None else status
        program_exit = os.WEXITSTATUS(program_status) if program_status is not None and \
            os.WIFEXITED(program_status) else None
        python = launch.argv is None
        return {
            "kind": kind,
            "stdout": base64.b64encode(out).decode(),
            "stderr": base64.b64encode(err).decode(),
            "stdout_sha256": digest,
            "exit_code": exit_code,
            "signal": signum,
            "wall_s": round(wall, 6),
            "cpu_s": round(cpu_used, 6),
            "timed_out": timed_out,
            "output_limit": self.output_limit,
            "oom": oom_kills() > oom0,
            "marker_ok": bool(nonce) and mark == nonce.encode(),
            "syntax_error": syntax_error(python, launch, mark, nonce, program_exit),
            # The program beside the judge killed by a signal, on its own (a status is known
            # only for a program that ended before the run's sweep).
            "program_signal": peer_signum,
            "left_behind": self.left_behind,
        }
