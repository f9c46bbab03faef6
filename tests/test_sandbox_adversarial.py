"""Adversarial programs against the real sandbox (Docker engine, no mocks).

Every hostile job must be contained (the right verdict, never a forged pass, never an
infra_error for something the program did) and a benign job run right after it on the
same sandbox must still pass. Jobs that try to leave something behind run on a
one-container sandbox (``slots=1, spare=0``) and the follow-up probe checks that it
landed in the same container (the container id is read from /proc/self/mountinfo).
"""

from __future__ import annotations

import json
import os
import textwrap
import time

import pytest

from proctor.sandbox import Job, Limits, Result, Sandbox
from proctor.sandbox.engine import connect

pytestmark = pytest.mark.docker

CANARY_NAME = "PROCTOR_SECRET_CANARY"
CANARY_VALUE = "canary-7f3e9b1c-do-not-leak"

# Small limits keep the whole file fast; every job of one language and these limits
# shares one container spec, so follow-up jobs reuse the same warm container.
LIM = Limits(wall_s=3, cpu_s=1, memory_mb=256)

PY_OK = ("def add(a, b):\n    return a + b\n", "assert add(2, 3) == 5\nassert add(-1, 1) == 0\n")
C_OK = ("int add(int a, int b) { return a + b; }\n",
        "#include <assert.h>\nint add(int, int);\nint main(void) { assert(add(2, 3) == 5); return 0; }\n")
CPP_OK = ("int add(int a, int b) { return a + b; }\n",
          "#include <cassert>\nint add(int, int);\nint main() { assert(add(2, 3) == 5); return 0; }\n")
BENIGN = {"python": PY_OK, "c": C_OK, "cpp": CPP_OK}

PROBE = textwrap.dedent(r'''
    import json, os, re
    info = {}
    mounts = open("/proc/self/mountinfo").read()
    info["container"] = sorted(set(re.findall(r"containers/([0-9a-f]{64})/", mounts)))
    me = os.getpid()
    info["me"] = me
    # Leftovers are job processes (uid 1000 programs, uid 1001 judges); root's server
    # processes (PID 1, the mother of Python runs and its idle runners) stay.
    def uid(pid):
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("Uid:"):
                return int(line.split()[1])
    info["parent_uid"] = uid(os.getppid())
    info["others"] = sorted(int(p) for p in os.listdir("/proc")
                            if p.isdigit() and int(p) != me and uid(p) != 0)
    info["dirs"] = {d: sorted(os.listdir(d)) for d in ("/work", "/tmp", "/dev/shm", "/dev/mqueue")
                    if os.path.isdir(d)}
    sysv = {}
    for kind in ("shm", "msg", "sem"):
        try:
            sysv[kind] = len(open("/proc/sysvipc/" + kind).read().splitlines()) - 1
        except OSError:
            sysv[kind] = 0
    info["sysv"] = sysv
    print(json.dumps(info))
''')


def job(language: str, code: str, tests: str | None = None, limits: Limits = LIM, **kw) -> Job:
    return Job(language=language, code=code, tests=tests, limits=limits, **kw)


def py(code: str, tests: str | None = None, limits: Limits = LIM, **kw) -> Job:
    return job("python", textwrap.dedent(code), textwrap.dedent(tests) if tests else None, limits, **kw)


def explain(r: Result) -> str:
    return (f"status={r.status} exit={r.exit_code} wall={r.wall_s:.2f} cpu={r.cpu_s:.2f} "
            f"attempts={r.attempts}\nstdout={r.stdout[-600:]!r}\nstderr={r.stderr[-1500:]!r}\n"
            f"error={r.error[-2500:]}")


def assert_benign_passes(sb: Sandbox, language: str = "python", limits: Limits = LIM) -> None:
    code, tests = BENIGN[language]
    r = sb.run(job(language, code, tests, limits))
    assert r.status == "passed", "benign job after an adversarial one: " + explain(r)
    assert r.attempts == 1, "benign job needed a retry: " + explain(r)


def run_contained(sb: Sandbox, j: Job) -> Result:
    """Run a hostile job, then check a benign one of the same language and limits passes."""
    r = sb.run(j)
    assert r.status != "infra_error", "a program's behaviour must never become an infra_error: " + explain(r)
    assert r.status != "passed", "a hostile job passed: " + explain(r)
    assert_benign_passes(sb, j.language, j.effective_limits)
    return r


def probe(sb: Sandbox) -> dict:
    r = sb.run(py(PROBE))
    assert r.status == "passed", explain(r)
    return json.loads(r.stdout.strip().splitlines()[-1])


def assert_clean(info: dict) -> None:
    assert info["others"] == [], f"processes left from an earlier job: {info['others']}"
    assert info["parent_uid"] == 0, "a Python program runs in a process of its own, a child of the server's mother"
    assert info["dirs"].get("/work") == ["main.py"], f"/work not empty: {info['dirs'].get('/work')}"
    for d in ("/tmp", "/dev/shm", "/dev/mqueue"):
        assert info["dirs"].get(d, []) == [], f"{d} not empty: {info['dirs'][d]}"
    assert info["sysv"] == {"shm": 0, "msg": 0, "sem": 0}, f"SysV IPC objects left: {info['sysv']}"


# ------------------------------------------------------------------ fixtures

