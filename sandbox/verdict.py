"""Turn the server's measurements into a verdict.

Kept apart from the transport so it can be tested exhaustively: the rules here
decide rewards. The order of checks matters: a limit that was hit explains the
exit code, not the other way round; and exit code 0 is never enough to pass.
"""

from __future__ import annotations

import base64
import codecs
import hashlib
import re
import signal
from typing import Optional

from .language_status import NEW_LANGUAGES, language_status
from .server.judge import normalize_output, outputs_match
from .types import CaseResult, Job, Result, Status

__all__ = ["build_result", "case_verdicts", "decode_output", "last_python_exception", "normalize_output",
           "output_digest", "outputs_match", "step_status"]

_PY_EXC = re.compile(r"^([A-Za-z_][\w.]*)(?::|$)")


def output_digest(text: str) -> str:
    """sha256 of the normalized text: what the server reports of a case's output, to compare here."""
    return hashlib.sha256(normalize_output(text).encode("utf-8", "surrogatepass")).hexdigest()


def decode_output(data: bytes, limit: int) -> str:
    """Bytes to text: cut at the limit, undecodable bytes replaced.

    A character that the cut split in two is dropped, not turned into U+FFFD.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    return decoder.decode(data[:limit], final=len(data) < limit)   # at the limit: assume it was cut


def last_python_exception(stderr: str) -> Optional[str]:
    """Name of the exception that ended a Python program, from its (last) traceback.

    The exception line is the first unindented line after the frames; its message
    may span lines of its own, so searching from the end would misread it.
    """
    header = "Traceback (most recent call last):"
    at = stderr.rfind(header)
    if at < 0:
        return None
    for line in stderr[at + len(header):].split("\n")[1:]:
        if line.startswith((" ", "\t")) or not line.strip():
            continue
        match = _PY_EXC.match(line)
        return match.group(1).rsplit(".", 1)[-1] if match else None
    return None


def step_status(language: str, step: dict, stderr: str, *, needs_marker: bool) -> Status:
    """Verdict of one run: everything but output comparison."""
    if step["output_limit"]:
        return "output_limit"
    if step["timed_out"]:
        return "timeout"
    sig = step["signal"]
    if step["oom"]:
        return "memory"
    if language in NEW_LANGUAGES:
        return language_status(language, step, stderr, needs_marker=needs_marker)
    if language == "python":
        exc = last_python_exception(stderr)
        if exc == "MemoryError":
            return "memory"
        if step["exit_code"] == 0 and sig is None:
            return "passed" if (step["marker_ok"] or not needs_marker) else "failed"
        if step.get("program_signal") is not None:
            return "runtime_error"   # the program's process crashed while the tests called it
        if exc in ("AssertionError", "ProgramExit"):
            return "failed"          # ProgramExit: it exited inside a call of the tests
        if exc is not None or sig is not None:
            return "runtime_error"
        return "failed"   # sys.exit(n) with n != 0: the program reported failure itself
    # C / C++
    if sig is not None:
        if sig == signal.SIGABRT and "std::bad_alloc" in stderr:
            return "memory"
        if sig == signal.SIGABRT and "Assertion" in stderr:
            return "failed"
        return "runtime_error"
    if step["exit_code"] == 0:
        return "passed" if (step["marker_ok"] or not needs_marker) else "failed"
    return "failed"


def _raw(step: dict, key: str) -> bytes:
    """A stream's bytes, decoded from base64 once per step (outputs can be a MiB each)."""
    cached = step.setdefault("_raw", {})
    if key not in cached:
        cached[key] = base64.b64decode(step[key])
    return cached[key]


def _text(step: dict, key: str, limit: int) -> str:
    return decode_output(_raw(step, key), limit)


