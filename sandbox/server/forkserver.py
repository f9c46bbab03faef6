"""PID 1 of every sandbox container: runs one job at a time, each in forked children.

Stdlib only: this file and its siblings are copied into the images and run
under Debian's python3.

Why a fork server: starting a container or a `docker exec` per program costs
0.15-0.7 s; a fork from a warm interpreter costs about a millisecond. Why PID 1:
the kernel drops signals to a namespace's init that it does not handle, so
nothing a job does (`kill(-1, SIGKILL)` included) takes the server down, and
PID 1 reaps every orphan.

Protocol (both directions): 4-byte big-endian length + a JSON object.
Host -> server: {"type": "job", "id", "language", "code", "tests", "cases",
"files" (base64), "limits", "nonce", "stop_on_first_failure"}. Server -> host: {"type": "ready"} once,
then one {"type": "result", "id", "steps": [...], "clean", "notes"} per job, or
{"type": "error", "id", "error"} when the server itself failed.

The server runs and measures; the host turns the measurements into a verdict.
"""

from __future__ import annotations

import base64
import json
import os
import select
import signal
import struct
import sys
import time
import traceback

import builders
import confine
import pyrunner
from hygiene import (CPU_FILE, GVISOR, OOM_FILE, REAPED, WORK, cgroup_cpu_s, oom_kills, other_pids, reap,
                     scrub, set_dumpable, set_limit, sweep)
from judge import outputs_match, step_failed

import resource

HERE = os.path.dirname(os.path.abspath(__file__))
GUARD_C = os.path.join(HERE, "guard.c")
NONCE_FD = 4
# A case's output is compared here in full; only this much of it travels back, so a
# job with many cases cannot make the server hold (and ship) hundreds of megabytes.
CASE_SHIP = 64 << 10
# Symbols a C/C++ program may not reference: they reach past the exit guard.
FORBIDDEN_SYMBOLS = builders.GUARD_FORBIDDEN
# Under gVisor glibc programs also get RLIMIT_AS: their budget plus room for the binary,
# libraries, a thread arena and stacks.
AS_SLACK = 128 << 20


# --------------------------------------------------------------------------- framing

def read_exact(fd: int, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, n - got)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(fd: int) -> dict:
    (length,) = struct.unpack(">I", read_exact(fd, 4))
    return json.loads(read_exact(fd, length))


def write_frame(fd: int, message: dict) -> None:
    body = json.dumps(message, separators=(",", ":")).encode()
    view = memoryview(struct.pack(">I", len(body)) + body)
    while view:
        view = view[os.write(fd, view):]


# --------------------------------------------------------------------------- starting a run

class Zygote:
    """The server's handle on the zygote of the current job (see pyrunner)."""

    def __init__(self, close_fds: tuple[int, ...]) -> None:
        self.pid, self.sock = pyrunner.start_zygote(close_fds)
        self.alive = True

    def start(self, request: dict, fds: list[int]) -> bool:
        """Hand a run to the zygote (its pid and exit status follow as messages).

        False if the job already killed the zygote.
        """
        if not self.alive:
            return False
        try:
            self.sock.settimeout(10)
            pyrunner.send_msg(self.sock, request, fds)
            self.sock.settimeout(None)
            return True
        except OSError:
            self.alive = False
            return False

    def close(self) -> None:
        self.sock.close()


class ExecFailed(RuntimeError):
    """The sandbox could not start a compiler, runtime or program: never the program's doing."""


def spawn_exec(argv: list[str], limits: dict, stdin_path: str | None, fds: dict, cpu_s: float,
               data_limit: bool, as_limit: bool = False) -> int:
    """Fork and exec a compiled program or the compiler: nothing of the server survives exec.

    Raises ExecFailed when the child could not be set up or the exec failed (a
    close-on-exec pipe says so), so that it becomes an infra error, not a verdict.
    """
    report_r, report_w = os.pipe()   # close-on-exec: EOF as soon as the exec succeeded
    pid = os.fork()
    if pid == 0:
        try:
            os.close(report_r)
            pyrunner.child_setup(limits, stdin_path, fds["out_w"], fds["err_w"], fds["keep"], cpu_s,
                                 report_fd=report_w)
            if data_limit:
                set_limit(resource.RLIMIT_DATA, limits["memory_mb"] << 20)
            if as_limit and GVISOR:
                # gVisor holds only brk, not mmap, to RLIMIT_DATA (measured): a program that
                # mmaps past the cgroup would take the whole sandbox down. Its RLIMIT_AS holds.
                set_limit(resource.RLIMIT_AS, (limits["memory_mb"] << 20) + AS_SLACK)
            os.execve(argv[0], argv, pyrunner.CHILD_ENV)
        except BaseException:
            why = traceback.format_exc(limit=2)[-1500:].encode()
            for fd in (pyrunner.REPORT_FD, report_w):
                try:
                    os.write(fd, why)
                    break
                except OSError:
                    pass
        os._exit(127)
    os.close(report_w)
    why = bytearray()
    while chunk := os.read(report_r, 4096):
        why += chunk
    os.close(report_r)
    if why:
        raise ExecFailed(f"the sandbox could not start {argv[0]} as the job's user:\n{why.decode(errors='replace')}")
    return pid