@pytest.fixture(scope="module")
def engine(docker_ready):
    # docker_ready (conftest) fails with the fix, or skips under PROCTOR_SKIP_DOCKER=1.
    return connect()


@pytest.fixture(scope="module")
def canary():
    old = os.environ.get(CANARY_NAME)
    os.environ[CANARY_NAME] = CANARY_VALUE
    yield CANARY_VALUE
    if old is None:
        os.environ.pop(CANARY_NAME, None)
    else:
        os.environ[CANARY_NAME] = old


@pytest.fixture(scope="module")
def sb(engine, canary):
    # The canary is in this process's environment before the sandbox exists.
    with Sandbox(auto_build=True) as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def solo(engine, canary):
    """One container only: the job after a hostile one runs in the container it used."""
    with Sandbox(slots=1, spare=0, auto_build=True) as sandbox:
        yield sandbox


@pytest.fixture
def same_container(solo):
    """Check that the next job sees a clean container: the same one the hostile job used."""
    before = probe(solo)
    assert_clean(before)

    def check() -> dict:
        after = probe(solo)
        assert after["container"] == before["container"], \
            "the follow-up probe ran in another container: the check says nothing about cleanup"
        assert_clean(after)
        assert_benign_passes(solo)
        return after

    return check


# ------------------------------------------------------------------ resource attacks

def test_fork_bomb_is_contained(sb):
    r = run_contained(sb, py("""
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """))
    assert r.status in ("timeout", "memory"), explain(r)
    assert r.wall_s < LIM.wall_s + 2, explain(r)


def test_memory_bomb_is_memory(sb):
    r = run_contained(sb, py("""
        chunks = []
        while True:
            chunks.append(b"\\x01" * (50 << 20))
    """))
    assert r.status == "memory", explain(r)


def test_memory_bomb_across_processes_is_memory(sb):
    # Each process stays under its own address-space limit; together they exceed the
    # container's memory: the cgroup OOM killer must take the job, never the server.
    r = run_contained(sb, py("""
        import subprocess, sys
        child = "import time\\nx = [b'\\\\x01' * (20 << 20) for _ in range(10)]\\ntime.sleep(0.5)\\n"
        procs = [subprocess.Popen([sys.executable, "-c", child]) for _ in range(4)]
        codes = [p.wait() for p in procs]
        print(codes)
    """, limits=Limits(wall_s=10, cpu_s=5, memory_mb=256)))
    # Generous CPU/wall limits: on a loaded machine four interpreter starts can use up a
    # 1 s CPU budget before memory runs out, and the verdict would be timeout.
    assert r.status == "memory", explain(r)


OOM_DECOY_C = textwrap.dedent(r"""
    #include <fcntl.h>
    #include <stdio.h>
    #include <stdlib.h>
    #include <string.h>
    #include <sys/wait.h>
    #include <unistd.h>
    static void fill(const char *path, long mb) {
        static char buf[1 << 20];
        int fd = open(path, O_CREAT | O_WRONLY, 0600);
        memset(buf, 7, sizeof buf);
        for (long i = 0; fd >= 0 && i < mb; i++) if (write(fd, buf, sizeof buf) <= 0) break;
        if (fd >= 0) close(fd);
    }
    int f(void) {
        /* Undo the server's oom_score_adj=1000: back to the server's own 0. */
        FILE *adj = fopen("/proc/self/oom_score_adj", "w");
        if (adj) { fprintf(adj, "0"); fclose(adj); }
        /* tmpfs pages count against the container but belong to no process ... */
        fill("/work/fill", 60); fill("/tmp/fill", 14); fill("/dev/shm/fill", 3);
        /* ... and many processes, each smaller than the server, make it the biggest one. The
           container holds the compilers' budget (512 MiB for C): 58 x 14 MiB is past it. */
        for (int i = 0; i < 58; i++) {
            if (fork() == 0) {
                for (int k = 0; k < 14; k++) { char *p = malloc(1 << 20); if (!p) break; memset(p, 1, 1 << 20); }
                sleep(1);
                _exit(0);
            }
        }
        while (wait(NULL) > 0) {}
        return 1;
    }
""")


def test_oom_killer_takes_the_job_not_the_server(sb):
    """A job that lowers its oom_score_adj and spreads its memory over small processes and
    tmpfs files must still be the one the cgroup OOM killer picks."""
    # CPU to spare: near the cgroup limit the kernel reclaims before it kills, and on a loaded
    # machine 2 s of CPU ran out first (a timeout that proves nothing about the OOM killer).
    r = run_contained(sb, job("c", OOM_DECOY_C, C_TESTS, Limits(wall_s=15, cpu_s=8, memory_mb=256)))
    assert r.attempts == 1, "the server died (the container stopped) and the job was retried: " + explain(r)
    assert r.status == "memory", explain(r)


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_output_flood_is_capped(sb, stream):
    cap = 1 << 16
    r = run_contained(sb, py(f"""
        import sys
        chunk = "x" * (1 << 20) + "\\n"
        for _ in range(100):   # 100 MB
            sys.{stream}.write(chunk)
    """, limits=Limits(wall_s=3, cpu_s=1, memory_mb=256, output_bytes=cap)))
    assert r.status == "output_limit", explain(r)
    assert r.truncated
    assert len(r.stdout.encode()) <= cap and len(r.stderr.encode()) <= cap
    assert r.wall_s < LIM.wall_s, explain(r)


