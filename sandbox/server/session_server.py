"""The fork server's session mode: one session's kernel, its cells and its files, for the container's life.

Stdlib only: copied into the images beside the fork server.

The host sends {"type": "session", "limits": {memory_mb, disk_mb, pids}, "budget_s"} as
the first frame to a fresh container (sandbox/session.py); from then on the container
serves that session alone, until the host removes it. The mother of Python runs is
killed: the kernel is forked from the server, whose memory holds nothing but this
session's own requests.

Frames, host -> server: {"type": "cell", "id", "code", "cpu_s", "wall_s",
"output_bytes"}, {"type": "put_files", "id", "files": {path: base64}},
{"type": "get_files", "id", "paths", "max_bytes"}. Server -> host: {"type":
"session_ready"}, {"type": "cell_result", "id", "status", "stdout", "stderr" (base64),
"value", "error", "traceback", "wall_s", "cpu_s", "reset"}, {"type": "files", "id",
"files", "error"}, or {"type": "error", "id", "error"} when the server itself failed.

Between cells nothing of the session runs: the kernel, every thread of it, is
stopped (SIGSTOP, which it cannot catch) and every other process is killed. A cell
that hits a limit, or whose kernel dies, resets the session: every process killed,
every writable place emptied (hygiene.scrub), a fresh kernel in new directories.
"""

from __future__ import annotations

import base64
import os
import select
import signal
import socket
import struct
import time
import traceback
from typing import Callable

import confine
import fetch
import layout
import procs
import pycandidate
import session_kernel
from hygiene import REAPED, cpu_reading, oom_kills, other_pids, reap, scrub, sweep
from runstep import wait_report

RESET_NOTE = "the session was reset: its variables, imports and files are gone"