# --------------------------------------------------------------------------- one run

def run_step(kind: str, limits: dict, *, zygote: Zygote | None = None, source: str | None = None,
             tests_line: int = 0,
             argv: list[str] | None = None, stdin_path: str | None = None, nonce: str = "",
             wall_s: float, cpu_s: float, data_limit: bool = False, as_limit: bool = False,
             expected: str | None = None) -> dict:
    """Run one program to its end or its limit; measure everything the verdict needs."""
    cap = limits["output_bytes"]
    with confine.as_job():
        # Owned by the job's user: a runtime that reopens its fds through /proc/self/fd
        # (the Java and Node launchers) is then allowed to, non-dumpable as it is.
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        mark_r, mark_w = os.pipe()
        nonce_r, nonce_w = os.pipe() if source is None and kind != "compile" else (None, None)
    cpu0, oom0, t0 = cgroup_cpu_s(), oom_kills(), time.monotonic()
    keep = (zygote.pid,) if zygote is not None else ()
    pid = None   # for a Python run, known when the zygote says so
    if source is not None:
        if not zygote.start({"source": source, "nonce": nonce, "stdin_path": stdin_path, "limits": limits,
                             "cpu_s": cpu_s, "tests_line": tests_line}, [out_w, err_w, mark_w]):
            for fd in (out_r, out_w, err_r, err_w, mark_r, mark_w):
                os.close(fd)
            return runner_killed(kind)
    else:
        fds = {"out_w": out_w, "err_w": err_w, "keep": {3: mark_w}}
        if nonce_r is not None:
            fds["keep"][NONCE_FD] = nonce_r
        try:
            pid = spawn_exec(argv, limits, stdin_path, fds, cpu_s, data_limit, as_limit)
        except ExecFailed:
            for fd in (out_r, out_w, err_r, err_w, mark_r, mark_w, nonce_r, nonce_w):
                if fd is not None:
                    os.close(fd)
            raise
        if nonce_w is not None:
            os.close(fds["keep"][NONCE_FD])
    for fd in (out_w, err_w, mark_w):
        os.close(fd)
    if nonce_w is not None:
        try:
            os.write(nonce_w, nonce.encode())
        except OSError:
            pass
        os.close(nonce_w)

    buffers = {out_r: bytearray(), err_r: bytearray(), mark_r: bytearray()}
    caps = {out_r: cap, err_r: cap, mark_r: 4096}
    open_fds = set(buffers)
    poller = select.poll()
    for fd in open_fds:
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    if zygote is not None and zygote.alive:
        poller.register(zygote.sock.fileno(), select.POLLIN | select.POLLHUP | select.POLLERR)
    status = utime = None
    timed_out, output_limit, exited_at, left_behind = None, False, None, 0

    def kill_tree() -> None:
        sweep(keep=keep)   # every process of the job, whatever session it moved to

    while open_fds or status is None:
        now = time.monotonic()
        if status is None and now - t0 > wall_s:
            timed_out = timed_out or "wall"
            kill_tree()
        elif status is None and cpu0 is not None and (cgroup_cpu_s() or 0) - cpu0 > cpu_s:
            timed_out = timed_out or "cpu"
            kill_tree()
        elif exited_at is not None and open_fds and now - exited_at > 0.2:
            kill_tree()   # a background process still holds the pipes open
        for fd, _event in poller.poll(20):
            if zygote is not None and fd == zygote.sock.fileno():
                try:
                    msg, _ = pyrunner.recv_msg(zygote.sock)
                    if "status" in msg:
                        status, utime = msg["status"], msg["utime"] + msg["stime"]
                    else:
                        pid = msg["pid"]
                except (OSError, EOFError, ValueError):
                    # The job killed its zygote: the child is ours now (orphans re-parent to PID 1).
                    zygote.alive = False
                    poller.unregister(fd)
                continue
            if fd not in open_fds:
                continue
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                open_fds.discard(fd)
                poller.unregister(fd)
                continue
            buf = buffers[fd]
            buf += chunk[:max(caps[fd] + 1 - len(buf), 0)]
            if len(buf) > caps[fd] and fd != mark_r and not output_limit:
                output_limit = True
                kill_tree()
        if status is None:
            reap()
            if pid is not None and pid in REAPED:
                status, rusage = REAPED.pop(pid)
                utime = rusage.ru_utime + rusage.ru_stime
            elif zygote is not None and not zygote.alive and (pid is None or not os.path.exists(f"/proc/{pid}")):
                # Reaped by the zygote, whose report died with it (or never started).
                status = signal.SIGKILL
        if status is not None and exited_at is None:
            exited_at = time.monotonic()
            left_behind = len(other_pids(keep))
    wall = time.monotonic() - t0
    sweep(keep=keep)
    REAPED.clear()
    for fd in buffers:
        os.close(fd)
    cpu1 = cgroup_cpu_s()
    cpu_used = (cpu1 - cpu0) if (cpu0 is not None and cpu1 is not None) else (utime or 0.0)
    signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    if signum == signal.SIGXCPU or (signum == signal.SIGKILL and timed_out is None and cpu_used > cpu_s):
        timed_out = timed_out or "cpu"
    out, err = bytes(buffers[out_r][:cap]), bytes(buffers[err_r][:cap])
    match = None
    if expected is not None:
        match = outputs_match(out.decode("utf-8", errors="replace"), expected)
        out, err = out[:CASE_SHIP], err[:CASE_SHIP]
    exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
    return {
        "kind": kind,
        "stdout": base64.b64encode(out).decode(),
        "stderr": base64.b64encode(err).decode(),
        "output_match": match,
        "exit_code": exit_code,
        "signal": signum,
        "wall_s": round(wall, 6),
        "cpu_s": round(cpu_used, 6),
        "timed_out": timed_out,
        "output_limit": output_limit,
        "oom": oom_kills() > oom0,
        "marker_ok": bool(nonce) and bytes(buffers[mark_r]) == nonce.encode(),
        "syntax_error": source is not None and exit_code == pyrunner.EXIT_AFTER_SYNTAX_ERROR
                        and not buffers[mark_r],
        "left_behind": left_behind,
    }