def test_output_flood_of_multibyte_characters_is_capped_in_bytes(sb):
    """The cut falls inside a 3-byte character: the text must not grow past the cap."""
    cap = 1 << 16   # not a multiple of 3
    r = run_contained(sb, py("""
        import sys
        for _ in range(100):
            sys.stdout.write("\\u20ac" * (1 << 18))
    """, limits=Limits(wall_s=3, cpu_s=1, memory_mb=256, output_bytes=cap)))
    assert r.status == "output_limit", explain(r)
    size, tail = len(r.stdout.encode()), r.stdout[-3:]
    assert size <= cap, f"{size} bytes of stdout > cap {cap}; it ends {tail!r}"
    assert "\ufffd" not in tail, f"a character cut in half came back as garbage: ends {tail!r}"


def test_cpu_loop_ignoring_sigterm_times_out_on_cpu(sb):
    limits = Limits(wall_s=8, cpu_s=1, memory_mb=256)
    r = run_contained(sb, py("""
        import signal
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGXCPU, signal.SIG_IGN)
        while True:
            pass
    """, limits=limits))
    assert r.status == "timeout", explain(r)
    # Cut by the CPU limit, long before the wall limit.
    assert r.wall_s < 4.5, explain(r)


def test_sleep_times_out_on_wall_clock(sb):
    r = run_contained(sb, py("import time\ntime.sleep(100)\n"))
    assert r.status == "timeout", explain(r)
    assert LIM.wall_s - 0.1 <= r.wall_s < LIM.wall_s + 2, explain(r)
    assert r.cpu_s < LIM.cpu_s, explain(r)


def test_cpu_split_over_processes_times_out(sb):
    r = run_contained(sb, py("""
        import os
        for _ in range(3):
            if os.fork() == 0:
                break
        while True:
            pass
    """, limits=Limits(wall_s=8, cpu_s=1, memory_mb=256)))
    assert r.status == "timeout", explain(r)
    assert r.wall_s < 5, explain(r)


# ------------------------------------------------------------------ network

def test_no_network_only_loopback(sb):
    r = sb.run(py("""
        import socket
        names = sorted(name for _, name in socket.if_nameindex())
        assert names == ["lo"], names
        dev = [line.split(":")[0].strip() for line in open("/proc/net/dev").read().splitlines()[2:]]
        assert dev == ["lo"], dev
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.settimeout(2)
        try:
            s.connect(("1.1.1.1", 53))
        except OSError as exc:
            print("tcp blocked:", exc)
        else:
            raise AssertionError("connected to 1.1.1.1:53")
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            u.sendto(b"\\0" * 12, ("1.1.1.1", 53))
        except OSError as exc:
            print("udp blocked:", exc)
        else:
            u.settimeout(1)
            try:
                u.recvfrom(512)
            except OSError:
                print("udp sent, nothing came back")
            else:
                raise AssertionError("got a DNS answer from 1.1.1.1")
        for host in ("example.com", "pypi.org"):
            try:
                socket.getaddrinfo(host, 443)
            except OSError as exc:
                print("dns blocked:", exc)
            else:
                raise AssertionError(f"resolved {host}")
        print("OK")
    """))
    assert r.status == "passed", explain(r)
    assert "OK" in r.stdout
    assert_benign_passes(sb)


# ------------------------------------------------------------------ the filesystem and the host

def test_writes_outside_the_work_dir_fail(sb):
    r = sb.run(py("""
        import os
        wrote = []
        for path in ("/usr/x", "/etc/x", "/x", "/opt/proctor/forkserver.py", "/opt/proctor/x",
                     "/etc/passwd", "/usr/bin/python3", "/var/tmp/x", "/home/x"):
            try:
                with open(path, "a") as f:
                    f.write("pwned")
                wrote.append(path)
            except OSError:
                pass
        for path in ("/opt/proctor/forkserver.py", "/opt/proctor"):
            try:
                os.chmod(path, 0o777)
                wrote.append("chmod " + path)
            except OSError:
                pass
        try:
            os.rename("/opt/proctor/forkserver.py", "/work/stolen.py")
            wrote.append("rename forkserver.py")
        except OSError:
            pass
        assert not wrote, wrote
        open("/work/ok.txt", "w").write("fine")
        open("ok2.txt", "w").write("fine")
        open("/tmp/ok.txt", "w").write("fine")
        print("OK")
    """))
    assert r.status == "passed", explain(r)
    assert_benign_passes(sb)


def test_host_environment_is_not_visible(sb, canary):
    assert os.environ[CANARY_NAME] == canary
    r = sb.run(py(f"""
        import os
        env = dict(os.environ)
        print(sorted(env))
        blob = repr(env)
        for path in ("/proc/self/environ", "/proc/1/environ", "/proc/1/cmdline"):
            try:
                blob += open(path, "rb").read().decode(errors="replace")
            except OSError:
                pass
        assert "{CANARY_NAME}" not in blob and "{canary}" not in blob, "the canary leaked"
        unexpected = set(env) - {{"PATH", "HOME", "LANG", "LC_ALL", "PYTHONDONTWRITEBYTECODE",
                                  "PYTHONIOENCODING", "PWD", "HOSTNAME", "TERM", "TMPDIR"}}
        assert not unexpected, unexpected
        for sock in ("/var/run/docker.sock", "/run/docker.sock", "/var/run/docker", "/run/containerd"):
            assert not os.path.exists(sock), sock
        print("OK")
    """))
    assert r.status == "passed", explain(r)
    assert CANARY_NAME not in r.stdout
    # A C program reads the environment through environ: the same.
    r = sb.run(job("c", textwrap.dedent(f"""
        #include <stdio.h>
        #include <string.h>
        #include <unistd.h>
        extern char **environ;
        int leaked(void) {{
            for (char **e = environ; *e; e++) {{
                if (strstr(*e, "{CANARY_NAME}") || strstr(*e, "{canary}")) return 1;
            }}
            return access("/var/run/docker.sock", F_OK) == 0;
        }}
    """), "#include <assert.h>\nint leaked(void);\nint main(void) { assert(!leaked()); return 0; }\n"))
    assert r.status == "passed", explain(r)
    assert_benign_passes(sb)


