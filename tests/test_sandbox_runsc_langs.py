"""Java, Go, Rust and JavaScript under gVisor (runsc): a few cases of each language's own tests
and of its adversarial tests, run again with the sandbox under gVisor.

Chosen to cover what differs under gVisor's kernel: the toolchains and runtimes start
and build there (HumanEval-X canonical and wrong solutions, stdin/stdout cases), the
exit-0 guards hold (forged passes), the limits give their verdicts (memory, output
flood, CPU loop, fork and thread bombs, network, writes outside /work) and the
runtimes stay non-dumpable. Skips naming the reason when gVisor cannot run a sandbox
here (tests/gvisor.py).

Java and JavaScript do not run under Debian's runsc (0.0~20221219): their images make
the java and node binaries execute-only, so that the kernel starts every JVM and node
process non-dumpable (no other process of the job can read the nonce in its memory),
and gVisor refuses to exec a binary its caller cannot read (EACCES, measured). Their
jobs come back infra_error, never a verdict: that is what is tested for them here.
"""

from __future__ import annotations

import dataclasses

import pytest

from proctor.sandbox import Job, Sandbox

import test_sandbox_adversarial_langs as adversarial_langs
import test_sandbox_languages as languages
from gvisor import require_gvisor

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def sb(docker_ready):
    """Every test here runs on this sandbox: its containers run under gVisor."""
    with Sandbox(runtime=require_gvisor(), auto_build=True, retries=0) as sandbox:
        yield sandbox


UNDER_GVISOR = ("go", "rust")
NOT_UNDER_GVISOR = {"java": "/usr/lib/jvm/java-17-openjdk-amd64/bin/java", "javascript": "/usr/bin/node"}


# The languages' own tests, as they are, on the gVisor sandbox.

@pytest.mark.parametrize("language", UNDER_GVISOR)
def test_humaneval_x_canonical_passes_and_wrong_fails(sb, language):
    languages.test_humaneval_x_canonical_passes_and_wrong_fails(sb, language)


@pytest.mark.parametrize("language", UNDER_GVISOR)
def test_stdin_stdout_cases(sb, language):
    languages.test_stdin_stdout_cases(sb, language)


@pytest.mark.parametrize("language", UNDER_GVISOR)
def test_forged_passes_never_pass(sb, language):
    adversarial_langs.test_forged_passes_never_pass(sb, language)


@pytest.mark.parametrize("language", UNDER_GVISOR)
def test_resource_attacks_get_their_verdict(sb, language):
    # The Rust memory bomb mmaps 50 MiB vectors, which gVisor does not hold to RLIMIT_DATA:
    # it meets RLIMIT_AS (set for glibc programs under gVisor only), not the OOM killer.
    adversarial_langs.test_resource_attacks_get_their_verdict(sb, language)


# Under gVisor a non-dumpable process's /proc/PID/environ and maps stay readable to its
# children (gVisor does not apply the flag there), while /proc/PID/mem, where the nonce
# is, is refused to them, dumpable or not (both measured): so the child here reads mem.
PEEK_MEM = ("a=$(head -1 /proc/$PPID/maps | cut -d- -f1); "
            "dd if=/proc/$PPID/mem of=/dev/null bs=4096 count=1 skip=$((0x$a / 4096)) 2>/dev/null "
            "&& echo readable || echo refused")


@pytest.mark.parametrize("language", UNDER_GVISOR)
def test_a_child_cannot_read_the_programs_memory(sb, language):
    job = adversarial_langs.NOT_DUMPABLE[language]
    assert adversarial_langs.PEEK in job.code
    r = sb.run(dataclasses.replace(job, code=job.code.replace(adversarial_langs.PEEK, PEEK_MEM)))
    assert r.status == "passed", adversarial_langs.explain(r)


@pytest.mark.parametrize("language", sorted(NOT_UNDER_GVISOR))
def test_java_and_javascript_are_not_judged_under_gvisor(sb, language):
    hello = {"java": 'public class Hi {\n  public static void main(String[] a) { System.out.println("hi"); }\n}\n',
             "javascript": "console.log('hi');\n"}[language]
    r = sb.run(Job(language, hello))
    assert r.status == "infra_error", (r.status, r.stdout, r.stderr, r.error)
    assert NOT_UNDER_GVISOR[language] in r.error and "Permission denied" in r.error, r.error
