"""javac kept warm: one compile server per Java container, outside every job.

Stdlib only: copied into the images beside the fork server.

A cold javac costs ~0.5 s a job, nearly all of it the JVM loading and warming up javac;
warm, the same compile takes ~30 ms. The compile server (images/java/CompileServer.java)
stays up between jobs and compiles each job's sources in memory: no file of one compile
is ever seen by another (see its doc), and no code of a job runs in it (-proc:none).

What keeps it out of the jobs' reach:
- it runs as COMPILER_UID, which no job has: a job can neither signal it nor read its
  memory (the JVM binary is execute-only, so it also starts non-dumpable), and it
  shares no writable file with a job (cwd /, no perf data, no attach);
- it talks only over two pipes of the server's (close-on-exec, never in a job's process);
- it is stopped (SIGSTOP) whenever it is not compiling, so it takes no CPU time from a
  job's run and a job's CPU time, read from the container's cgroup, holds none of its;
- hygiene.RESIDENT keeps it (and only a process of its uid) out of the sweeps that end
  every step and job.

Whenever it cannot give a verdict (it would not start, it died, its JVM ran out of memory
or stack, javac failed in itself) the caller runs the command-line javac for that job,
as before this server existed, and a new server starts for the next job. A compile that
runs past the job's compile budget ends the server and times the step out, as javac's
own process would have been.
"""

from __future__ import annotations

import base64
import os
import resource
import select
import signal
import struct
import subprocess
import time

import confine
import hygiene
import procs
from budgets import JAVAC_FLAGS

COMPILER_UID = 1002   # no job process ever has it (confine.JOB_UID, JUDGE_UID)
READY_S = 60.0        # the longest a server may take to start and warm up
JAR = "/opt/proctor/java/javacd.jar"
ARCHIVE = "/opt/proctor/java/javacd.jsa"   # its class-data-sharing archive: starts in 0.35 s, not 0.45
# A heap smaller than the command line's: a compile that needs more fails here with
# status 2 and runs again under javac's own limits. resident_mb (budgets.py) bounds it.
# One JIT thread, never more: its threads count against the container's pids limit.
DAEMON_FLAGS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:CICompilerCount=1",
                "-XX:-UseDynamicNumberOfCompilerThreads", "-XX:-UsePerfData", "-Xshare:auto",
                "-XX:+DisableAttachMechanism", "-Xmx160m", *JAVAC_FLAGS[1:], "-Xlog:disable",
                "-Xlog:all=error:stderr")

# glibc gives each thread that allocates an arena of 64 MiB of address space: the JVM's
# dozen threads reached the 1 GiB RLIMIT_AS within a few dozen compiles (measured).
ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "MALLOC_ARENA_MAX": "2"}

Classes = dict[str, bytes]   # binary name -> class file


class Unavailable(Exception):
    """The compile server gave no verdict; run the command-line javac instead."""


def _frame(text: str) -> bytes:
    data = text.encode("utf-8", "surrogatepass")
    return struct.pack(">I", len(data)) + data