def runner_killed(kind: str) -> dict:
    note = b"[proctor] the program killed the sandbox's runner process; this run did not start\n"
    return {"kind": kind, "stdout": "", "stderr": base64.b64encode(note).decode(), "output_match": None,
            "exit_code": None, "signal": signal.SIGKILL, "wall_s": 0.0, "cpu_s": 0.0, "timed_out": None,
            "output_limit": False, "oom": False, "marker_ok": False, "syntax_error": False, "left_behind": 0}


# --------------------------------------------------------------------------- one job

def write_files(job: dict) -> None:
    for rel, b64 in (job.get("files") or {}).items():
        confine.write(os.path.join(WORK, rel), base64.b64decode(b64))


def write_text(name: str, text: str) -> str:
    path = os.path.join(WORK, name)
    confine.write(path, text.encode())
    return path


def compile_job(job: dict, limits: dict) -> list[dict]:
    """Compile to objects, refuse objects that reach past the guard, link with the guard."""
    ext, compiler, std = (("c", "/usr/bin/gcc", "-std=gnu17") if job["language"] == "c"
                          else ("cpp", "/usr/bin/g++", "-std=gnu++17"))
    units = [write_text(f"main.{ext}", job["code"])]
    if job.get("tests"):
        units.append(write_text(f"tests.{ext}", job["tests"]))
    objects = [u.rsplit(".", 1)[0] + ".o" for u in units]
    budget = {"wall_s": limits["compile_s"], "cpu_s": limits["compile_s"]}
    steps = [run_step("compile", limits, argv=[compiler, std, "-O2", "-pipe", "-c", *units], **budget)]
    if not compiled_ok(steps[-1]):
        return steps
    nm = run_step("compile", limits, argv=["/usr/bin/nm", "-u", *objects], **budget)
    used = set(base64.b64decode(nm["stdout"]).decode(errors="replace").split())
    bad = sorted(used & set(FORBIDDEN_SYMBOLS))
    if nm["exit_code"] != 0 or bad:
        why = (f"the program references {', '.join(bad)}, reserved for the test harness"
               if bad else "could not list the program's symbols")
        nm.update(exit_code=1, stderr=base64.b64encode(f"[proctor] {why}\n".encode()).decode())
        return steps + [nm]
    # The guard goes first: its .preinit_array entry runs before anything of the program.
    link = [compiler, std, "-O2", "-o", "prog", GUARD_C, *objects, "-lm", "-Wl,--wrap=exit"]
    steps.append(run_step("compile", limits, argv=link, **budget))
    return steps