# ------------------------------------------------------------------ nothing survives into the next job

def test_files_do_not_survive(solo, same_container):
    r = solo.run(py("""
        import os
        for path in ("left-in-cwd.txt", "/work/left-in-work.txt", "/work/.hidden", "/tmp/left-in-tmp.txt",
                     "/dev/shm/left-in-shm", "/tmp/.X11-unix-fake"):
            with open(path, "w") as f:
                f.write("secret answer")
        os.makedirs("/work/a/b/c")
        open("/work/a/b/c/deep.txt", "w").write("x")
        os.makedirs("/work/locked/inner")
        open("/work/locked/inner/f", "w").write("x")
        os.chmod("/work/locked/inner", 0)
        os.chmod("/work/locked", 0)
        os.makedirs("/tmp/ro")
        open("/tmp/ro/f", "w").write("x")
        os.chmod("/tmp/ro", 0o500)
        os.mkfifo("/tmp/fifo")
        print("written")
    """))
    assert r.status == "passed", explain(r)
    info = same_container()
    assert "left-in-cwd.txt" not in info["dirs"]["/work"]


def test_background_process_new_session_does_not_survive(solo, same_container):
    r = solo.run(py("""
        import subprocess
        p = subprocess.Popen(["sleep", "1000"], start_new_session=True)
        print("started", p.pid)
    """))
    assert r.status == "passed", explain(r)
    assert r.wall_s < LIM.wall_s, explain(r)
    same_container()


def test_double_fork_daemon_does_not_survive(solo, same_container):
    r = solo.run(py("""
        import os, signal, time
        pid = os.fork()
        if pid == 0:
            os.setsid()
            if os.fork() == 0:
                for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
                    signal.signal(sig, signal.SIG_IGN)
                null = os.open("/dev/null", os.O_RDWR)
                for fd in range(0, 5):
                    os.dup2(null, fd)
                while True:   # keeps re-creating its trace: visible if it survived
                    for path in ("/work/daemon-was-here", "/tmp/daemon-was-here"):
                        try:
                            open(path, "a").close()
                        except OSError:
                            pass
                    time.sleep(0.01)
            os._exit(0)
        os.waitpid(pid, 0)
        deadline = time.time() + 2
        while not os.path.exists("/tmp/daemon-was-here") and time.time() < deadline:
            time.sleep(0.01)
        print("daemon up", os.path.exists("/tmp/daemon-was-here"))
    """))
    assert r.status == "passed", explain(r)
    assert "daemon up True" in r.stdout, explain(r)
    assert r.wall_s < LIM.wall_s, explain(r)
    same_container()


@pytest.mark.parametrize("hold_output", [True, False], ids=["holds-stdout", "detached"])
def test_child_ignoring_sigterm_outliving_parent_does_not_survive(solo, same_container, hold_output):
    out = "None" if hold_output else "subprocess.DEVNULL"
    r = solo.run(py(f"""
        import os, subprocess, sys, time
        child = (
            "import signal, time\\n"
            "for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT): signal.signal(s, signal.SIG_IGN)\\n"
            "while True:\\n"
            "    open('/tmp/child-alive', 'a').close()\\n"
            "    time.sleep(0.01)\\n"
        )
        subprocess.Popen([sys.executable, "-c", child], stdout={out}, stderr={out})
        deadline = time.time() + 2
        while not os.path.exists("/tmp/child-alive") and time.time() < deadline:
            time.sleep(0.01)
        print("child up", os.path.exists("/tmp/child-alive"))
    """, tests="assert 1 + 1 == 2\n"))
    assert r.status == "passed", explain(r)
    assert "child up True" in r.stdout, explain(r)
    assert r.wall_s < LIM.wall_s, explain(r)
    same_container()


def test_sysv_ipc_objects_do_not_survive(solo):
    # C, since Python jobs get no ctypes in the sandbox.
    r = solo.run(job("c", textwrap.dedent("""
        #include <fcntl.h>
        #include <mqueue.h>
        #include <stdio.h>
        #include <sys/ipc.h>
        #include <sys/msg.h>
        #include <sys/sem.h>
        #include <sys/shm.h>
        int main(void) {
            printf("shm %d\\n", shmget(0x5eed, 4096, IPC_CREAT | 0600));
            printf("msg %d\\n", msgget(0x5eed, IPC_CREAT | 0600));
            printf("sem %d\\n", semget(0x5eed, 1, IPC_CREAT | 0600));
            printf("mq %d\\n", (int)mq_open("/left-queue", O_CREAT | O_RDWR, 0600, NULL));
            return 0;
        }
    """)))
    assert r.status == "passed", explain(r)
    # SysV objects can be made (and are cleaned up); POSIX queues are refused (below).
    assert "shm -1" not in r.stdout and "mq -1" in r.stdout, explain(r)
    # The container may be replaced (the server reports what it cannot scrub): either way
    # the next job must not see them.
    assert_clean(probe(solo))
    r = solo.run(job("c", IPC_LOOKUP))
    assert r.status == "passed" and r.stdout.split() == ["shm", "-1", "msg", "-1", "sem", "-1", "mq", "-1"], \
        "IPC objects of an earlier job are visible: " + explain(r)
    assert_benign_passes(solo)


