"""The adversarial suite and HumanEval again, with the sandbox under gVisor (runsc).

Every test of tests/test_sandbox_adversarial.py is collected here a second time, with
its sandboxes built with ``runtime="runsc"``; the HumanEval tests of test_sandbox.py
likewise. The suite runs when runsc works on this machine: registered with the
engine (``PROCTOR_RUNTIME=runsc bash scripts/setup.sh``) and able to start a sandbox.
Otherwise it skips, naming the reason (the engine's or the kernel's error); with
``PROCTOR_RUNTIME=runsc`` set, that is a failure instead, since gVisor was asked for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from proctor.sandbox import Job, Sandbox, SandboxError
from proctor.sandbox.engine import check_runtime, connect

import test_sandbox_adversarial as adversarial
from test_sandbox_adversarial import *  # noqa: F401,F403 - the same tests, collected again under runsc
from test_sandbox import test_humaneval_canonical_solutions_all_pass, test_humaneval_wrong_solutions_fail  # noqa: F401

pytestmark = pytest.mark.docker

RUNTIME = os.environ.get("PROCTOR_GVISOR_RUNTIME", "runsc")
VERSION_PROBE = "print(open('/proc/version').read().strip())"


def _gvisor_problem() -> Optional[str]:
    """Why a sandbox cannot run under gVisor here, or None when one just did."""
    try:
        client = connect()
        if not check_runtime(client, RUNTIME, client.api.base_url):
            return f"runtime {RUNTIME!r} is registered with the engine but is not gVisor's runsc"
        with Sandbox(runtime=RUNTIME, slots=1, spare=0, retries=0, auto_build=True) as sb:
            r = sb.run(Job("python", VERSION_PROBE))
    except SandboxError as exc:
        return str(exc)
    if r.status != "passed":
        return f"a sandbox job under {RUNTIME} ended {r.status}: {(r.error or r.stderr)[-800:]}"
    return None


# Known to fail under Debian's runsc (0.0~20221219). It delivers SIGKILL and SIGSTOP from
# a process inside the sandbox to the sandbox's PID 1, which Linux never does for a
# namespace's init. The fork server is then killed (stopped) by the job: the verdict is
# infra_error, never a score, but the attack is not contained. Fixing it needs the
# server under a uid the jobs do not have. strict: the day runsc contains it, these fail.
UNCONTAINED_UNDER_RUNSC = {
    "test_sigkill_from_the_job_does_not_kill_the_server[kill-pid-1]":
        "runsc delivers a job's kill(1, SIGKILL) to the sandbox's PID 1 (Linux ignores it for init)",
    "test_signals_to_pid_1_do_not_disturb_the_server[SIGSTOP]":
        "runsc delivers a job's kill(1, SIGSTOP) to the sandbox's PID 1 (Linux ignores it for init)",
    # gVisor gives the container no mqueue filesystem (/dev/mqueue): the server can
    # neither list nor remove a job's POSIX message queues (SysV objects it counts).
    "test_posix_message_queue_alone_does_not_survive":
        "runsc mounts no /dev/mqueue: a job's POSIX message queue outlives it in the container",
}


@pytest.fixture(autouse=True)
def _known_runsc_gaps(request):
    reason = UNCONTAINED_UNDER_RUNSC.get(request.node.name)
    if reason is not None:
        request.node.add_marker(pytest.mark.xfail(reason=reason, strict=True))


@pytest.fixture(scope="session")
def gvisor(docker_ready) -> str:
    problem = _gvisor_problem()
    if problem is None:
        return RUNTIME
    if os.environ.get("PROCTOR_RUNTIME") == "runsc":
        pytest.fail(f"PROCTOR_RUNTIME=runsc but gVisor cannot run a sandbox here: {problem}")
    pytest.skip(f"gVisor (runsc) cannot run a sandbox on this machine: {problem}")


# The adversarial module's fixtures, with runtime=RUNTIME (same names: they win here).

@pytest.fixture(scope="module")
def sb(engine, canary, gvisor):
    with Sandbox(auto_build=True, runtime=gvisor) as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def solo(engine, canary, gvisor):
    with Sandbox(slots=1, spare=0, auto_build=True, runtime=gvisor) as sandbox:
        yield sandbox


# gVisor's kernel boots with each sandbox: the wall-clock instant of that boot (now minus
# /proc/uptime) is steady within 10 ms in one container, and containers start seconds apart.
BOOT_PROBE = "import time\nprint(repr(time.time() - float(open('/proc/uptime').read().split()[0])))"
SAME_BOOT_S = 0.05


def boot_instant(sandbox: Sandbox) -> float:
    r = sandbox.run(adversarial.py(BOOT_PROBE))   # the probe's limits: the same container spec
    assert r.passed, adversarial.explain(r)
    return float(r.stdout.strip())


@pytest.fixture
def same_container(solo):
    """As in the adversarial module; the container's identity is its gVisor kernel's boot instant.

    Under gVisor /proc/self/mountinfo names no container, so the mountinfo check would
    compare two empty lists.
    """
    before = adversarial.probe(solo)
    adversarial.assert_clean(before)
    booted = boot_instant(solo)

    def check() -> dict:
        after = adversarial.probe(solo)
        assert abs(boot_instant(solo) - booted) < SAME_BOOT_S, \
            "the follow-up probe ran in another container: the check says nothing about cleanup"
        adversarial.assert_clean(after)
        adversarial.assert_benign_passes(solo)
        return after

    return check


@pytest.fixture(scope="module")
def sandbox(gvisor):
    """test_sandbox.py's HumanEval tests take this one."""
    with Sandbox(runtime=gvisor, auto_build=True) as sb:
        sb.warmup(["python"])
        yield sb