def compiled_ok(step: dict) -> bool:
    return step["exit_code"] == 0 and not step["timed_out"] and not step["oom"]


def run_job(job: dict, zygote: Zygote) -> list[dict]:
    limits = job["limits"]
    write_files(job)
    common = {"wall_s": limits["wall_s"], "cpu_s": limits["cpu_s"], "nonce": job["nonce"]}
    cases = job.get("cases") or []
    steps: list[dict] = []
    if job["language"] == "python":
        source = job["code"] + ("\n" + job["tests"] + "\n" if job.get("tests") else "")
        write_text("main.py", source)   # tracebacks quote lines from the file
        tests_line = job["code"].count("\n") + 2 if job.get("tests") else 1
        run = {"source": source, "zygote": zygote, "tests_line": tests_line}
    elif job["language"] in builders.LANGUAGES:   # Java, Go, Rust, JavaScript
        steps, run = builders.build(job, limits, run_step)
        if run is None:
            return steps[-1:]
        steps = steps[-1:]
    else:
        steps = compile_job(job, limits)
        if not compiled_ok(steps[-1]):
            return steps[-1:]
        steps = steps[-1:]
        run = {"argv": [os.path.join(WORK, "prog")], "data_limit": True, "as_limit": True}
    stop = bool(job.get("stop_on_first_failure"))   # a binary reward needs no more than one failure
    if job.get("tests") or not cases:
        steps.append(run_step("run", limits, **run, **common))
        if steps[-1]["syntax_error"] or (stop and step_failed(steps[-1])):
            return steps
    for i, (stdin, expected) in enumerate(cases):
        stdin_path = write_text(f".proctor/stdin-{i}", stdin)
        steps.append(run_step("case", limits, stdin_path=stdin_path, expected=expected, **run, **common))
        if stop and step_failed(steps[-1]):
            break
    return steps


def serve_one(infd: int, outfd: int, zygote: Zygote) -> bool:
    """Read one job, run it, reply. All job data lives in this frame and dies with it."""
    try:
        job = read_frame(infd)
    except EOFError:
        return False
    job_id = job.get("id")
    try:
        t0 = time.monotonic()
        steps = run_job(job, zygote)
        t1 = time.monotonic()
        left = sweep()   # the zygote too: the next job gets a fresh one
        t2 = time.monotonic()
        problems = scrub()
        t3 = time.monotonic()
        write_frame(outfd, {"type": "result", "id": job_id, "steps": steps, "clean": not problems,
                            "notes": problems, "swept": left,
                            "server_ms": {"run": round((t1 - t0) * 1e3, 3), "sweep": round((t2 - t1) * 1e3, 3),
                                          "scrub": round((t3 - t2) * 1e3, 3)}})
    except Exception:
        try:
            sweep()
        except Exception:
            pass
        write_frame(outfd, {"type": "error", "id": job_id, "error": traceback.format_exc(limit=5)})
    return True


def confinement_problem() -> str | None:
    """Why jobs cannot be confined here, found by confining a throw-away child, or None."""
    try:
        os.setgroups([])   # job processes inherit our supplementary groups: setuid keeps them
    except PermissionError:
        pass   # not root: confine.problem() says so
    why = confine.problem()
    if why is not None:
        return why
    pid = os.fork()
    if pid == 0:
        try:
            confine.confine_job()
            os._exit(0)
        except BaseException:
            traceback.print_exc()
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return None if status == 0 else "a job process could not drop to its uid or install its seccomp filter (see stderr)"


def main() -> None:
    set_dumpable(0)   # no core dumps, no /proc/1/mem: the server's memory holds every job's expectations
    # Jobs run under another uid (confine.py), so no signal of theirs reaches us. Besides,
    # every signal that would stop or end us is ignored (each child restores the default).
    for sig in pyrunner.PID1_IGNORED:
        signal.signal(sig, signal.SIG_IGN)
    infd, outfd = 0, os.dup(1)
    os.dup2(2, 1)   # stray prints go to stderr, never into the protocol
    unconfined = confinement_problem()
    if unconfined is not None:
        write_frame(outfd, {"type": "error", "id": None, "error": unconfined})
        return
    problems = scrub()
    write_frame(outfd, {"type": "ready", "pid": os.getpid(), "cpu_accounting": CPU_FILE is not None,
                        "oom_accounting": OOM_FILE is not None, "problems": problems})
    while True:
        # Forked here, between jobs, so that it holds nothing of any job.
        zygote = Zygote(close_fds=(outfd,))
        try:
            if not serve_one(infd, outfd, zygote):
                return
        finally:
            zygote.close()
        reap()
        REAPED.clear()


if __name__ == "__main__":
    main()