# Looks the objects above up by key and name, as a later job would: -1 = not there.
IPC_LOOKUP = textwrap.dedent("""
    #include <fcntl.h>
    #include <mqueue.h>
    #include <stdio.h>
    #include <sys/ipc.h>
    #include <sys/msg.h>
    #include <sys/sem.h>
    #include <sys/shm.h>
    int main(void) {
        printf("shm %d msg %d sem %d mq %d\\n", shmget(0x5eed, 0, 0), msgget(0x5eed, 0), semget(0x5eed, 0, 0),
               (int)mq_open("/left-queue", O_RDWR));
        return 0;
    }
""")


# mq_open through every entry a 64-bit x86 process has: libc, the raw syscall, x32, and
# int 0x80 (i386 numbering, the name mapped below 4 GiB so that the call could succeed).
MQ_EVERY_ABI = textwrap.dedent("""
    #define _GNU_SOURCE
    #include <errno.h>
    #include <fcntl.h>
    #include <mqueue.h>
    #include <stdio.h>
    #include <string.h>
    #include <sys/mman.h>
    #include <sys/syscall.h>
    #include <unistd.h>
    int main(void) {
        errno = 0;
        long r = (long)mq_open("/q-libc", O_CREAT | O_RDWR, 0600, NULL);
        printf("libc %ld %d\\n", r, errno);
        errno = 0;
        r = syscall(SYS_mq_open, "q-raw", O_CREAT | O_RDWR, 0600, NULL);
        printf("raw %ld %d\\n", r, errno);
        errno = 0;
        r = syscall(0x40000000 | SYS_mq_open, "q-x32", O_CREAT | O_RDWR, 0600, NULL);
        printf("x32 %ld %d\\n", r, errno);
        char *low = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT, -1, 0);
        strcpy(low, "q-i386");
        long ret;
        __asm__ volatile("int $0x80" : "=a"(ret) : "a"(277), "b"(low), "c"(O_CREAT | O_RDWR), "d"(0600), "S"(0)
                         : "memory");
        printf("i386 %ld\\n", ret);
        return 0;
    }
""")


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the program enters the kernel the x86-64 ways")
def test_posix_message_queues_are_refused_through_every_abi(solo):
    # A POSIX queue outlives its creator, and gVisor mounts no /dev/mqueue to empty: jobs
    # get none at all. EPERM where the filter answers; the i386 entry may answer EINVAL
    # (gVisor has no 32-bit syscalls), x32 ENOSYS (kernels without x32): never a queue.
    r = solo.run(job("c", MQ_EVERY_ABI))
    assert r.status == "passed", explain(r)
    got = {line.split()[0]: line.split()[1:] for line in r.stdout.splitlines()}
    assert got["libc"] == ["-1", "1"] and got["raw"] == ["-1", "1"], explain(r)
    assert got["x32"][0] == "-1" and got["x32"][1] in ("1", "38"), explain(r)
    assert int(got["i386"][0]) in (-1, -22), explain(r)
    r = solo.run(job("c", IPC_LOOKUP))
    assert r.status == "passed" and r.stdout.split()[-2:] == ["mq", "-1"], explain(r)
    assert_benign_passes(solo)


@pytest.mark.parametrize("kind", ["symlink-to-dir", "deep-tree"])
def test_scrub_resistant_trees_do_not_break_the_sandbox(solo, kind):
    """Leftovers built to trip up the scrub: the job still gets a verdict, the next job a clean place."""
    code = {
        "symlink-to-dir": """
            import os
            os.symlink("/opt", "/work/link-to-opt")
            os.symlink("/usr", "/tmp/link-to-usr")
            print("made")
        """,
        "deep-tree": """
            import os
            os.chdir("/work")
            for _ in range(1500):
                os.mkdir("d")
                os.chdir("d")
            print("made")
        """,
    }[kind]
    r = solo.run(py(code))
    assert r.status == "passed", explain(r)
    assert_clean(probe(solo))
    assert_benign_passes(solo)


# ------------------------------------------------------------------ signals against the server

@pytest.mark.parametrize("target", [-1, 1], ids=["kill-all", "kill-pid-1"])
def test_sigkill_from_the_job_does_not_kill_the_server(solo, same_container, target):
    r = solo.run(py(f"""
        import os, signal, time
        print("before", flush=True)
        try:
            os.kill({target}, signal.SIGKILL)
        except OSError as exc:
            print("refused:", exc)
        time.sleep(0.2)
        print("after")
    """))
    assert r.status != "infra_error", explain(r)
    if target == 1:
        assert r.status == "passed" and "after" in r.stdout, explain(r)   # PID 1 cannot be killed from inside
    else:
        assert r.status in ("runtime_error", "passed", "failed"), explain(r)
    same_container()


