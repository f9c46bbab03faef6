"""Stateful sessions (Sandbox.session) against the real Docker engine: state, limits, lifetime, and
hostile cells that try to outlive their call, forge their result or reach another session."""

from __future__ import annotations

import json
import struct
import threading
import time

import docker.errors
import pytest

from proctor.sandbox import BadJob, CellResult, Sandbox, SandboxError, SessionClosed, SessionLimits
from proctor.sandbox.engine import connect

pytestmark = pytest.mark.docker

FAST = SessionLimits(cpu_s=2.0, wall_s=5.0, memory_mb=256)


@pytest.fixture(scope="module")
def sb(docker_ready):
    with Sandbox(startup_check=()) as sandbox:
        yield sandbox


def ok(result: CellResult) -> CellResult:
    assert result.status == "ok", result
    return result


def container_exists(container_id: str) -> bool:
    try:
        connect().api.inspect_container(container_id)
        return True
    except docker.errors.NotFound:
        return False


def test_state_survives_between_calls(sb):
    with sb.session("python", limits=FAST) as s:
        assert s.language == "python" and len(s.id) >= 20
        ok(s.run("import math\nx = 41\nprint('hi')\nopen('notes.txt', 'w').write('kept')"))
        r = ok(s.run("x += 1\nmath.sqrt(x * 0 + 16), open('notes.txt').read()"))
        assert r.value == "(4.0, 'kept')" and r.stdout == "" and not r.reset
        assert ok(s.run("x")).value == "42"
        assert ok(s.run("y = 1")).value is None            # ends in a statement
        assert ok(s.run("print('out')")).value == "None"    # ends in an expression (print's None)
        s.put_files({"data/in.txt": "from host", "raw.bin": b"\x00\x01"})
        assert ok(s.run("open('data/in.txt').read()")).value == "'from host'"
        ok(s.run("open('made.txt', 'wb').write(b'\\xff' * 3)"))
        assert s.get_files(["made.txt", "raw.bin", "missing.txt", "data"]) == {
            "made.txt": b"\xff" * 3, "raw.bin": b"\x00\x01", "missing.txt": None, "data": None}


def test_errors_come_back_with_their_traceback_and_the_session_goes_on(sb):
    with sb.session("python", limits=FAST) as s:
        ok(s.run("def f(n):\n    return 10 // n\nkeep = 'yes'"))
        r = s.run("print('before', flush=True)\nf(0)")
        assert r.status == "error" and r.error == "ZeroDivisionError: integer division or modulo by zero"
        assert "Traceback" in r.traceback and "in f" in r.traceback and "return 10 // n" in r.traceback
        assert r.stdout == "before\n" and not r.reset
        r = s.run("def broken(:\n  pass")
        assert r.status == "error" and r.error.startswith("SyntaxError") and not r.reset
        r = ok(s.run("import os\nif os.fork() == 0:\n    raise ValueError('in the child')\nos.wait()[1]"))
        assert r.value == "256" and "ValueError: in the child" in r.stderr   # the child exited 1, never answered
        r = s.run("import sys\nsys.exit(3)")
        assert r.status == "error" and r.error == "SystemExit: 3" and not r.reset
        assert ok(s.run("keep")).value == "'yes'"


