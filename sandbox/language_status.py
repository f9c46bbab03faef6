"""Verdicts of Java, Go, Rust and JavaScript runs, from what their runtimes print.

`verdict.step_status` has already handled the limits the server measured (output,
time, the cgroup's OOM killer); what is left is telling a failed test from a
crash from a language-level out-of-memory. As everywhere, exit code 0 passes
only with the marker when the tests needed one (see ``server/builders.py``).
"""

from __future__ import annotations

import re
from typing import Callable

from .types import Status

NEW_LANGUAGES = ("java", "go", "rust", "javascript")
JS_SYNTAX_ERROR_EXIT = 3   # the launcher's status for a script that does not parse

_JAVA_UNCAUGHT = re.compile(r'^Exception in thread "[^"]*" ([\w.$]+)', re.M)
_JAVA_NATIVE_OOM = ("There is insufficient memory for the Java Runtime Environment",
                    "Terminating due to java.lang.OutOfMemoryError")
# What Go's runtime prints when memory runs out, at start or later (measured under the
# sandbox's RLIMIT_DATA at 32-46 MiB): its heap ("out of memory", "out of memory
# allocating heap arena map", "pageAlloc: out of memory", "cannot allocate memory"), or
# an OS thread's stack: the runtime's own clone ("failed to create new OS thread") or,
# in a cgo binary such as the tests' (testify), glibc's pthread_create, whose EAGAIN
# ("Resource temporarily unavailable") is its mmap of the stack failing. A program that
# exhausts the pids limit with threads reads as memory too: a limit either way.
_GO_OOM = re.compile(r"^(?:fatal error: (?:runtime: |pageAlloc: )?(?:out of memory|cannot allocate memory)"
                     r"|runtime: out of memory|runtime: failed to create new OS thread"
                     r"|runtime/cgo: pthread_create failed)", re.M)
_RUST_PANIC = re.compile(r"^thread '[^']*' panicked at '(.*)", re.M)
_JS_ERROR = re.compile(r"^(?:Uncaught )?([\w$]*(?:Error|Exception))\b", re.M)


def language_status(language: str, step: dict, stderr: str, *, needs_marker: bool) -> Status:
    """Verdict of one run of a Java, Go, Rust or JavaScript program, limits already ruled out."""
    if step["exit_code"] == 0 and step["signal"] is None:
        return "passed" if (step["marker_ok"] or not needs_marker) else "failed"
    return _RULES[language](step, stderr)


def _java(step: dict, stderr: str) -> Status:
    if any(text in stderr for text in _JAVA_NATIVE_OOM):
        return "memory"
    found = _JAVA_UNCAUGHT.findall(stderr)
    if found:
        name = found[-1].rsplit(".", 1)[-1]
        if name == "OutOfMemoryError":
            return "memory"
        return "failed" if name == "AssertionError" else "runtime_error"
    return "runtime_error" if step["signal"] is not None else "failed"   # System.exit(n): reported itself


def _go(step: dict, stderr: str) -> Status:
    if _GO_OOM.search(stderr):
        return "memory"
    if step["signal"] is not None or "\npanic: " in "\n" + stderr or "fatal error: " in stderr:
        return "runtime_error"
    return "failed"   # a test failed (status 1), or os.Exit(n)


def _rust(step: dict, stderr: str) -> Status:
    if re.search(r"^memory allocation of \d+ bytes failed", stderr, re.M):
        return "memory"
    panics = _RUST_PANIC.findall(stderr)
    if panics:
        return "failed" if all(p.startswith("assertion failed") for p in panics) else "runtime_error"
    return "runtime_error" if step["signal"] is not None else "failed"


def _javascript(step: dict, stderr: str) -> Status:
    if "JavaScript heap out of memory" in stderr or "Array buffer allocation failed" in stderr:
        return "memory"
    if step["exit_code"] == JS_SYNTAX_ERROR_EXIT and not step["marker_ok"] and "SyntaxError" in stderr:
        return "compile_error"
    found = _JS_ERROR.findall(stderr)
    if found:
        return "failed" if found[-1] == "AssertionError" else "runtime_error"
    return "runtime_error" if step["signal"] is not None else "failed"   # process.exit(n)


_RULES: dict[str, Callable[[dict, str], Status]] = {
    "java": _java, "go": _go, "rust": _rust, "javascript": _javascript,
}

__all__ = ["NEW_LANGUAGES", "language_status"]