def test_jobs_run_under_their_own_uid_and_own_their_files(solo):
    # The server is root (it sweeps and scrubs), every job process uid 1000 without groups:
    # the job's input files, its work dir and /tmp are its own to write, PID 1 is not its own.
    r = solo.run(py("""
        import os
        st = os.stat("data/in.txt")
        print("ids", os.getresuid(), os.getresgid(), os.getgroups())
        print("file", st.st_uid, st.st_gid, os.stat("data").st_uid)
        with open("data/in.txt", "a") as f:
            f.write(" more")
        os.mkdir("/work/sub")
        with open("/tmp/scratch", "w") as f:
            f.write("1")
        print("read", open("data/in.txt").read())
        print("pid1", open("/proc/1/status").read().split("Uid:")[1].split()[0])
    """, files={"data/in.txt": "hello"}))
    assert r.status == "passed", explain(r)
    assert "ids (1000, 1000, 1000) (1000, 1000, 1000) []" in r.stdout, explain(r)
    assert "file 1000 1000 1000" in r.stdout and "read hello more" in r.stdout, explain(r)
    assert "pid1 0" in r.stdout, explain(r)
    assert_clean(probe(solo))


@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGSTOP", "SIGTSTP",
                                 "SIGALRM", "SIGPIPE", "SIGXCPU"])
def test_signals_to_pid_1_do_not_disturb_the_server(solo, same_container, sig):
    r = solo.run(py(f"""
        import os, signal, time
        try:
            os.kill(1, signal.{sig})
        except OSError as exc:
            print("refused:", exc)
        time.sleep(0.3)
        print("after")
    """, tests="assert 2 + 2 == 4\n"))
    assert r.status == "passed", explain(r)
    same_container()


# ------------------------------------------------------------------ forged passes: Python

PY_FORGED = {
    "sys.exit(0)": ("import sys\ndef f():\n    return 1\nsys.exit(0)\n", "assert f() == 2\n"),
    "os._exit(0)": ("import os\ndef f():\n    return 1\nos._exit(0)\n", "assert f() == 2\n"),
    "atexit os._exit": ("import atexit, os\natexit.register(lambda: os._exit(0))\ndef f():\n    return 1\n",
                        "assert f() == 2\n"),
    "SystemExit from the program's function": ("def f():\n    raise SystemExit(0)\n",
                                                "def test_f():\n    assert f() == 2\ntest_f()\n"),
    "exit in function": ("import sys\ndef f():\n    sys.exit(0)\n", "assert f() == 2\n"),
    "thread os._exit": ("import os, threading, time\n"
                        "threading.Thread(target=lambda: os._exit(0), daemon=True).start()\n"
                        "time.sleep(0.2)\ndef f():\n    return 1\n", "assert f() == 2\n"),
    "excepthook exit 0": ("import os, sys\nsys.excepthook = lambda *a: os._exit(0)\n"
                          "def f():\n    return 1\n", "assert f() == 2\n"),
    "kill self": ("import os, signal\ndef f():\n    os.kill(os.getpid(), signal.SIGKILL)\n", "assert f() == 2\n"),
    # Reaching into the runner that executes the module: call its own "finished" path.
    "runner frame finish": (textwrap.dedent("""
        import sys
        def f():
            frame = sys._getframe()
            while frame is not None:
                if "finish" in frame.f_locals and callable(frame.f_locals["finish"]):
                    frame.f_locals["finish"](0, True)
                frame = frame.f_back
            return 1
    """), "assert f() == 2\n"),
    "runner frame marker": (textwrap.dedent("""
        import os, re, sys
        def f():
            frame = sys._getframe()
            while frame is not None:
                for value in list(frame.f_locals.values()):
                    if isinstance(value, bytes):
                        value = value.decode("latin-1")
                    if isinstance(value, str) and re.fullmatch("[0-9a-f]{32}", value):
                        os.write(3, value.encode())
                        os._exit(0)
                frame = frame.f_back
            return 1
    """), "assert f() == 2\n"),
    "gc closure marker": (textwrap.dedent("""
        import gc, os, re, types
        def f():
            for obj in gc.get_objects():
                if isinstance(obj, types.FunctionType) and obj.__closure__:
                    for cell in obj.__closure__:
                        try:
                            value = cell.cell_contents
                        except ValueError:
                            continue
                        if isinstance(value, bytes):
                            value = value.decode("latin-1")
                        if isinstance(value, str) and re.fullmatch("[0-9a-f]{32}", value):
                            os.write(3, value.encode())
                            os._exit(0)
            return 1
    """), "assert f() == 2\n"),
}


@pytest.mark.parametrize("name", list(PY_FORGED))
def test_python_forged_pass_never_passes(sb, name):
    code, tests = PY_FORGED[name]
    r = run_contained(sb, job("python", code, tests))
    assert r.status in ("failed", "runtime_error"), explain(r)


# ------------------------------------------------------------------ forged passes: C and C++

C_TESTS = "#include <assert.h>\nint f(void);\nint main(void) { assert(f() == 2); return 0; }\n"
CPP_TESTS = "#include <cassert>\nint f();\nint main() { assert(f() == 2); return 0; }\n"