def case_verdicts(job: Job, steps: list[dict], cap: int) -> list[CaseResult]:
    """One CaseResult per case step; with ``stop_on_first_failure``, none after the first failure.

    The server stops there too, but it may run one more than the verdict allows (a
    run it cannot yet tell is failed): the list ends where the verdict says.
    """
    out_cases = []
    for step, (_stdin, expected) in zip([s for s in steps if s["kind"] == "case"], job.cases or ()):
        out, err = _text(step, "stdout", cap), _text(step, "stderr", cap)
        # Output is compared outside the program (here), so exiting early cannot forge it.
        case_status = step_status(job.language, step, err, needs_marker=False)
        if job.language == "python" and step.get("syntax_error"):
            case_status = "compile_error"
        # The server hashed the whole output (it ships at most CASE_SHIP bytes of it back);
        # the expected output never left the host.
        if case_status == "passed" and step.get("stdout_sha256") != output_digest(expected):
            case_status = "failed"
        out_cases.append(CaseResult(status=case_status, passed=case_status == "passed", stdout=out,
                                    stderr=err, exit_code=step["exit_code"], wall_s=step["wall_s"],
                                    expected=expected))
        if job.stop_on_first_failure and case_status != "passed":
            break
    return out_cases


def fetched_files(job: Job, reply: dict) -> tuple[Optional[dict[str, Optional[bytes]]], str]:
    """``Result.files`` from the server's reply (None: the job asked for none), and the note for
    ``Result.error`` on the files left out for their size ("" when none was)."""
    if job.fetch_files is None:
        return None, ""
    got = reply.get("files") or {}
    files = {p: (None if got.get(p) is None else base64.b64decode(got[p])) for p in job.fetch_files}
    cap = job.effective_limits.output_bytes
    notes = []
    for path, size in (reply.get("files_too_large") or {}).items():
        why = (f"more than Limits.output_bytes = {cap}; raise it or have the program write less" if size > cap
               else "the job's fetched files would hold more than 96 MiB together; fetch fewer or smaller files")
        notes.append(f"Job.fetch_files: {path!r} ({size} bytes) was not returned: {why}")
    return files, "; ".join(notes)


def build_result(job: Job, reply: dict, *, attempts: int = 1, host: str = "") -> Result:
    limits = job.effective_limits
    cap = limits.output_bytes
    steps = reply["steps"]
    # A build of several steps arrives as one step whose times are the whole build's (forkserver.py).
    wall = sum(s["wall_s"] for s in steps)
    cpu = sum(s["cpu_s"] for s in steps)
    truncated = any(len(_raw(s, k)) >= cap for s in steps for k in ("stdout", "stderr"))
    files, files_note = fetched_files(job, reply)
    common = dict(wall_s=round(wall, 6), cpu_s=round(cpu, 6), attempts=attempts, host=host, truncated=truncated,
                  files=files, error=files_note)

    first = steps[0]
    if first["kind"] == "compile":
        stderr = _text(first, "stderr", cap)
        if first["exit_code"] != 0 or first["timed_out"] or first["oom"] or first["signal"] is not None:
            if first["timed_out"]:
                stderr += f"\n[proctor] compilation exceeded {limits.compile_s:g} s"
            return Result(status="compile_error", passed=False, stdout=_text(first, "stdout", cap),
                          stderr=stderr, exit_code=first["exit_code"], **common)
        steps = steps[1:]

    status: Status = "passed"
    main_out = main_err = ""
    exit_code: Optional[int] = None
    run = [s for s in steps if s["kind"] == "run"]
    if run:
        step = run[0]
        main_out, main_err = _text(step, "stdout", cap), _text(step, "stderr", cap)
        exit_code = step["exit_code"]
        if job.language == "python" and step.get("syntax_error"):
            return Result(status="compile_error", passed=False, stdout=main_out, stderr=main_err,
                          exit_code=exit_code, **common)
        status = step_status(job.language, step, main_err, needs_marker=True)

    stop = job.stop_on_first_failure
    case_results = [] if (stop and status != "passed") else case_verdicts(job, steps, cap)
    common["cases_skipped"] = len(job.cases or ()) - len(case_results) if stop else 0
    if case_results:
        failing = next((c for c in case_results if not c.passed), None)
        if not run:
            shown = failing or case_results[0]
            main_out, main_err, exit_code = shown.stdout, shown.stderr, shown.exit_code
        if status == "passed" and failing is not None:
            status = failing.status
    return Result(status=status, passed=status == "passed", stdout=main_out, stderr=main_err,
                  exit_code=exit_code, cases=tuple(case_results), **common)