class Javacd:
    """The container's compile server, started on first use and again after it ended."""

    def __init__(self, java: str, as_bytes: int) -> None:
        self.java, self.as_bytes = java, as_bytes
        self.proc: subprocess.Popen | None = None
        self.ready = False   # it said it is warm

    def start(self) -> None:
        """Start the server (it warms up on its own); no-op while one is up."""
        if self.proc is not None:
            return
        argv = [self.java, *DAEMON_FLAGS, f"-XX:SharedArchiveFile={ARCHIVE}", "-cp", JAR, "CompileServer"]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     cwd="/", env=ENV, preexec_fn=self._confine, bufsize=0)
        hygiene.RESIDENT[self.proc.pid] = COMPILER_UID
        self.ready = False

    def _confine(self) -> None:
        """In the forked child: PID 1's signal dispositions undone, a session of its own, its
        own uid (no capabilities) and the compile steps' address-space limit."""
        procs.job_defaults()
        os.setsid()
        confine.confine_job(COMPILER_UID, COMPILER_UID)
        resource.setrlimit(resource.RLIMIT_AS, (self.as_bytes, self.as_bytes))

    def stop(self) -> None:
        """End the server for good (SIGKILL); the next compile starts a new one."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        hygiene.RESIDENT.pop(proc.pid, None)
        for sig in (signal.SIGKILL, signal.SIGCONT):
            try:
                os.kill(proc.pid, sig)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(proc.pid, 0)
        except ChildProcessError:
            pass   # reaped by hygiene.reap already
        # Reaped either way: Popen must not wait for it again, and its pipes close now.
        proc.returncode = -signal.SIGKILL
        for pipe in (proc.stdin, proc.stdout):
            pipe.close()   # type: ignore[union-attr]

    def compile(self, units: list[tuple[str, str]], budget_s: float, cap: int) -> tuple[dict, Classes]:
        """Compile ``units`` (path, source): the compile step as runstep.run_step reports one
        (javac's messages as stderr, at most ``cap`` bytes; CPU time from the container's
        cgroup, or under gVisor, which has none, the server's own) and the classes (none unless
        it compiled).

        ``budget_s`` counts from when the server is ready (its start is not the job's); past
        it the server is ended and the step timed out. Raises Unavailable when the server
        gave no verdict (the caller compiles another way).
        """
        self.start()
        try:
            self._wake()
            pid = self.proc.pid   # type: ignore[union-attr]
            cpu0, t0 = hygiene.cpu_reading(pid), time.monotonic()
            status, messages, classes = self._exchange(units, t0 + budget_s)
        except TimeoutError:   # an OSError too, but the job's own: its compile ran past its budget
            cpu = _cpu_since(cpu0, pid)
            self.stop()
            return _timed_out_step(time.monotonic() - t0, cpu), {}
        except (OSError, EOFError, struct.error) as exc:
            self.stop()
            raise Unavailable(f"the compile server failed: {exc!r}") from None
        if status not in (0, 1):
            self.stop()
            raise Unavailable(f"the compile server gave no verdict: {messages[:300]}")
        cpu = _cpu_since(cpu0, pid)
        os.kill(pid, signal.SIGSTOP)
        return _compile_step(messages, status, time.monotonic() - t0, cpu, cap), classes

    def _wake(self) -> None:
        """Wait for a new server to say it is warm, or resume a stopped one."""
        if not self.ready:
            self._read(4, time.monotonic() + READY_S, starting=True)
            self.ready = True
        else:
            os.kill(self.proc.pid, signal.SIGCONT)   # type: ignore[union-attr]

    def _exchange(self, units: list[tuple[str, str]], deadline: float) -> tuple[int, str, Classes]:
        """One request and its reply: (status, javac's messages, classes)."""
        self._write_all(struct.pack(">I", len(units)) + b"".join(_frame(p) + _frame(s) for p, s in units))
        status, = struct.unpack(">I", self._read(4, deadline))
        messages = self._read_bytes(deadline).decode("utf-8", "replace")
        count, = struct.unpack(">I", self._read(4, deadline))
        classes = {}
        for _ in range(count):
            name = self._read_bytes(deadline).decode("utf-8", "surrogatepass")
            classes[name] = self._read_bytes(deadline)
        return status, messages, classes

    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.proc.stdin.fileno(), view):]   # type: ignore[union-attr]

    def _read_bytes(self, deadline: float) -> bytes:
        length, = struct.unpack(">I", self._read(4, deadline))
        return self._read(length, deadline)

    def _read(self, n: int, deadline: float, starting: bool = False) -> bytes:
        fd = self.proc.stdout.fileno()   # type: ignore[union-attr]
        chunks, got = [], 0
        while got < n:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                if starting:
                    self.stop()
                    raise Unavailable(f"the compile server did not start within {READY_S:.0f} s")
                raise TimeoutError   # the caller reads the compile's CPU time, then ends the server
            chunk = os.read(fd, min(n - got, 1 << 20))
            if not chunk:
                raise EOFError("the compile server exited")
            chunks.append(chunk)
            got += len(chunk)
        return b"".join(chunks)


def _cpu_since(cpu0: float | None, pid: int) -> float:
    """The compile's CPU seconds: the container's since ``cpu0``, or (gVisor) the server's own."""
    cpu1 = hygiene.cpu_reading(pid)
    return cpu1 - cpu0 if cpu0 is not None and cpu1 is not None else 0.0


def _compile_step(messages: str, exit_code: int, wall: float, cpu: float, cap: int) -> dict:
    """A compile step as runstep.run_step reports one, for a compile the server made."""
    err = messages.encode("utf-8", "surrogatepass")
    return {"kind": "compile", "stdout": "", "stderr": base64.b64encode(err[:cap]).decode(),
            "stdout_sha256": None, "exit_code": exit_code, "signal": None, "wall_s": round(wall, 6),
            "cpu_s": round(cpu, 6), "timed_out": None, "output_limit": len(err) > cap, "oom": False,
            "marker_ok": False, "syntax_error": False, "program_signal": None, "left_behind": 0,
            "start_s": 0.0}


def _timed_out_step(wall: float, cpu: float) -> dict:
    """The step of a compile that ran past its budget (the server was killed, as javac's process would be)."""
    step = _compile_step("", 0, wall, cpu, 0)
    step.update(exit_code=None, signal=int(signal.SIGKILL), timed_out="wall")
    return step