# ------------------------------------------------------------------ under gVisor for real

def test_jobs_run_under_the_gvisor_kernel(sb):
    host_version = Path("/proc/version").read_text().strip()
    r = sb.run(Job("python", VERSION_PROBE))
    assert r.passed, adversarial.explain(r)
    # gVisor's Sentry answers for the kernel: not the host's /proc/version.
    assert r.stdout.strip() and r.stdout.strip() != host_version, (r.stdout, host_version)


def test_c_job_under_gvisor_gets_the_sandbox_pid_limit(sb):
    # The host's pids cgroup counts gVisor's own threads; the job's limit is RLIMIT_NPROC
    # inside the sandbox: a C program forking past it sees EAGAIN, not a dead sandbox.
    code = """
        #include <errno.h>
        #include <stdio.h>
        #include <unistd.h>
        int main(void) {
            int n = 0;
            for (int i = 0; i < 500; i++) {
                pid_t p = fork();
                if (p == 0) { pause(); _exit(0); }
                if (p < 0) { printf("refused after %d errno %d\\n", n, errno); return 0; }
                n++;
            }
            printf("forked %d\\n", n);
            return 0;
        }
    """
    r = sb.run(adversarial.job("c", adversarial.textwrap.dedent(code)))
    assert r.status == "passed", adversarial.explain(r)
    assert "refused after" in r.stdout and f"errno {11}" in r.stdout, adversarial.explain(r)
    forked = int(r.stdout.split("refused after")[1].split()[0])
    assert forked < adversarial.LIM.pids, adversarial.explain(r)
    adversarial.assert_benign_passes(sb, "python")


def test_cli_runs_a_program_under_the_runtime(gvisor, tmp_path):
    prog = tmp_path / "prog.py"
    prog.write_text(VERSION_PROBE + "\n")
    out = subprocess.run([sys.executable, "-m", "proctor.cli.app", "sandbox", "run", "--runtime", gvisor,
                          "--json", str(prog)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    result = json.loads(out.stdout)
    assert result["status"] == "passed"
    assert result["stdout"].strip() != Path("/proc/version").read_text().strip()
