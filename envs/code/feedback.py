"""What a multi-turn code env tells the model after a failed attempt: short and specific.

The message names the failing assertion, the first failing case (input, expected,
got) or the compiler's first complaint, and is capped at ``MAX_FEEDBACK`` characters
so that a program printing megabytes cannot flood the next prompt.
"""

from __future__ import annotations

import re
from typing import Optional

from proctor.sandbox import CaseResult, Job, Result

MAX_FEEDBACK = 2000
_PIECE = 500
_FRAME = re.compile(r'^  File "[^"]*", line \d+, in .*$')


def tail(text: str, limit: int) -> str:
    """The last ``limit`` characters, marked when cut."""
    return text if len(text) <= limit else "…" + text[-(limit - 1):]


def head(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def failure_feedback(job: Job, result: Result) -> str:
    """A message about why ``result`` did not pass, at most MAX_FEEDBACK characters."""
    failing = next((c for c in result.cases if not c.passed), None)
    if result.status == "compile_error":
        # The first error explains the rest; later ones are mostly consequences.
        msg = "Compilation failed:\n" + head(result.stderr.strip(), 3 * _PIECE)
    elif failing is not None:
        msg = _case_message(job, result.cases.index(failing), failing)
    else:
        msg = _test_message(job, result)
    return head(msg, MAX_FEEDBACK)


def _limit_message(job: Job, status: str) -> Optional[str]:
    lim = job.effective_limits
    return {
        "timeout": f"Time limit exceeded ({lim.cpu_s:g} s of CPU, {lim.wall_s:g} s in all).",
        "memory": f"Memory limit exceeded ({lim.memory_mb} MB).",
        "output_limit": f"Output limit exceeded ({lim.output_bytes} bytes per stream).",
    }.get(status)


def _test_message(job: Job, result: Result) -> str:
    limit = _limit_message(job, result.status)
    if limit:
        return limit
    stderr = result.stderr.strip()
    failed_line = _failing_source_line(stderr) if job.language == "python" else None
    if result.status == "failed" and failed_line:
        exc = _last_line(stderr)
        extra = "" if exc in ("AssertionError", "") else "\n" + head(exc, _PIECE)
        return f"A test failed:\n{head(failed_line, _PIECE)}{extra}"
    label = {"failed": "The tests failed", "runtime_error": "Runtime error"}.get(result.status, result.status)
    if not stderr:
        return f"{label} (exit code {result.exit_code}, nothing on stderr)."
    return f"{label}:\n{tail(stderr, 3 * _PIECE)}"


def _case_message(job: Job, index: int, case: CaseResult) -> str:
    stdin = job.cases[index][0] if job.cases and index < len(job.cases) else ""
    parts = [f"Failed on test case {index + 1}.",
             f"Input:\n{head(stdin, _PIECE)}",
             f"Expected output:\n{head(case.expected, _PIECE)}"]
    limit = _limit_message(job, case.status)
    if limit:
        parts.append(limit)
    else:
        parts.append(f"Your output:\n{head(case.stdout, _PIECE)}" if case.stdout else "Your output: (nothing)")
        if case.stderr.strip():
            label = "Error output" if case.status == "failed" else "Runtime error"
            parts.append(f"{label}:\n{tail(case.stderr.strip(), _PIECE)}")
    return "\n".join(parts)


def _failing_source_line(stderr: str) -> Optional[str]:
    """The source line of the innermost frame of the last traceback (the assert that failed)."""
    lines = stderr.split("\n")
    for i in range(len(lines) - 1, -1, -1):
        if _FRAME.match(lines[i]) and i + 1 < len(lines):
            return lines[i + 1].strip() or None
    return None


def _last_line(text: str) -> str:
    return next((x.strip() for x in reversed(text.split("\n")) if x.strip()), "")


__all__ = ["MAX_FEEDBACK", "failure_feedback", "head", "tail"]