class Kernel:
    """The session's interpreter process, and the pipes and socket the server watches it by."""

    def __init__(self, limits: dict, budget_s: float) -> None:
        self.limits = {"memory_mb": int(limits["memory_mb"]), "disk_mb": int(limits["disk_mb"])}
        self.budget_s = float(budget_s)
        self.pid = 0
        self.fds: tuple[int, int] = (-1, -1)
        self.ctl: socket.socket | None = None

    def start(self) -> None:
        """Fork a fresh kernel, confined as a job's process. Raises ExecFailed if its set-up failed."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        report_r, report_w = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                for fd in (out_r, err_r, report_r):
                    os.close(fd)
                ours.close()
                pycandidate.Start.prepare()   # as root, before the job's uid: the interpreter's own mappings
                # RLIMIT_CPU: the whole budget, a backstop for the host's count of it.
                procs.child_setup(self.limits, None, out_w, err_w, {session_kernel.CTL_FD: theirs.fileno()},
                                  self.budget_s + 1.0, report_fd=report_w)
                pycandidate.limit_address_space(self.limits["memory_mb"])
            except BaseException:
                procs.setup_failed()
            procs.setup_done()
            try:
                session_kernel.main()
            except BaseException:
                procs.child_failed()
            os._exit(127)
        for fd in (out_w, err_w, report_w):
            os.close(fd)
        theirs.close()
        self.pid, self.fds, self.ctl = pid, (out_r, err_r), ours
        for fd in self.fds:
            os.set_blocking(fd, False)
        wait_report(report_r, "the session's Python kernel", ok=b"ok")
        if self.park() is not None:   # the kernel only runs during a cell
            raise RuntimeError("the session's kernel ended as it started")

    def ended(self) -> int | None:
        """The kernel's wait status if it ended (reaped here or by a sweep), else None."""
        if self.pid in REAPED:
            return REAPED.pop(self.pid)[0]
        try:
            got, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return 0
        return status if got == self.pid else None

    def park(self, deadline_s: float = 2.0) -> int | None:
        """Stop the kernel (every thread) and kill every other process, until nothing of the session runs.

        Repeated until it holds: a child of the cell could SIGCONT the kernel before the
        sweep took it. Returns None once parked, the kernel's wait status if it ended.
        Raises RuntimeError if it could not be parked in time.
        """
        end = time.monotonic() + deadline_s
        while True:
            try:
                os.kill(self.pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
            status = self.wait_stopped(end)
            if status is not None:
                return status
            self.sweep_others(end)
            if self.stopped():   # no other process is left that could continue it
                return None
            if time.monotonic() > end:
                raise RuntimeError("the session's kernel could not be stopped")

    def wait_stopped(self, end: float) -> int | None:
        """Until every thread of the kernel is stopped (None) or it ended (its wait status)."""
        while True:
            if self.pid in REAPED:
                return REAPED.pop(self.pid)[0]
            try:
                got, status = os.waitpid(self.pid, os.WNOHANG | os.WUNTRACED)
            except ChildProcessError:
                return 0
            if got == self.pid and not os.WIFSTOPPED(status):
                return status
            if self.stopped():
                return None
            if time.monotonic() > end:
                raise RuntimeError("the session's kernel did not stop")
            try:
                os.kill(self.pid, signal.SIGSTOP)   # again: a child may have continued it meanwhile
            except ProcessLookupError:
                pass
            self.sweep_others(end)   # a child of the cell could keep it from stopping (a vfork)
            time.sleep(0.001)

    def sweep_others(self, end: float) -> None:
        """Kill every process but the kernel. Its own children stay as zombies until it reaps
        them (it is stopped): dead, they run nothing. Raises RuntimeError past ``end``."""
        while True:
            alive = [pid for pid in other_pids((self.pid,)) if _state(pid) not in ("Z", "X", None)]
            if not alive:
                return
            for pid in alive:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            reap()
            if time.monotonic() > end:
                raise RuntimeError(f"processes of the session survived the sweep: {alive}")
            time.sleep(0.0005)

    def stopped(self) -> bool:
        """Whether every thread of the kernel is stopped (or already gone)."""
        try:
            tids = os.listdir(f"/proc/{self.pid}/task")
        except OSError:
            return False
        for tid in tids:
            state = _state(f"{self.pid}/task/{tid}")
            if state not in ("T", "t", "Z", "X", None):   # None: the thread ended meanwhile
                return False
        return True

    def kill(self) -> int:
        """Kill the kernel and everything else; its wait status."""
        status = self.ended()
        if status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
                _, status = os.waitpid(self.pid, 0)
            except (ProcessLookupError, ChildProcessError):   # reaped by a sweep meanwhile
                status = REAPED.pop(self.pid, (0, None))[0]
        sweep()
        REAPED.clear()
        return status

    def close_fds(self) -> None:
        for fd in self.fds:
            os.close(fd)
        if self.ctl is not None:
            self.ctl.close()
        self.fds, self.ctl = (-1, -1), None


class Cell:
    """One cell's run: its outputs, its answer, the limit it hit (if any)."""

    def __init__(self, kernel: Kernel, request: dict) -> None:
        self.kernel = kernel
        self.cpu_s, self.wall_s = float(request["cpu_s"]), float(request["wall_s"])
        self.cap = int(request["output_bytes"])
        self.code = str(request.get("code", ""))
        self.out, self.err, self.ctl_buf = bytearray(), bytearray(), bytearray()
        # Echoed in the kernel's answer: an answer to another cell (one the program wrote on
        # fd 3 itself, then the kernel's own) can never pass for this cell's.
        self.token = os.urandom(12).hex()
        self.answer: dict | None = None
        self.limit: str | None = None       # "wall", "cpu", "output", "protocol"
        self.status: int | None = None      # the kernel's wait status, if it ended
        self.cpu0: float | None = None
        self.cpu = 0.0

    def run(self) -> dict:
        kernel = self.kernel
        t0, oom0 = time.monotonic(), oom_kills()
        self.cpu0 = cpu_reading(kernel.pid)
        os.kill(kernel.pid, signal.SIGCONT)
        try:
            kernel.ctl.settimeout(self.wall_s)               # type: ignore[union-attr]
            procs.send_msg(kernel.ctl, {"code": self.code, "cap": self.cap, "cell": self.token})  # type: ignore[arg-type]
            kernel.ctl.setblocking(False)                    # type: ignore[union-attr]
            self.watch(t0)
        except socket.timeout:
            self.limit = "wall"
        except OSError:
            self.status = kernel.ended()   # it died before it took the cell
        if self.answer is not None and self.limit is None and self.status is None:
            self.status = kernel.park()
        else:   # a reset follows: nothing of the cell may write on while its output is read
            status = kernel.kill()
            if self.answer is None and self.limit is None and self.status is None:
                self.status = status   # it died as it got the cell
        self.drain()
        if self.answer is not None and self.limit is None and self.status is None and self.leftover():
            self.limit = "protocol"
        cpu = self.cpu_used()
        reply = self.verdict(oom_kills() > oom0)
        reply.update(stdout=base64.b64encode(bytes(self.out[:self.cap])).decode(),
                     stderr=base64.b64encode(bytes(self.err[:self.cap])).decode(),
                     wall_s=round(time.monotonic() - t0, 6), cpu_s=round(cpu, 6))
        return reply

    def cpu_used(self) -> float:
        """CPU seconds of the cell so far (the last reading, once the kernel is gone)."""
        now = cpu_reading(self.kernel.pid)
        if now is not None and self.cpu0 is not None:
            self.cpu = max(self.cpu, now - self.cpu0)
        return self.cpu

    def watch(self, t0: float) -> None:
        """Read outputs and the answer until the answer came, the kernel died, or a limit was hit."""
        kernel = self.kernel
        out_r, err_r = kernel.fds
        ctl_fd = kernel.ctl.fileno()                         # type: ignore[union-attr]
        watched = [out_r, err_r, ctl_fd]
        while self.answer is None and self.limit is None:
            ready, _, _ = select.select(watched, [], [], 0.02)
            for fd in ready:
                if not (self.read_answer() if fd == ctl_fd else self.read(fd)):
                    watched.remove(fd)   # at its end: every process that held it is gone
            if self.limit is not None or self.answer is not None:
                break
            if time.monotonic() - t0 > self.wall_s:
                self.limit = "wall"
            elif self.cpu_used() > self.cpu_s:
                self.limit = "cpu"
            else:
                self.status = kernel.ended()
                if self.status is not None:
                    return

    def read(self, fd: int) -> bool:
        """Take what the pipe holds; False at its end."""
        buf = self.out if fd == self.kernel.fds[0] else self.err
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return True
        buf += chunk[:max(self.cap + 1 - len(buf), 0)]
        if len(buf) > self.cap:
            self.limit = "output"
        return bool(chunk)

    def read_answer(self) -> bool:
        """Take what the control socket holds, and the answer once it is whole; False at its end."""
        try:
            chunk = self.kernel.ctl.recv(1 << 16)            # type: ignore[union-attr]
        except BlockingIOError:
            return True
        if not chunk:
            return False   # the kernel died (the loop sees it end) or the cell closed fd 3 (the wall limit)
        self.ctl_buf += chunk
        if len(self.ctl_buf) >= 4:
            (length,) = struct.unpack(">I", self.ctl_buf[:4])
            if length > 24 * self.cap + (1 << 16):   # three fields of cap characters, JSON-escaped
                self.limit = "protocol"
            elif len(self.ctl_buf) >= 4 + length:
                self.answer = parse_answer(bytes(self.ctl_buf[4:4 + length]), self.token)
                del self.ctl_buf[:4 + length]
                if self.answer is None:
                    self.limit = "protocol"
        return True

    def drain(self) -> None:
        """What the cell's processes wrote before they stopped or died: still this cell's output."""
        for fd in self.kernel.fds:
            while self.limit != "output":
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    break
                if not chunk:
                    break
                buf = self.out if fd == self.kernel.fds[0] else self.err
                buf += chunk[:max(self.cap + 1 - len(buf), 0)]
                if len(buf) > self.cap:
                    self.limit = "output"

    def leftover(self) -> bool:
        """Whether more than one answer came: something of the cell wrote to the control socket."""
        if self.ctl_buf:
            return True
        try:
            return bool(self.kernel.ctl.recv(1, socket.MSG_PEEK))   # type: ignore[union-attr]
        except BlockingIOError:
            return False

    def verdict(self, oom: bool) -> dict:
        """The cell's status; a limit or a dead kernel resets the session."""
        base = {"value": None, "error": None, "traceback": None, "reset": True}
        if self.limit == "output":
            return {**base, "status": "output_limit",
                    "error": f"the cell wrote more than {self.cap} bytes to stdout or stderr; {RESET_NOTE}"}
        if self.limit in ("wall", "cpu"):
            what = f"wall-clock limit of {self.wall_s:g} s" if self.limit == "wall" else \
                f"CPU limit of {self.cpu_s:g} s"
            return {**base, "status": "timeout", "error": f"the cell ran past its {what}; {RESET_NOTE}"}
        if self.limit == "protocol":
            return {**base, "status": "error", "error": "the cell wrote to or closed the session's control "
                    f"socket (fd {session_kernel.CTL_FD}); {RESET_NOTE}"}
        if self.status is not None:
            return {**base, **died(self.status, oom)}
        answer = dict(self.answer or {})
        if oom:   # the kernel lives, but the OOM killer took a process of the cell
            return {**base, "status": "memory", "value": answer.get("value"), "error": "the cell's processes "
                    f"exhausted the session's memory and the kernel's OOM killer ended one; {RESET_NOTE}"}
        if answer["status"] == "memory":
            return {**answer, "error": f"{answer.get('error') or 'MemoryError'}; {RESET_NOTE}", "reset": True}
        answer["reset"] = False
        return answer


def _state(pid: object) -> str | None:
    """A process's (or "pid/task/tid": a thread's) state letter from /proc; None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def died(status: int, oom: bool) -> dict:
    """The answer for a kernel that ended during a cell."""
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    if oom:
        return {"status": "memory", "error": f"the cell exhausted the session's memory; {RESET_NOTE}"}
    if sig == signal.SIGXCPU:
        return {"status": "timeout", "error": f"the session's process used up its CPU budget; {RESET_NOTE}"}
    how = f"was killed by {signal.Signals(sig).name}" if sig is not None else \
        f"exited with status {os.WEXITSTATUS(status)}"
    return {"status": "error", "error": f"the session's Python process {how} during the cell; {RESET_NOTE}"}


def parse_answer(body: bytes, token: str) -> dict | None:
    """The kernel's answer to the cell of ``token``, if it is one (else None: the cell wrote on fd 3)."""
    import json

    try:
        answer = json.loads(body)
    except ValueError:
        return None
    if not isinstance(answer, dict) or answer.get("status") not in ("ok", "error", "memory") or \
            answer.get("cell") != token:
        return None
    out = {"status": answer["status"]}
    for key in ("value", "error", "traceback"):
        value = answer.get(key)
        out[key] = value if isinstance(value, str) else None
    return out


# --------------------------------------------------------------------------- files

def put_files(files: dict) -> str | None:
    """Write each file into the work dir as the session's user; why one could not be written, or None."""
    for rel, b64 in files.items():
        try:
            confine.write(os.path.join(layout.WORK, rel), base64.b64decode(b64))
        except OSError as exc:
            return f"could not write {rel!r} into the session's work dir: {exc.strerror or exc}"
    return None


def get_files(paths: list, max_bytes: int) -> tuple[dict, str | None]:
    """Read files of the work dir as the session's user, never through a link (fetch.read):
    {path: base64 or None}, and an error or None."""
    out: dict[str, str | None] = {}
    for rel in paths:
        try:
            data = fetch.read(rel, max_bytes)
        except fetch.TooLarge:
            return {}, f"{rel!r} is larger than {max_bytes} bytes: read it in a cell instead"
        out[rel] = None if data is None else base64.b64encode(data).decode()
    return out, None


# --------------------------------------------------------------------------- the session

def fresh(kernel: Kernel) -> None:
    """Every process killed, every writable place emptied, new directories, a new kernel."""
    if kernel.pid:
        kernel.kill()
        kernel.close_fds()
    sweep()
    REAPED.clear()
    problems = scrub()
    if problems:
        raise RuntimeError(f"the session's places could not be emptied: {problems}")
    layout.prepare_job()
    kernel.start()


def serve(request: dict, receive: Callable[[], dict], send: Callable[[dict], None], mother_pid: int) -> None:
    """Serve one session until the host hangs up (the container then ends)."""
    os.kill(mother_pid, signal.SIGKILL)   # and its idle runners, in fresh(): no job ever comes here
    kernel = Kernel(request["limits"], request["budget_s"])
    try:
        fresh(kernel)
    except Exception:
        send({"type": "error", "id": request.get("id"), "error": traceback.format_exc(limit=5)})
        return
    send({"type": "session_ready", "id": request.get("id"), "kernel": kernel.pid})
    while True:
        try:
            message = receive()
        except EOFError:
            return
        kind, ident = message.get("type"), message.get("id")
        try:
            if kind == "cell":
                reply = Cell(kernel, message).run()
                if reply.get("reset"):
                    fresh(kernel)
                send({"type": "cell_result", "id": ident, **reply})
            elif kind == "put_files":
                send({"type": "files", "id": ident, "error": put_files(message.get("files") or {})})
            elif kind == "get_files":
                files, error = get_files(list(message.get("paths") or ()), int(message["max_bytes"]))
                send({"type": "files", "id": ident, "files": files, "error": error})
            else:
                send({"type": "error", "id": ident, "error": f"a session takes no {kind!r} request"})
        except Exception:
            send({"type": "error", "id": ident, "error": traceback.format_exc(limit=5)})
