"""Memory budgets of compile steps: one definition for the server (their rlimits) and the host (the container's size).

Stdlib only: copied into the images beside the fork server, and imported by the host.

A compiler runs under RLIMIT_AS = compile_mb(language, memory_mb) MiB, so a
compile-time bomb (an #include of /dev/zero, a macro or template that grows without
end) makes the compiler fail with "out of memory": a compile error. The container's
memory cgroup is sized above that budget (container.py), so a compiler never brings
the cgroup's OOM killer down on the sandbox, under gVisor above all, where the
killer takes the whole sandbox. Measured here, the least each toolchain needs for a
small program: g++ 256 MiB; rustc 512 MiB; the Go compiler and linker 768 MiB (the
Go runtime reserves address space up front); javac 768 MiB with JAVAC_FLAGS.
"""

from __future__ import annotations

COMPILE_MB = {"c": 512, "cpp": 512, "go": 1024, "java": 1024, "rust": 1024}
# javac's JVM inside its budget: without these it reserves a gigabyte of class space
# and a quarter of the machine for its heap.
JAVAC_FLAGS = ("-Xmx256m", "-XX:CompressedClassSpaceSize=64m", "-XX:ReservedCodeCacheSize=32m",
               "-XX:MaxMetaspaceSize=128m")


# What a language keeps resident in its container between jobs, on top of the job's own
# budget: Java's compile server (javacd.py), whose memory is bounded by its flags (heap 160
# MiB, metaspace 128, class space 64, code cache 32, and the JVM's own; ~90 MiB resident
# measured) and which runs 14 threads (measured). The container's memory cgroup and pids
# limit grow by these, so a job's verdicts do not change because the server is there.
RESIDENT_MB = {"java": 448}
RESIDENT_PIDS = {"java": 16}


def resident_mb(language: str) -> int:
    """MiB the container keeps for the language's resident helpers (0: none)."""
    return RESIDENT_MB.get(language, 0)


def resident_pids(language: str) -> int:
    """Tasks (processes and threads) of the language's resident helpers (0: none)."""
    return RESIDENT_PIDS.get(language, 0)


def compile_mb(language: str, memory_mb: int) -> int:
    """The address space of a compile step, in MiB (0: the language compiles nothing)."""
    budget = COMPILE_MB.get(language, 0)
    return max(budget, memory_mb) if budget else 0
