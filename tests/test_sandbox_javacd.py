"""Java's warm compile server (sandbox/server/javacd.py) against the real sandbox (no mocks).

The server outlives jobs, so each test here is an attack on that: a job that tries to reach
it, a compile that tries to leave something for the next one, and compiles that make it
fail or run out of time. One container serves every job (``slots=1, spare=0``); a program
reads the server's pid from /proc to prove it is the same process from job to job.
"""

from __future__ import annotations

import re

import pytest

from humaneval_x import first
from proctor.sandbox import Job, Limits, Result, Sandbox

pytestmark = pytest.mark.docker

LIM = Limits(wall_s=10, cpu_s=5, memory_mb=256)

# A program that finds the compile server in /proc, then tries to end it, stop it and read
# its memory and environment; it prints one line per try.
REACH = """import java.nio.file.*;
import java.util.*;

public class Main {
    public static void main(String[] args) throws Exception {
        for (Path p : Files.newDirectoryStream(Path.of("/proc"), "[0-9]*")) {
            String cmd;
            try { cmd = new String(Files.readAllBytes(p.resolve("cmdline"))); } catch (Exception e) { continue; }
            if (!cmd.contains("CompileServer")) continue;
            long pid = Long.parseLong(p.getFileName().toString());
            System.out.println("server " + pid);
            ProcessHandle h = ProcessHandle.of(pid).orElse(null);
            System.out.println("killed " + (h != null && h.destroyForcibly()));
            for (String f : new String[] {"mem", "environ", "maps"}) {
                try { Files.readAllBytes(p.resolve(f)); System.out.println("read " + f); }
                catch (Exception e) { System.out.println("denied " + f); }
            }
        }
    }
}
"""


# What a job may read of the server's /proc entries: nothing under runc. gVisor lets any
# process read another's environ and maps (measured; they hold a fixed environment and
# addresses), never its mem (test_sandbox_runsc_langs.py sets this).
MAY_READ: tuple[str, ...] = ()


def explain(r: Result) -> str:
    return f"status={r.status} exit={r.exit_code}\nstdout={r.stdout[-800:]!r}\nstderr={r.stderr[-1500:]!r}"


@pytest.fixture(scope="module")
def sb(docker_ready):
    with Sandbox(slots=1, spare=0) as sandbox:
        yield sandbox


def server_pid(sb: Sandbox) -> int:
    """The compile server's pid, as a job sees it; asserts that the job could not harm it."""
    r = sb.run(Job(language="java", code=REACH, limits=LIM))
    assert r.status == "passed", explain(r)
    pids = [int(pid) for pid in re.findall(r"^server (\d+)$", r.stdout, re.M)]
    assert len(pids) == 1, explain(r)
    assert "killed false" in r.stdout and "denied mem" in r.stdout, explain(r)
    assert all(f"read {f}" not in r.stdout for f in ("mem", "environ", "maps") if f not in MAY_READ), explain(r)
    return pids[0]


def test_one_server_outlives_jobs_and_no_job_can_reach_it(sb):
    p = first("java")
    before = server_pid(sb)
    results = sb.run_many([p.job(limits=LIM), p.job(p.wrong_solution, limits=LIM),
                           p.job("        return 1 +;\n    }\n}\n", limits=LIM)] * 3)
    assert [r.status for r in results] == ["passed", "failed", "compile_error"] * 3, \
        "\n\n".join(explain(r) for r in results)
    assert "error: illegal start of expression" in results[2].stderr and "1 error" in results[2].stderr
    assert server_pid(sb) == before   # every one of those compiles went through the same server


def test_no_class_of_one_compile_reaches_the_next(sb):
    """A class an earlier job compiled (and its tests ran with) is unknown to the next job's compile."""
    p = first("java")
    helper = "class Leak {\n    static boolean always() { return true; }\n}\n"
    planted = sb.run(p.job(after=helper, limits=LIM))
    assert planted.status == "passed", explain(planted)
    uses = sb.run(p.job("        return Leak.always();\n    }\n}\n", limits=LIM))
    assert uses.status == "compile_error", explain(uses)
    assert "cannot find symbol" in uses.stderr and "Leak" in uses.stderr, explain(uses)


def test_a_compile_the_server_cannot_judge_gets_javacs_own_verdict(sb):
    """javac overflows its stack on a 20,000-term sum: the server gives no verdict and exits,
    javac's command line gives its own (a compile error), and a new server takes over."""
    p = first("java")
    before = server_pid(sb)
    deep = "class Deep {\n    static int x = " + "+".join(["1"] * 20000) + ";\n}\n"
    r = sb.run(p.job(after=deep, limits=LIM))
    assert r.status == "compile_error", explain(r)
    assert "StackOverflowError" in r.stderr, explain(r)
    assert sb.run(p.job(limits=LIM)).status == "passed"
    assert server_pid(sb) != before


def test_a_compiles_cpu_time_is_counted(sb):
    """The compile runs in the resident server, not a process of the job's: its CPU time is the
    container's cgroup counter's under runc and the server's own under gVisor (which has no
    such counter), never 0."""
    r = sb.run(first("java").job(after="class Broken {\n    int x = ;\n}\n", limits=LIM))
    assert r.status == "compile_error" and r.cpu_s > 0, explain(r) + f"\ncpu_s={r.cpu_s}"


def test_a_compile_past_its_budget_times_out_and_the_next_job_compiles(sb):
    p = first("java")
    many = "class Many {\n" + "".join(
        f"    static int f{i}(int a) {{ int b = a * {i}; for (int j = 0; j < b; j++) {{ b += j % 7; }} return b; }}\n"
        for i in range(3000)) + "}\n"
    r = sb.run(p.job(after=many, limits=Limits(wall_s=10, cpu_s=5, memory_mb=256, compile_s=0.2)))
    assert r.status == "compile_error" and "compilation exceeded 0.2 s" in r.stderr, explain(r)
    assert r.cpu_s > 0, f"the timed-out compile's CPU time was not read: {r.cpu_s}"
    ok = sb.run(p.job(limits=LIM))
    assert ok.status == "passed", explain(ok)
