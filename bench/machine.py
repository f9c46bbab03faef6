"""What machine a benchmark ran on: the facts every bench script records beside its figures."""

from __future__ import annotations

import os
import platform


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo ("" where there is none)."""
    try:
        with open("/proc/cpuinfo") as fh:
            return next((ln.split(":", 1)[1].strip() for ln in fh if ln.startswith("model name")), "")
    except OSError:
        return ""


def memory_gib() -> float:
    """Physical memory in GiB (NaN where the system does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError):
        return float("nan")


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity), else all of them."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


__all__ = ["cpu_model", "memory_gib", "usable_cpus"]
