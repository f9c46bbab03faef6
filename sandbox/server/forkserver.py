"""PID 1 of every sandbox container: runs one job at a time, each in fresh directories and fresh processes.

Stdlib only: this file and its siblings are copied into the images and run
under Debian's python3.

Why a fork server: starting a container or a `docker exec` per program costs
0.15-0.7 s; a fork from a warm interpreter costs about a millisecond. Why PID 1:
the kernel drops signals to a namespace's init that it does not handle, so
nothing a job does (`kill(-1, SIGKILL)` included) takes the server down, and
PID 1 reaps every orphan.

What a job never gets, whatever it does (the README's threat model):
  * the tests: Python tests run in a judge process of another uid (pyjudge.py);
    compiled tests are compiled from a pipe and never lie in a file the job can
    read; no source, object or class file of the tests outlives its build;
  * the expected outputs of stdin/stdout cases: they never enter the container.
    The server hashes each case's normalized output; the host compares;
  * anything of an earlier job: every job gets new directories (layout.py), and
    Python processes fork from the mother (mother.py), which never held a job;
  * the server's own files: builds and binaries live in /run/proctor, root's.

Protocol (both directions): 4-byte big-endian length + a JSON object.
Host -> server: {"type": "job", "id", "language", "code", "tests", "plan" (Python tests
of literal asserts only: sandbox/literal_tests.py), "cases" (stdin only), "files"
(base64), "limits", "nonce", "stop_on_first_failure", "fetch_files" (paths, or absent)}; during a job
with stop_on_first_failure, {"type": "go", "id", "continue": bool} answering a
{"type": "case", "id", "index", "stdout_sha256"} of the server's.
Server -> host: {"type": "ready"} once, then one {"type": "result", "id", "steps":
[...], "clean", "notes"} per job, or {"type": "error", "id", "error"} when the server
itself failed. A build of several steps (compile, check, link) arrives as one "compile"
step: the outcome of its last step, with "wall_s" and "cpu_s" summed over all of them
and "build_steps" their count. A job with "fetch_files" also gets "files" ({path:
base64, or null where no regular file is}) and "files_too_large" ({path: size} of
those left out, null in "files"; fetch.py).
"""

from __future__ import annotations

import base64
import json
import os
import signal
import struct
import time
import traceback

import builders
import confine
import fetch
from budgets import compile_mb
import layout
import native
import procs
import session_server
from hygiene import CPU_FILE, GVISOR, OOM_FILE, REAPED, reap, scrub, set_dumpable, sweep
from judge import step_failed
from mother import Mother
from runstep import ExecFailed, Launch, run_step

# Compile steps may write files of at most the disk budget, and at least this much
# (a Rust or Go binary is several MiB).
COMPILE_FILE_MIN = 64 << 20


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


class Host:
    """The link to the host: the job's frames in, results and questions out."""

    def __init__(self, infd: int, outfd: int) -> None:
        self.infd, self.outfd = infd, outfd

    def case_passed(self, job_id: object, index: int, step: dict) -> bool:
        """Ask the host whether case ``index`` matched (only it knows the expected output)."""
        write_frame(self.outfd, {"type": "case", "id": job_id, "index": index,
                                 "stdout_sha256": step["stdout_sha256"]})
        answer = read_frame(self.infd)
        if answer.get("type") != "go" or answer.get("id") != job_id:
            raise RuntimeError(f"the host answered a case with {str(answer)[:100]}")
        return bool(answer.get("continue"))


# --------------------------------------------------------------------------- one job

def write_files(job: dict) -> None:
    for rel, b64 in (job.get("files") or {}).items():
        confine.write(os.path.join(layout.WORK, rel), base64.b64decode(b64))


def compile_limits(language: str, limits: dict) -> tuple[int, int]:
    """(RLIMIT_AS, RLIMIT_FSIZE) of every compile step (budgets.py)."""
    return compile_mb(language, limits["memory_mb"]) << 20, max(limits["disk_mb"] << 20, COMPILE_FILE_MIN)


def build(job: dict, limits: dict, mother: Mother) -> tuple[list[dict], Launch | None]:
    """Build the job's program: (the compile steps, how to run it, or None when the build failed)."""
    language = job["language"]
    if language == "python":
        if job.get("plan"):   # literal assertions: the server is the judge (calls.py)
            return [], Launch(called=(job["code"], job["plan"], job["tests"]))
        if job.get("tests"):
            return [], Launch(judged=(job["code"], job["tests"]))
        return [], Launch(python=job["code"])
    as_bytes, fsize = compile_limits(language, limits)
    budget = native.Budget(limits, lambda *a, **k: run_step(*a, mother=mother, **k), as_bytes, fsize)
    if language in ("c", "cpp"):
        return native.build(job, budget, GVISOR)
    return builders.build(job, budget, GVISOR)


def build_summary(steps: list[dict]) -> list[dict]:
    """The build's steps as the host gets them: at most one, the last step's outcome (the
    verdict reads it), with the wall and CPU time of every build step summed."""
    if not steps:
        return []
    return [{**steps[-1], "wall_s": round(sum(s["wall_s"] for s in steps), 6),
             "cpu_s": round(sum(s["cpu_s"] for s in steps), 6), "build_steps": len(steps)}]