C_FORGED = {
    "c exit(0) in main": ("c", "int f(void) { return 1; }\n",
                          "#include <assert.h>\n#include <stdlib.h>\nint f(void);\n"
                          "int main(void) { exit(0); assert(f() == 2); return 0; }\n"),
    "c exit(0) in code": ("c", "#include <stdlib.h>\nint f(void) { exit(0); return 1; }\n", C_TESTS),
    "c _exit(0)": ("c", "#include <unistd.h>\nint f(void) { _exit(0); return 1; }\n", C_TESTS),
    "c _Exit(0)": ("c", "#include <stdlib.h>\nint f(void) { _Exit(0); return 1; }\n", C_TESTS),
    "c quick_exit(0)": ("c", "#include <stdlib.h>\nint f(void) { quick_exit(0); return 1; }\n", C_TESTS),
    "c atexit _exit": ("c", "#include <stdlib.h>\n#include <unistd.h>\nstatic void bye(void) { _exit(0); }\n"
                            "int f(void) { atexit(bye); return 1; }\n", C_TESTS),
    "cpp std::exit(0)": ("cpp", "int f() { return 1; }\n",
                         "#include <cassert>\n#include <cstdlib>\nint f();\n"
                         "int main() { std::exit(0); assert(f() == 2); }\n"),
    "cpp std::exit in code": ("cpp", "#include <cstdlib>\nint f() { std::exit(0); return 1; }\n", CPP_TESTS),
    "cpp terminate handler exit": ("cpp", "#include <cstdlib>\n#include <exception>\n"
                                          "int f() { std::set_terminate([]{ std::exit(0); }); throw 1; }\n",
                                   CPP_TESTS),
    # The real exit() behind a wrapped exit (the guard wraps main now: exit() never marks).
    "c __real_exit": ("c", "void __real_exit(int);\nint f(void) { __real_exit(0); return 1; }\n", C_TESTS),
    "cpp __real_exit": ("cpp", "extern \"C\" void __real_exit(int);\nint f() { __real_exit(0); return 1; }\n",
                        CPP_TESTS),
    "c dlsym exit": ("c", "#define _GNU_SOURCE\n#include <dlfcn.h>\n"
                          "int f(void) { void (*e)(int) = (void (*)(int))dlsym(RTLD_NEXT, \"exit\"); e(0); return 1; }\n",
                     C_TESTS),
    # Read the nonce before the guard does, write it back as the marker, leave.
    "c constructor steals nonce": ("c", "#include <unistd.h>\nstatic char buf[256];\nstatic ssize_t n;\n"
                                        "__attribute__((constructor(101))) static void steal(void) "
                                        "{ n = read(4, buf, sizeof buf); }\n"
                                        "int f(void) { if (n > 0) write(3, buf, (size_t)n); _exit(0); return 1; }\n",
                                   C_TESTS),
    "c early constructor steals nonce": ("c", "#include <unistd.h>\nstatic char buf[256];\nstatic ssize_t n;\n"
                                              "__attribute__((constructor(1))) static void steal(void) "
                                              "{ n = read(4, buf, sizeof buf); }\n"
                                              "int f(void) { if (n > 0) write(3, buf, (size_t)n); _exit(0); return 1; }\n",
                                         C_TESTS),
}


@pytest.mark.parametrize("name", list(C_FORGED))
def test_c_forged_pass_never_passes(sb, name):
    language, code, tests = C_FORGED[name]
    r = run_contained(sb, job(language, code, tests))
    assert r.status in ("failed", "runtime_error", "compile_error"), explain(r)


def test_c_main_returning_0_passes(sb):
    r = sb.run(job("c", "int f(void) { return 2; }\n", C_TESTS))
    assert r.status == "passed", explain(r)


def test_cpp_main_without_return_passes(sb):
    r = sb.run(job("cpp", "#include <vector>\nint f() { std::vector<int> v{1, 1}; return v[0] + v[1]; }\n",
                   "#include <cassert>\nint f();\nint main() { assert(f() == 2); }\n"))
    assert r.status == "passed", explain(r)


# ------------------------------------------------------------------ every status, for real