def test_calls_from_many_threads_are_serialised(sb):
    with sb.session("python", limits=FAST) as s:
        ok(s.run("n = 0"))
        results: list[CellResult] = []
        threads = [threading.Thread(target=lambda: results.append(
            s.run("import time\nm = n\ntime.sleep(0.05)\nn = m + 1\nn"))) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(ok(r).value for r in results) == ["1", "2", "3", "4"]
        assert s.calls == 5


def test_the_kernel_is_confined_like_a_job(sb):
    with sb.session("python", limits=FAST) as s:
        r = ok(s.run(
            "import os, socket\n"
            "status = open('/proc/self/status').read()\n"
            "fields = dict(l.split(':\\t', 1) for l in status.splitlines() if ':\\t' in l)\n"
            "try:\n    open('/usr/evil', 'w'); root = 'writable'\nexcept OSError as e:\n    root = type(e).__name__\n"
            "try:\n    socket.create_connection(('1.1.1.1', 53), timeout=1); net = 'reached'\n"
            "except OSError as e:\n    net = 'none'\n"
            "f = {k: v.strip() for k, v in fields.items()}\n"
            "(os.getuid(), f['NoNewPrivs'], f['Seccomp'], f['CapEff'], root, net)"))
        assert r.value == "(1000, '1', '2', '0000000000000000', 'OSError', 'none')"


def test_timeouts_reset_the_session(sb):
    with sb.session("python", limits=FAST) as s:
        ok(s.run("v = 1\nopen('f.txt', 'w').write('x')"))
        r = s.run("import time\nprint('start', flush=True)\ntime.sleep(30)", limits=SessionLimits(wall_s=1.0))
        assert r.status == "timeout" and r.reset and "wall-clock limit of 1 s" in r.error
        assert r.stdout == "start\n" and 1.0 <= r.wall_s < 10
        r = s.run("'v' in globals(), __import__('os').listdir('.')")
        assert ok(r).value == "(False, [])"
        r = s.run("while True: pass", limits=SessionLimits(cpu_s=0.5))
        assert r.status == "timeout" and r.reset and "CPU limit" in r.error and r.cpu_s >= 0.5
        assert ok(s.run("1 + 1")).value == "2"


def test_memory_and_output_limits(sb):
    with sb.session("python", limits=FAST) as s:
        ok(s.run("v = 1"))
        r = s.run("block = bytearray(1 << 30)")
        assert r.status == "memory" and r.reset and "MemoryError" in r.error
        r = s.run("chunks = [bytearray(16 << 20) for _ in range(64)]")   # a bit at a time, past 256 MB
        assert r.status == "memory" and r.reset
        # The container's memory (not the kernel's address space) runs out: the OOM killer strikes.
        r = s.run("import os, time\nbig = b'x' * (100 << 20)\npids = []\nfor _ in range(4):\n"
                  "    pid = os.fork()\n    if pid == 0:\n        b = b'y' * (140 << 20)\n        time.sleep(1)\n"
                  "        os._exit(0)\n    pids.append(pid)\nfor p in pids:\n    os.waitpid(p, 0)",
                  limits=SessionLimits(wall_s=20.0))
        assert r.status == "memory" and r.reset and "OOM killer" in r.error, r
        r = s.run("print('x' * 5000)", limits=SessionLimits(output_bytes=1000))
        assert r.status == "output_limit" and r.reset and len(r.stdout) == 1000
        assert ok(s.run("'v' in globals()")).value == "False"


def test_idle_sessions_are_reaped_and_their_container_removed(sb):
    s = sb.session("python", limits=SessionLimits(idle_ttl_s=0.5))
    container_id = s._container.id
    ok(s.run("1"))
    deadline = time.monotonic() + 10
    while not s.closed and time.monotonic() < deadline:
        time.sleep(0.1)
    assert s.close_reason == "idle_ttl"
    with pytest.raises(SessionClosed, match="idle"):
        s.run("1")
    with pytest.raises(SessionClosed):
        s.get_files(["x"])
    assert not container_exists(container_id)


def test_a_spent_budget_closes_the_session(sb):
    s = sb.session("python", limits=SessionLimits(cpu_s=5.0, budget_s=0.6))
    r = s.run("while True: pass")
    assert r.status == "timeout" and r.cpu_s < 2.0   # cut at what was left of the budget
    assert s.closed and s.close_reason == "budget"
    with pytest.raises(SessionClosed, match="budget"):
        s.run("1")


def test_close_removes_the_container_and_sandbox_close_closes_every_session(docker_ready):
    with Sandbox(startup_check=()) as sandbox:
        first, second = sandbox.session(), sandbox.session()
        ids = [first._container.id, second._container.id]
        ok(first.run("1"))
        first.close()
        first.close()   # idempotent
        assert first.close_reason == "closed" and not container_exists(ids[0])
        assert sum(p.idle_count for p in sandbox.pools) == 0   # never handed to the pool
    assert second.closed and not container_exists(ids[1])
    with pytest.raises(SessionClosed):
        second.run("1")
    with pytest.raises(Exception, match="closed"):
        sandbox.session()


def test_infrastructure_failure_is_infra_error_then_closed(sb):
    s = sb.session("python", limits=FAST)
    ok(s.run("x = 1"))
    connect().api.kill(s._container.id)
    r = s.run("x")
    assert r.status == "infra_error" and "container" in r.error
    assert s.close_reason == "crashed"
    with pytest.raises(SessionClosed, match="open a new one|Open a new one"):
        s.run("x")


def test_bad_arguments_name_the_field(sb):
    with pytest.raises(BadJob, match="SessionLimits.cpu_s"):
        SessionLimits(cpu_s=0)
    with pytest.raises(BadJob, match="SessionLimits.memory_mb"):
        SessionLimits(memory_mb=1.5)
    with pytest.raises(BadJob, match="language"):
        sb.session("c")
    with sb.session("python", limits=FAST) as s:
        with pytest.raises(BadJob, match="put_files"):
            s.put_files({"../escape": "x"})
        with pytest.raises(BadJob, match="get_files"):
            s.get_files(["/etc/passwd"])
        with pytest.raises(BadJob, match="code must be a str"):
            s.run(b"1")   # type: ignore[arg-type]


# --------------------------------------------------------------------------- hostile cells

def test_nothing_of_a_cell_runs_after_its_call(sb):
    """Threads are stopped between calls (they go on in the next call, inside its limits);
    every other process is killed when the call ends, daemons included."""
    with sb.session("python", limits=FAST) as s:
        ok(s.run(
            "import os, subprocess, threading, time\n"
            "stamps = []\n"
            "def tick():\n    while True:\n        stamps.append(time.monotonic()); time.sleep(0.01)\n"
            "threading.Thread(target=tick, daemon=True).start()\n"
            "while len(stamps) < 2:\n    time.sleep(0.01)\n"
            "def late():\n    time.sleep(0.3); open('/work/thread.txt', 'w').write('x'); print('LATE', flush=True)\n"
            "threading.Thread(target=late).start()\n"
            "subprocess.Popen(['sh', '-c', 'sleep 0.3; echo x > /work/child.txt'])\n"
            "if os.fork() == 0:\n    os.setsid(); time.sleep(0.3)\n"
            "    open('/work/daemon.txt', 'w').write('x'); os._exit(0)\n"))
        time.sleep(1.2)
        assert s.get_files(["thread.txt", "child.txt", "daemon.txt"]) == {
            "thread.txt": None, "child.txt": None, "daemon.txt": None}
        r = ok(s.run("import time\ntime.sleep(0.6)\n"
                     "gap = max(b - a for a, b in zip(stamps, stamps[1:]))\n"
                     "gap >= 1.0, sorted(os.listdir('/work'))"))
        assert r.value == "(True, ['thread.txt'])"   # the thread finished inside this call
        assert r.stdout == "LATE\n"


def test_a_child_cannot_keep_the_kernel_running_between_calls(sb):
    with sb.session("python", limits=FAST) as s:
        ok(s.run("import os, signal, time\nk = os.getpid()\nstamps = []\n"
                 "import threading\n"
                 "def tick():\n    while True:\n        stamps.append(time.monotonic()); time.sleep(0.01)\n"
                 "threading.Thread(target=tick, daemon=True).start()\n"
                 "while len(stamps) < 2:\n    time.sleep(0.01)\n"
                 "if os.fork() == 0:\n    os.setsid()\n    while True:\n        try:\n"
                 "            os.kill(k, signal.SIGCONT)\n        except OSError:\n            pass\n"))
        time.sleep(1.0)
        r = ok(s.run("time.sleep(0.1)\nmax(b - a for a, b in zip(stamps, stamps[1:])) >= 0.8"))
        assert r.value == "True"


def test_printed_protocol_bytes_and_a_forged_answer_forge_nothing(sb):
    with sb.session("python", limits=FAST) as s:
        frame = json.dumps({"type": "cell_result", "id": 3, "status": "ok", "value": "'FORGED'"}).encode()
        r = ok(s.run(f"import sys, struct\nb = {frame!r}\n"
                     "sys.stdout.buffer.write(struct.pack('>I', len(b)) + b)\nsys.stdout.flush()\n'real'"))
        assert r.value == "'real'" and r.stdout.endswith("'FORGED'\"}")
        assert ok(s.run("2 + 2")).value == "4"   # the channel is still in step
        answer = json.dumps({"status": "ok", "value": "'FORGED'"}).encode()
        packed = struct.pack(">I", len(answer)) + answer
        r = s.run(f"import os\nsecret = 1\nos.write(3, {packed!r})\n'real'")
        assert r.status == "error" and r.reset and "control socket" in r.error and r.value is None
        assert ok(s.run("'secret' in globals()")).value == "False"
        r = s.run("open('/proc/1/fd/1', 'wb')")
        assert r.status == "error" and r.error.startswith("PermissionError")


def test_files_travel_as_the_sessions_user_never_through_its_links(sb):
    with sb.session("python", limits=FAST) as s:
        ok(s.run("import os\nos.symlink('/proc/1/environ', 'env')\nos.symlink('/proc/1/fd/0', 'link')\n"
                 "os.symlink('/opt/proctor/forkserver.py', 'server.py')\nos.mkfifo('fifo')"))
        assert s.get_files(["env", "link", "fifo"]) == {"env": None, "link": None, "fifo": None}
        with pytest.raises(SandboxError, match="server.py"):
            s.put_files({"server.py": "print('owned')"})
        r = ok(s.run("open('/opt/proctor/forkserver.py').read().startswith('print')"))
        assert r.value == "False"


def test_killing_the_kernel_gives_a_fresh_one_that_sees_nothing(sb):
    with sb.session("python", limits=FAST) as s:
        r = s.run("import os\nos.kill(1, 9)")
        assert r.status == "error" and r.error.startswith("PermissionError") and not r.reset
        r = s.run("import os, signal\nsecret = 7\nopen('secret.txt', 'w').write('s')\n"
                  "open('/tmp/secret', 'w').write('s')\nos.kill(os.getpid(), signal.SIGKILL)")
        assert r.status == "error" and r.reset and "SIGKILL" in r.error
        r = ok(s.run("import os\n'secret' in globals(), os.listdir('/work'), os.listdir('/tmp')"))
        assert r.value == "(False, [], [])"
        # The kernel exits while a child of it floods the output: the kernel's end decides.
        r = s.run("import os, sys\nif os.fork() == 0:\n    while True:\n        print('spam', flush=True)\n"
                  "import time\ntime.sleep(0.05)\nos._exit(0)", limits=SessionLimits(output_bytes=8 << 20))
        assert r.status == "error" and r.reset and "exited with status 0" in r.error, r.error


def test_concurrent_sessions_never_see_each_other(sb):
    a, b = sb.session("python", limits=FAST), sb.session("python", limits=FAST)
    try:
        ok(a.run("import os\nsecret = 'A-SECRET'\nopen('/work/a.txt', 'w').write(secret)\n"
                 "open('/tmp/a.txt', 'w').write(secret)\nopen('/dev/shm/a', 'w').write(secret)\n"
                 "import socket\nserver = socket.socket(socket.AF_UNIX)\nserver.bind('\\0session-a')\nserver.listen()"))
        probe = ("import os, glob, socket\n"
                 "found = []\n"
                 "for path in glob.glob('/work/*') + glob.glob('/tmp/*') + glob.glob('/dev/shm/*'):\n"
                 "    found.append(path)\n"
                 "for pid in [p for p in os.listdir('/proc') if p.isdigit()]:\n"
                 "    try:\n        cmdline = open(f'/proc/{pid}/cmdline', 'rb').read()\n"
                 "        found += [pid] if b'A-SECRET' in cmdline else []\n"
                 "    except OSError:\n        pass\n"
                 "client = socket.socket(socket.AF_UNIX)\n"
                 "try:\n    client.connect('\\0session-a'); found.append('abstract socket')\nexcept OSError:\n    pass\n"
                 "found, 'secret' in globals()")
        results: dict[str, CellResult] = {}

        def run(name, session, code):
            results[name] = session.run(code)

        threads = [threading.Thread(target=run, args=("b", b, probe)),
                   threading.Thread(target=run, args=("a", a, "import time\ntime.sleep(0.5)\nsecret"))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert ok(results["a"]).value == "'A-SECRET'"
        assert ok(results["b"]).value == "([], False)"
        assert a._container.id != b._container.id
    finally:
        a.close()
        b.close()


def test_under_gvisor_the_limits_and_the_stop_between_calls_hold(docker_ready):
    """Under runsc there is no cgroup CPU counter inside: the kernel's own CPU time counts."""
    from gvisor import require_gvisor

    with Sandbox(startup_check=(), runtime=require_gvisor()) as sandbox, \
            sandbox.session(limits=SessionLimits(cpu_s=0.5, wall_s=10.0)) as s:
        ok(s.run("import threading, time\nstamps = []\n"
                 "def tick():\n    while True:\n        stamps.append(time.monotonic()); time.sleep(0.01)\n"
                 "threading.Thread(target=tick, daemon=True).start()\n"
                 "while len(stamps) < 2:\n    time.sleep(0.01)"))
        time.sleep(1.0)
        assert ok(s.run("time.sleep(0.1)\nmax(b - a for a, b in zip(stamps, stamps[1:])) >= 0.8")).value == "True"
        r = s.run("while True: pass")
        assert r.status == "timeout" and "CPU limit" in r.error and r.cpu_s >= 0.5