def run_job(job: dict, mother: Mother, host: Host) -> list[dict]:
    limits = job["limits"]
    write_files(job)
    if job["language"] == "python":
        # The program's own file (tracebacks quote it): its code only, never the tests.
        confine.write(os.path.join(layout.WORK, "main.py"), job["code"].encode())
    steps, launch = build(job, limits, mother)
    steps = build_summary(steps)
    if launch is None:
        return steps
    common = {"mother": mother, "wall_s": limits["wall_s"], "cpu_s": limits["cpu_s"], "nonce": job["nonce"]}
    cases = job.get("cases") or []
    stop = bool(job.get("stop_on_first_failure"))   # a binary reward needs no more than one failure
    if job.get("tests") or not cases:
        layout.reopen_work()
        steps.append(run_step("run", limits, launch, **common))
        if steps[-1]["syntax_error"] or (stop and step_failed(steps[-1])):
            return steps
    if launch.judged is not None or launch.called is not None:   # the cases run the program alone
        launch = Launch(python=(launch.judged or launch.called)[0])   # type: ignore[index]
    for i, stdin in enumerate(cases):
        layout.reopen_work()
        steps.append(run_step("case", limits, launch, stdin=stdin.encode("utf-8", "surrogatepass"),
                              hash_output=True, **common))
        if stop and (step_failed(steps[-1]) or not host.case_passed(job.get("id"), i, steps[-1])):
            break
    return steps


def fetch_files(job: dict) -> dict:
    """The job's "fetch_files" as the result frame carries them ("files", "files_too_large"), or {}.

    Read from the work dir the runs shared, as the last run left it; a run may have
    chmod-ed the dir itself shut, as before each run (reopen_work), that is undone first.
    """
    paths = job.get("fetch_files")
    if paths is None:
        return {}
    layout.reopen_work()
    files, too_large = fetch.fetch(list(paths), int(job["limits"]["output_bytes"]))
    return {"files": files, "files_too_large": too_large}


def serve_one(host: Host, mother: Mother) -> bool:
    """Read one job, run it, reply. All job data lives in this frame and dies with it."""
    try:
        job = read_frame(host.infd)
    except EOFError:
        return False
    job_id = job.get("id")
    if job.get("type") == "session":   # from now on this container serves that one session (session_server.py)
        session_server.serve(job, lambda: read_frame(host.infd), lambda m: write_frame(host.outfd, m), mother.pid)
        return False
    try:
        t0 = time.monotonic()
        layout.prepare_job()
        try:
            steps = run_job(job, mother, host)
        except ExecFailed as exc:
            raise RuntimeError(str(exc)) from None
        t1 = time.monotonic()
        mother.settle()
        left = sweep(keep=mother.keep())
        # After the sweep, so no process of the job changes a file while it is read; before
        # the scrub, which empties the work dir.
        fetched = fetch_files(job)
        problems = scrub() + (["the mother of Python runs died"] if mother.dead else [])
        t2 = time.monotonic()
        write_frame(host.outfd, {"type": "result", "id": job_id, "steps": steps, "clean": not problems,
                                 "notes": problems, "swept": left, **fetched,
                                 "server_ms": {"run": round((t1 - t0) * 1e3, 3),
                                               "clean": round((t2 - t1) * 1e3, 3)}})
    except Exception:
        try:
            mother.settle()
            sweep(keep=mother.keep())
            scrub()
        except Exception:
            pass
        write_frame(host.outfd, {"type": "error", "id": job_id, "error": traceback.format_exc(limit=5)})
    mother.top_up()   # the next job's runners fork while the host reads this result
    return True


def confinement_problem() -> str | None:
    """Why jobs cannot be confined here, found by confining throw-away children, or None."""
    try:
        os.setgroups([])   # job processes inherit our supplementary groups: setuid keeps them
    except PermissionError:
        pass   # not root: confine.problem() says so
    why = confine.problem()
    if why is not None:
        return why
    for become in (confine.confine_job, confine.confine_judge):
        pid = os.fork()
        if pid == 0:
            try:
                become()
                os._exit(0)
            except BaseException:
                traceback.print_exc()
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        if status != 0:
            return (f"a job process could not drop to its uid or install its seccomp filter "
                    f"({become.__name__}; see stderr)")
    return None


def main() -> None:
    set_dumpable(0)   # no core dumps, no /proc/1/mem: the server's memory holds every job's expectations
    # Jobs run under other uids (confine.py), so no signal of theirs reaches us. Besides,
    # every signal that would stop or end us is ignored (each child restores the default).
    for sig in procs.PID1_IGNORED:
        signal.signal(sig, signal.SIG_IGN)
    infd, outfd = 0, os.dup(1)
    os.dup2(2, 1)   # stray prints go to stderr, never into the protocol
    unconfined = confinement_problem()
    if unconfined is not None:
        write_frame(outfd, {"type": "error", "id": None, "error": unconfined})
        return
    # Forked now, before any job: every Python process of every job is a copy of it.
    mother = Mother(close_fds=(outfd,))
    builders.prestart(GVISOR)   # after the mother's fork: it holds none of the compile server's pipes
    problems = scrub()
    write_frame(outfd, {"type": "ready", "pid": os.getpid(), "cpu_accounting": CPU_FILE is not None,
                        "oom_accounting": OOM_FILE is not None, "problems": problems})
    host = Host(infd, outfd)
    while serve_one(host, mother):
        reap()
        REAPED.clear()


if __name__ == "__main__":
    main()
