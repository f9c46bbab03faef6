"""Java, Go, Rust and JavaScript under gVisor (runsc): a few cases of each language's own tests
and of its adversarial tests, run again with the sandbox under gVisor.

Chosen to cover what differs under gVisor's kernel: the toolchains and runtimes start
and build there (HumanEval-X canonical and wrong solutions, stdin/stdout cases), the
exit-0 guards hold (forged passes), the limits give their verdicts (memory, output
flood, CPU loop, fork and thread bombs, network, writes outside /work) and no child
of a program reads its memory. Skips naming the reason when gVisor cannot run a sandbox
here (tests/gvisor.py).

Java and JavaScript start from readable copies of java and node under gVisor (gVisor
refuses to exec the execute-only binaries the images use to make the runtimes
non-dumpable under runc); gVisor keeps a child out of its parent's /proc/PID/mem anyway,
which the memory test checks directly.
"""

from __future__ import annotations

import dataclasses

import pytest

from proctor.sandbox import Sandbox

import test_sandbox_adversarial_langs as adversarial_langs
import test_sandbox_javacd as javacd_tests
import test_sandbox_languages as languages
from gvisor import require_gvisor
from humaneval_x import LANGUAGES

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def sb(docker_ready):
    """Every test here runs on this sandbox: its containers run under gVisor."""
    with Sandbox(runtime=require_gvisor(), auto_build=True, retries=0) as sandbox:
        yield sandbox


# The languages' own tests, as they are, on the gVisor sandbox.

@pytest.mark.parametrize("language", LANGUAGES)
def test_humaneval_x_canonical_passes_and_wrong_fails(sb, language):
    languages.test_humaneval_x_canonical_passes_and_wrong_fails(sb, language)


@pytest.mark.parametrize("language", LANGUAGES)
def test_stdin_stdout_cases(sb, language):
    languages.test_stdin_stdout_cases(sb, language)


@pytest.mark.parametrize("language", LANGUAGES)
def test_forged_passes_never_pass(sb, language):
    adversarial_langs.test_forged_passes_never_pass(sb, language)


@pytest.mark.parametrize("language", LANGUAGES)
def test_resource_attacks_get_their_verdict(sb, language, monkeypatch):
    # The Rust memory bomb mmaps 50 MiB vectors, which gVisor does not hold to RLIMIT_DATA:
    # it meets RLIMIT_AS (set for glibc programs under gVisor only), not the OOM killer.
    # KNOWN GAP, measured: Node's Buffers live outside the V8 heap --max-old-space-size
    # bounds, and node cannot take RLIMIT_AS (600 MB of address space before any code).
    # Under runc the cgroup's OOM killer takes the job ("memory"); under gVisor the pages
    # fill slowly, so the wall limit comes first ("timeout", 3 runs of 5) or the OOM killer
    # takes the whole sandbox (infra_error: not judged, retried elsewhere; 2 of 5).
    monkeypatch.setitem(adversarial_langs.EXPECTED, "buffer memory", ("memory", "timeout", "infra_error"))
    # KNOWN GAP, measured 2026-12-02: Go's heap is mmap'd, which gVisor does not hold to
    # RLIMIT_DATA either, and Go programs get no RLIMIT_AS, so the cgroup's OOM killer is what
    # stops the Go memory bomb: it takes the job ("memory") or, in 3 of 5 runs here,
    # the whole sandbox (infra_error: not judged, never scored). Under runc it is always "memory".
    # Measured once more (2026-12-07, thirteenth session, a whole-suite run on the 2-core AMD VM):
    # gVisor's page faults were slow enough that the bomb used up its CPU limit first ("timeout").
    if language == "go":
        monkeypatch.setitem(adversarial_langs.EXPECTED, "memory", ("memory", "infra_error", "timeout"))
    # Measured once in five whole-suite runs under gVisor on the 2-core AMD VM (2026-12-07):
    # V8's last-ditch collections near --max-old-space-size ran past the CPU limit before V8
    # gave up, so the heap bomb came back "timeout". Never a pass; under runc always "memory".
    if language == "javascript":
        monkeypatch.setitem(adversarial_langs.EXPECTED, "memory", ("memory", "timeout"))
    adversarial_langs.test_resource_attacks_get_their_verdict(sb, language)


# Under gVisor a non-dumpable process's /proc/PID/environ and maps stay readable to its
# children (gVisor does not apply the flag there), while /proc/PID/mem, where the nonce
# is, is refused to them, dumpable or not (both measured): so the child here reads mem.
PEEK_MEM = ("a=$(head -1 /proc/$PPID/maps | cut -d- -f1); "
            "dd if=/proc/$PPID/mem of=/dev/null bs=4096 count=1 skip=$((0x$a / 4096)) 2>/dev/null "
            "&& echo readable || echo refused")


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_child_cannot_read_the_programs_memory(sb, language):
    job = adversarial_langs.NOT_DUMPABLE[language]
    assert adversarial_langs.PEEK in job.code
    r = sb.run(dataclasses.replace(job, code=job.code.replace(adversarial_langs.PEEK, PEEK_MEM)))
    assert r.status == "passed", adversarial_langs.explain(r)


# Java's warm compile server (test_sandbox_javacd.py) under gVisor: one container, so the
# server's pid can be followed from job to job.

@pytest.fixture(scope="module")
def sb_one(docker_ready):
    with Sandbox(runtime=require_gvisor(), auto_build=True, retries=0, slots=1, spare=0) as sandbox:
        yield sandbox


@pytest.mark.parametrize("name", ["test_one_server_outlives_jobs_and_no_job_can_reach_it",
                                  "test_no_class_of_one_compile_reaches_the_next",
                                  "test_a_compile_the_server_cannot_judge_gets_javacs_own_verdict",
                                  "test_a_compile_past_its_budget_times_out_and_the_next_job_compiles",
                                  "test_a_compiles_cpu_time_is_counted"])
def test_java_compile_server(sb_one, name, monkeypatch):
    monkeypatch.setattr(javacd_tests, "MAY_READ", ("environ", "maps"))
    getattr(javacd_tests, name)(sb_one)
