"""PID 1 of every sandbox container: runs one job at a time, each in forked children.

Stdlib only: this file is copied into the images and runs under Debian's python3.

Why a fork server: starting a container or a `docker exec` per program costs
0.15-0.7 s; a fork from a warm interpreter costs about a millisecond. Why PID 1:
the kernel ignores signals to a namespace's init that it has no handler for, so
nothing a job does (`kill(-1, SIGKILL)` included) can take the server down, and
PID 1 reaps every orphan.

Protocol (both directions): 4-byte big-endian length + a JSON object.
Host -> server: {"type": "job", "id", "language", "code", "tests", "cases",
"files" (base64), "limits", "nonce"}. Server -> host: {"type": "ready"} once,
then one {"type": "result", "id", "steps": [...], "clean", "notes"} per job, or
{"type": "error", "id", "error"} when the server itself failed.

The server only runs and measures; the host turns the measurements into a verdict.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import resource
import select
import signal
import struct
import sys
import time
import traceback

from judge import outputs_match

WORK = "/work"
SCRUB_DIRS = (WORK, "/tmp", "/dev/shm", "/dev/mqueue")
GUARD_C = os.path.join(os.path.dirname(os.path.abspath(__file__)), "guard.c")
CHILD_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": WORK, "LANG": "C.UTF-8",
             "PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8"}
MARKER_FD, NONCE_FD = 3, 4
EXIT_AFTER_SYNTAX_ERROR = 3
# A case's output is compared here in full; only this much of it travels back, so a
# job with many cases cannot make the server hold (and ship) hundreds of megabytes.
CASE_SHIP = 64 << 10

_CPU_FILES = ("/sys/fs/cgroup/cpuacct/cpuacct.usage", "/sys/fs/cgroup/cpu,cpuacct/cpuacct.usage",
              "/sys/fs/cgroup/cpu.stat")
_OOM_FILES = ("/sys/fs/cgroup/memory/memory.oom_control", "/sys/fs/cgroup/memory.events")


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
    data = struct.pack(">I", len(body)) + body
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


# --------------------------------------------------------------------------- cgroup readings

def _first_existing(paths):
    for path in paths:
        if os.path.exists(path):
            return path
    return None


CPU_FILE = _first_existing(_CPU_FILES)
OOM_FILE = _first_existing(_OOM_FILES)


def cgroup_cpu_s() -> float | None:
    """CPU seconds used by the whole container: every process a job started counts."""
    if CPU_FILE is None:
        return None
    try:
        with open(CPU_FILE) as f:
            text = f.read()
    except OSError:
        return None
    if CPU_FILE.endswith("cpu.stat"):
        for line in text.splitlines():
            if line.startswith("usage_usec"):
                return int(line.split()[1]) / 1e6
        return None
    return int(text) / 1e9


def oom_kills() -> int:
    if OOM_FILE is None:
        return 0
    try:
        with open(OOM_FILE) as f:
            for line in f:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


# --------------------------------------------------------------------------- process hygiene

def other_pids() -> list[int]:
    me = os.getpid()
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) != me]


REAPED: dict[int, tuple[int, object]] = {}   # pid -> (wait status, rusage) of reaped children


def reap() -> None:
    """Collect every exited descendant (orphans re-parent to PID 1, i.e. to us)."""
    while True:
        try:
            pid, status, rusage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        REAPED[pid] = (status, rusage)


def sweep(deadline_s: float = 2.0) -> int:
    """Kill every process but this one; return how many were found.

    One job per container, so anything alive here belongs to the job that just
    ended: daemons that double-forked out of its session included.
    """
    found = 0
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        pids = other_pids()
        if not pids:
            return found
        found = max(found, len(pids))
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        reap()
        time.sleep(0.005)
    raise RuntimeError(f"processes survived the sweep: {other_pids()}")


def _remove_tree_contents(root: str) -> None:
    if not os.path.isdir(root):
        return
    for dirpath, dirnames, filenames in os.walk(root, topdown=True):
        # A job may have made directories unreadable to block the scrub.
        for d in dirnames:
            path = os.path.join(dirpath, d)
            if not os.path.islink(path):
                try:
                    os.chmod(path, 0o700)
                except OSError:
                    pass
    for dirpath, dirnames, filenames in os.walk(root, topdown=False):
        for name in filenames:
            os.unlink(os.path.join(dirpath, name))
        for name in dirnames:
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                os.unlink(path)
            else:
                os.rmdir(path)


def scrub() -> list[str]:
    """Empty every writable place; return what could not be made clean."""
    problems = []
    for root in SCRUB_DIRS:
        try:
            _remove_tree_contents(root)
            left = os.listdir(root) if os.path.isdir(root) else []
            if left:
                problems.append(f"{root} not empty: {left[:5]}")
        except OSError as exc:
            problems.append(f"{root}: {exc}")
    # SysV IPC objects outlive processes and cannot be listed by path: report them
    # so the host replaces the container.
    for kind in ("shm", "msg", "sem"):
        try:
            with open(f"/proc/sysvipc/{kind}") as f:
                if len(f.read().splitlines()) > 1:
                    problems.append(f"SysV {kind} objects left")
        except OSError:
            pass
    return problems


# --------------------------------------------------------------------------- children

def _set_limit(which: int, soft: int, hard: int | None = None) -> None:
    """Only ever lower limits: raising a hard limit fails inside containers."""
    cur_soft, cur_hard = resource.getrlimit(which)
    hard = soft if hard is None else hard
    if cur_hard != resource.RLIM_INFINITY:
        hard = min(hard, cur_hard)
    soft = min(soft, hard)
    resource.setrlimit(which, (soft, hard))


def _child_common(limits: dict, stdin_path: str | None, out_w: int, err_w: int,
                  keep: dict[int, int], cpu_s: float) -> None:
    """Runs in the forked child before the program: isolation of this one process tree."""
    os.setsid()
    for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGTERM, signal.SIGCHLD, signal.SIGHUP,
                signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)   # as in a fresh interpreter
    wanted = {0: os.open(stdin_path or "/dev/null", os.O_RDONLY), 1: out_w, 2: err_w, **keep}
    # Park every source above the targets first, so no dup2 clobbers a source not yet placed.
    parked = {target: fcntl.fcntl(source, fcntl.F_DUPFD, 100) for target, source in wanted.items()}
    for target, source in parked.items():
        os.dup2(source, target)
    # Everything else, the server's link to the host first of all, must be gone.
    os.closerange(max(wanted) + 1, 65536)
    cpu = max(1, int(cpu_s + 0.999))
    _set_limit(resource.RLIMIT_CPU, cpu, cpu + 1)
    _set_limit(resource.RLIMIT_FSIZE, limits["disk_mb"] << 20)
    _set_limit(resource.RLIMIT_CORE, 0)
    try:
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")   # if the cgroup runs out, the job dies, not the server
    except OSError:
        pass
    os.chdir(WORK)


def spawn(argv: list[str] | None, python_source: str | None, limits: dict, stdin_path: str | None,
          pipes: dict, cpu_s: float, memory_limit: str) -> int:
    pid = os.fork()
    if pid != 0:
        return pid
    try:
        keep = {MARKER_FD: pipes["mark_w"]}
        if "nonce_r" in pipes:
            keep[NONCE_FD] = pipes["nonce_r"]
        _child_common(limits, stdin_path, pipes["out_w"], pipes["err_w"], keep, cpu_s)
        mem = limits["memory_mb"] << 20
        if python_source is not None:
            # Address space = what the forked interpreter already maps + the job's budget.
            with open("/proc/self/statm") as f:
                vm = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            _set_limit(resource.RLIMIT_AS, vm + mem)
            run_python(python_source, pipes["nonce"])
        else:
            if memory_limit == "data":
                _set_limit(resource.RLIMIT_DATA, mem)
            os.execve(argv[0], argv, CHILD_ENV)
    except BaseException:
        try:
            traceback.print_exc()
            sys.stderr.flush()
        finally:
            os._exit(127)
    os._exit(127)


def run_python(source: str, nonce: str) -> None:
    """Run `source` as __main__ in this forked child, as `python3 main.py` would.

    The marker (the job's nonce on fd 3) is written only when the module body
    ran to its end: `sys.exit(0)`, `os._exit(0)` or an exit hook before the tests
    finish leave no marker, so they cannot pass.
    """
    import atexit
    import builtins
    import io
    import threading
    import types

    _set_dumpable(1)   # the server is not dumpable; the job may inspect itself as usual
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)   # as CPython sets them at start-up
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
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
    marker = nonce.encode()
    del nonce

    def finish(code: int, ok: bool) -> None:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        if ok:
            try:
                os.write(MARKER_FD, marker)
            except OSError:
                pass
            try:
                atexit._run_exitfuncs()
            except BaseException:
                pass
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except BaseException:
                    pass
        os._exit(code)

    try:
        code = compile(source, path, "exec")
    except (SyntaxError, ValueError):
        traceback.print_exc(limit=0)
        finish(EXIT_AFTER_SYNTAX_ERROR, False)
    try:
        exec(code, module.__dict__)
        threading._shutdown()
    except SystemExit as exc:
        finish(_exit_code(exc), False)
    except BaseException:
        etype, value, tb = sys.exc_info()
        try:
            # Start the traceback at the program's own frame, not at this runner.
            tb = tb.tb_next if tb is not None else None
            sys.excepthook(etype, value.with_traceback(tb) if value is not None else value, tb)
        except BaseException:
            pass
        finish(1, False)
    finish(0, True)


def _exit_code(exc: SystemExit) -> int:
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    try:
        print(exc.code, file=sys.stderr)
    except BaseException:
        pass
    return 1


def _set_dumpable(flag: int) -> None:
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(4, flag, 0, 0, 0)   # PR_SET_DUMPABLE
    except Exception:
        pass


# --------------------------------------------------------------------------- one step

def run_step(kind: str, limits: dict, *, argv: list[str] | None = None, python_source: str | None = None,
             stdin_path: str | None = None, nonce: str = "", wall_s: float, cpu_s: float,
             memory_limit: str = "none", expected: str | None = None) -> dict:
    """Run one program to its end or its limit; measure everything the verdict needs."""
    cap = limits["output_bytes"]
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    mark_r, mark_w = os.pipe()
    pipes = {"out_w": out_w, "err_w": err_w, "mark_w": mark_w, "nonce": nonce}
    nonce_w = None
    if argv is not None and kind != "compile":
        nonce_r, nonce_w = os.pipe()
        pipes["nonce_r"] = nonce_r
    cpu0, oom0, t0 = cgroup_cpu_s(), oom_kills(), time.monotonic()
    pid = spawn(argv, python_source, limits, stdin_path, pipes, cpu_s, memory_limit)
    for fd in (out_w, err_w, mark_w, pipes.get("nonce_r")):
        if fd is not None:
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
    status = rusage = None
    timed_out, output_limit, exited_at, left_behind = None, False, None, 0

    def kill_tree() -> None:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        sweep()

    while open_fds:
        now = time.monotonic()
        if status is None and now - t0 > wall_s:
            timed_out = "wall"
            kill_tree()
        elif status is None and cpu0 is not None and (cgroup_cpu_s() or 0) - cpu0 > cpu_s:
            timed_out = "cpu"
            kill_tree()
        elif exited_at is not None and now - exited_at > 0.2:
            kill_tree()   # a background process still holds the pipes open
        for fd, _event in poller.poll(20):
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
            room = caps[fd] + 1 - len(buf)
            buf += chunk[:max(room, 0)]
            if len(buf) > caps[fd] and fd != mark_r and not output_limit:
                output_limit = True
                kill_tree()
        if status is None:
            reap()
            if pid in REAPED:
                status, rusage = REAPED.pop(pid)
                exited_at = time.monotonic()
                left_behind = len(other_pids())
    if status is None:
        while pid not in REAPED:
            try:
                _, st, ru = os.wait4(pid, 0)
                REAPED[pid] = (st, ru)
            except ChildProcessError:
                break
        status, rusage = REAPED.pop(pid, (9, None))
    wall = time.monotonic() - t0
    sweep()
    REAPED.clear()
    for fd in buffers:
        os.close(fd)
    cpu1 = cgroup_cpu_s()
    if cpu0 is not None and cpu1 is not None:
        cpu_used = cpu1 - cpu0
    else:
        cpu_used = (rusage.ru_utime + rusage.ru_stime) if rusage is not None else 0.0
    signum = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    if signum == signal.SIGXCPU or (signum == signal.SIGKILL and timed_out is None and cpu_used > cpu_s):
        timed_out = timed_out or "cpu"
    out, err = bytes(buffers[out_r][:cap]), bytes(buffers[err_r][:cap])
    match = None
    if expected is not None:
        match = outputs_match(out.decode("utf-8", errors="replace"), expected)
        out, err = out[:CASE_SHIP], err[:CASE_SHIP]
    return {
        "kind": kind,
        "stdout": base64.b64encode(out).decode(),
        "stderr": base64.b64encode(err).decode(),
        "output_match": match,
        "exit_code": os.WEXITSTATUS(status) if os.WIFEXITED(status) else None,
        "signal": signum,
        "wall_s": round(wall, 6),
        "cpu_s": round(cpu_used, 6),
        "timed_out": timed_out,
        "output_limit": output_limit,
        "oom": oom_kills() > oom0,
        "marker_ok": bool(nonce) and bytes(buffers[mark_r]) == nonce.encode(),
        "syntax_error": python_source is not None and os.WIFEXITED(status)
                        and os.WEXITSTATUS(status) == EXIT_AFTER_SYNTAX_ERROR and not buffers[mark_r],
        "left_behind": left_behind,
    }


# --------------------------------------------------------------------------- one job

def write_files(job: dict) -> None:
    for rel, b64 in (job.get("files") or {}).items():
        path = os.path.join(WORK, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(base64.b64decode(b64))


def run_job(job: dict) -> dict:
    limits = job["limits"]
    language, nonce = job["language"], job["nonce"]
    write_files(job)
    steps = []
    common = {"wall_s": limits["wall_s"], "cpu_s": limits["cpu_s"]}
    cases = job.get("cases") or []
    if language == "python":
        source = job["code"] + ("\n" + job["tests"] + "\n" if job.get("tests") else "")
        with open(os.path.join(WORK, "main.py"), "w") as f:
            f.write(source)   # tracebacks quote lines from the file
        run = {"python_source": source, "nonce": nonce}
    else:
        ext, compiler, std = ("c", "/usr/bin/gcc", "-std=gnu17") if language == "c" else ("cpp", "/usr/bin/g++", "-std=gnu++17")
        units = [f"main.{ext}"]
        with open(os.path.join(WORK, units[0]), "w") as f:
            f.write(job["code"])
        if job.get("tests"):
            units.append(f"tests.{ext}")
            with open(os.path.join(WORK, units[1]), "w") as f:
                f.write(job["tests"])
        argv = [compiler, std, "-O2", "-pipe", "-o", "prog", *units, GUARD_C, "-lm",
                "-Wl,--wrap=exit"]
        compiled = run_step("compile", limits, argv=argv, wall_s=limits["compile_s"],
                            cpu_s=limits["compile_s"], memory_limit="none")
        steps.append(compiled)
        if compiled["exit_code"] != 0 or compiled["timed_out"] or compiled["oom"]:
            return {"steps": steps}
        run = {"argv": [os.path.join(WORK, "prog")], "nonce": nonce, "memory_limit": "data"}
    if job.get("tests") or not cases:
        steps.append(run_step("run", limits, **run, **common))
        if language == "python" and steps[-1]["syntax_error"]:
            return {"steps": steps}
    for i, (stdin, expected) in enumerate(cases):
        stdin_path = os.path.join(WORK, ".proctor", f"stdin-{i}")
        os.makedirs(os.path.dirname(stdin_path), exist_ok=True)
        with open(stdin_path, "w") as f:
            f.write(stdin)
        steps.append(run_step("case", limits, stdin_path=stdin_path, expected=expected, **run, **common))
    return {"steps": steps}


def main() -> None:
    _set_dumpable(0)   # jobs share our uid: keep them out of /proc/1/mem and ptrace
    # A job shares our uid and may signal us. The kernel drops signals to a namespace's
    # init unless init handles them, and Python handles SIGINT: stop that.
    for sig in (signal.SIGINT, signal.SIGPIPE, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2):
        signal.signal(sig, signal.SIG_IGN)
    infd, outfd = 0, os.dup(1)
    # From here on stray prints from this process go to stderr, never into the protocol.
    os.dup2(2, 1)
    problems = scrub()
    write_frame(outfd, {"type": "ready", "pid": os.getpid(), "cpu_accounting": CPU_FILE is not None,
                        "oom_accounting": OOM_FILE is not None, "problems": problems})
    while True:
        try:
            job = read_frame(infd)
        except EOFError:
            return
        job_id = job.get("id")
        try:
            reply = run_job(job)
            left = sweep()
            problems = scrub()
            write_frame(outfd, {"type": "result", "id": job_id, "steps": reply["steps"],
                                "clean": not problems, "notes": problems, "swept": left})
        except Exception:
            try:
                sweep()
            except Exception:
                pass
            write_frame(outfd, {"type": "error", "id": job_id, "error": traceback.format_exc(limit=5)})


if __name__ == "__main__":
    main()
