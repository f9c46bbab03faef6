"""The adversarial suite and HumanEval again, with the sandbox under gVisor (runsc).

Every test of tests/test_sandbox_adversarial.py is collected here a second time, with
its sandboxes built with ``runtime="runsc"``; the HumanEval tests of test_sandbox.py
likewise. When gVisor cannot run a sandbox here the suite skips naming the reason, or
fails under ``PROCTOR_RUNTIME=runsc`` (tests/gvisor.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from proctor.sandbox import Job, Sandbox

import test_sandbox_adversarial as adversarial
from gvisor import VERSION_PROBE, require_gvisor
from test_sandbox_adversarial import *  # noqa: F401,F403 - the same tests, collected again under runsc
from test_sandbox import test_humaneval_canonical_solutions_all_pass, test_humaneval_stubs_all_fail  # noqa: F401

pytestmark = pytest.mark.docker


@pytest.fixture(scope="session")
def gvisor(docker_ready) -> str:
    return require_gvisor()


# The adversarial module's fixtures, under gVisor (same names: they win here).

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