ECHO_PY = "import sys\nprint(int(sys.stdin.read()) * 2)\n"
ECHO_C = "#include <stdio.h>\nint main(void) { int x; if (scanf(\"%d\", &x) != 1) return 1; printf(\"%d\\n\", x * 2); return 0; }\n"
STATUS_CASES = {
    # python
    "py passed": (py(*PY_OK), "passed"),
    "py failed assert": (py("def add(a, b):\n    return a - b\n", PY_OK[1]), "failed"),
    "py failed cases": (py(ECHO_PY.replace("* 2", "* 3"), cases=[("2", "4\n"), ("5", "10")]), "failed"),
    "py passed cases": (py(ECHO_PY, cases=[("2", "4\n"), ("5", "10")]), "passed"),
    "py compile_error": (py("def add(a, b)\n    return a + b\n", PY_OK[1]), "compile_error"),
    "py runtime_error": (py("def add(a, b):\n    return a / 0\n", PY_OK[1]), "runtime_error"),
    "py timeout": (py("while True:\n    pass\n"), "timeout"),
    "py memory": (py("x = bytearray(1 << 40)\n"), "memory"),
    "py output_limit": (py("while True:\n    print('y' * 1000)\n"), "output_limit"),
    # C
    "c passed": (job("c", *C_OK), "passed"),
    "c failed assert": (job("c", "int add(int a, int b) { return a - b; }\n", C_OK[1]), "failed"),
    "c failed cases": (job("c", ECHO_C.replace("x * 2", "x * 3"), cases=[("2", "4\n"), ("5", "10")]), "failed"),
    "c passed cases": (job("c", ECHO_C, cases=[("2", "4\n"), ("5", "10")]), "passed"),
    "c compile_error": (job("c", "int add(int a, int b) { return a + b }\n", C_OK[1]), "compile_error"),
    "c runtime_error segfault": (job("c", "int add(int a, int b) { volatile int *p = 0; *p = a; return a + b; }\n",
                                     C_OK[1]), "runtime_error"),
    "c timeout": (job("c", "int add(int a, int b) { volatile int x = 0; for (;;) x++; return a + b; }\n",
                      C_OK[1]), "timeout"),
    "c output_limit": (job("c", "#include <stdio.h>\nint add(int a, int b) { for (;;) puts(\"spam spam spam\"); }\n",
                           C_OK[1]), "output_limit"),
    # C++
    "cpp passed": (job("cpp", *CPP_OK), "passed"),
    "cpp failed assert": (job("cpp", "int add(int a, int b) { return a * b; }\n", CPP_OK[1]), "failed"),
    "cpp compile_error": (job("cpp", "int add(int a, int b) { return a + b; } }\n", CPP_OK[1]), "compile_error"),
    "cpp runtime_error throw": (job("cpp", "#include <stdexcept>\nint add(int, int) { throw std::runtime_error(\"no\"); }\n",
                                    CPP_OK[1]), "runtime_error"),
    "cpp memory new 2GB loop": (job("cpp", "#include <cstring>\nint add(int a, int b) {\n"
                                           "  for (;;) { char *p = new char[2UL << 30]; std::memset(p, 1, 2UL << 30); }\n"
                                           "  return a + b;\n}\n", CPP_OK[1]), "memory"),
    # 50 MiB blocks are mmap-ed: gVisor does not hold them to RLIMIT_DATA (RLIMIT_AS does there).
    "cpp memory new 50MB loop": (job("cpp", "#include <cstring>\nint add(int a, int b) {\n"
                                            "  for (;;) { char *p = new char[50UL << 20]; std::memset(p, 1, 50UL << 20); }\n"
                                            "  return a + b;\n}\n", CPP_OK[1]), "memory"),
    "cpp timeout": (job("cpp", "int add(int a, int b) { volatile long x = 0; for (;;) x++; return a + b; }\n",
                        CPP_OK[1]), "timeout"),
    "cpp output_limit": (job("cpp", "#include <iostream>\nint add(int a, int b) { for (;;) std::cout << \"spam\\n\"; }\n",
                             CPP_OK[1]), "output_limit"),
}


@pytest.mark.parametrize("name", list(STATUS_CASES))
def test_each_status_for_real(sb, name):
    j, expected = STATUS_CASES[name]
    r = sb.run(j)
    assert r.status == expected, explain(r)
    assert r.passed == (expected == "passed")
    if j.cases:
        assert len(r.cases) == len(j.cases)
    assert_benign_passes(sb, j.language, j.effective_limits)


# ------------------------------------------------------------------ concurrency

def test_run_many_results_in_job_order(sb):
    jobs, expected = [], []
    for i in range(30):
        fail = i % 4 == 1
        kind = i % 3
        if kind == 0:
            jobs.append(py(f"print({i})\ndef f():\n    return {i if not fail else -1}\n", f"assert f() == {i}\n"))
        elif kind == 1:
            jobs.append(job("c", f"#include <stdio.h>\nint f(void) {{ printf(\"{i}\\n\"); fflush(stdout); return {i if not fail else -1}; }}\n",
                            f"#include <assert.h>\nint f(void);\nint main(void) {{ assert(f() == {i}); return 0; }}\n"))
        else:
            jobs.append(py(f"import sys\nprint(int(sys.stdin.read()) + {0 if not fail else 1})\n",
                           cases=[(str(i), f"{i}\n")]))
        expected.append("failed" if fail else "passed")
    results = sb.run_many(jobs)
    assert len(results) == len(jobs)
    for i, (r, want) in enumerate(zip(results, expected)):
        assert r.status == want, f"job {i}: " + explain(r)
        assert r.stdout.strip() == str(i + (1 if (i % 3 == 2 and want == "failed") else 0)), f"job {i}: " + explain(r)


# ------------------------------------------------------------------ a pool container dies

def test_killed_pool_containers_are_replaced(sb, engine):
    sb.warmup(["python", "c"])
    assert_benign_passes(sb)
    containers = engine.containers.list(filters={"label": ["proctor.sandbox=1", f"proctor.pool={sb.pool_id}"]})
    assert containers, "no pool container found to kill"
    for c in containers:
        try:
            c.kill()
        except Exception:   # already gone
            pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(
            c.id in {x.id for x in engine.containers.list(filters={"label": f"proctor.pool={sb.pool_id}"})}
            for c in containers):
        time.sleep(0.05)
    code, tests = PY_OK
    r = sb.run(py(code, tests))
    assert r.status == "passed", explain(r)
    assert r.attempts >= 1
    # Whatever dead containers the pool still held must not cost later jobs their verdict.
    results = sb.run_many([py(code, tests) for _ in range(6)] + [job("c", *C_OK) for _ in range(3)])
    for r in results:
        assert r.status == "passed", explain(r)
