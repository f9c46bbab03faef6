"""SandboxFusion's ``POST /run_code``: its request and response as SandboxFusion defines them
(``sandbox/server/sandbox_api.py``, ``sandbox/runners/types.py`` of bytedance/SandboxFusion),
answered by Proctor's sandbox.

Languages: SandboxFusion's ``python``, ``cpp``, ``nodejs``, ``go``, ``java`` and ``rust``
(and ``c``, which SandboxFusion lacks); any other of its names gets 422 naming the field.
``run_timeout`` is the program's CPU limit (a loaded machine cannot turn a right answer
into a timeout); its wall limit is ``run_timeout`` plus the service's slack, so a sleeping
program is stopped too. ``memory_limit_MB`` -1 (SandboxFusion's "unlimited") takes the
service's default. ``stdin`` is fed to the program; ``files`` (base64) are written into its
work dir first; ``fetch_files`` come back base64 in ``files`` (those the program left as
regular files).

Statuses, as SandboxFusion's ``parse_run_status`` gives them: Success when every step
finished with return code 0; Failed for a non-zero return code, a compile error or a time
limit; SandboxError when the sandbox itself failed (``infra_error``: never a failed
program). Proctor's verdicts that SandboxFusion has no word for are mapped faithfully
(memory: the run Finished with the kill's return code 137; output_limit: Finished, 1) and
the Proctor verdict travels in the extra field ``proctor``.
"""

from __future__ import annotations

import base64
from enum import Enum
from typing import Any, Dict, List, Optional

from pydantic import BaseModel, Field

from ..types import Job, Limits, Result

LANGUAGE_MAP = {"python": "python", "cpp": "cpp", "c": "c", "nodejs": "javascript", "go": "go", "java": "java",
                "rust": "rust"}
COMPILED = ("c", "cpp", "go", "java", "rust")
COMPILE_TIMEOUT_NOTE = "[proctor] compilation exceeded"   # verdict.py's words for a compile time limit
KILLED_RC = 137      # a process killed by SIGKILL, as a shell reports it


class CommandRunStatus(str, Enum):
    Finished = "Finished"
    Error = "Error"
    TimeLimitExceeded = "TimeLimitExceeded"


class RunStatus(str, Enum):
    Success = "Success"
    Failed = "Failed"
    SandboxError = "SandboxError"


class CommandRunResult(BaseModel):
    status: CommandRunStatus
    execution_time: Optional[float] = None
    return_code: Optional[int] = None
    stdout: Optional[str] = None
    stderr: Optional[str] = None


class RunCodeRequest(BaseModel):
    compile_timeout: float = Field(10, gt=0, description="compile timeout for compiled languages")
    run_timeout: float = Field(10, gt=0, description="the program's CPU limit in seconds")
    memory_limit_MB: int = Field(-1, description="memory limit in MB; -1: the service's default")
    code: str = Field(..., description="the code to run")
    stdin: Optional[str] = Field(None, description="text fed to the program's stdin")
    language: str = Field(..., description="python, cpp, c, nodejs, go, java or rust")
    files: Dict[str, Optional[str]] = Field({}, description="path -> base64 content, written before the run")
    fetch_files: List[str] = Field([], description="paths whose content comes back base64 in files")


class ProctorVerdict(BaseModel):
    status: str
    cpu_s: float
    wall_s: float
    truncated: bool
    attempts: int
    error: str = ""


class RunCodeResponse(BaseModel):
    status: RunStatus
    message: str
    compile_result: Optional[CommandRunResult] = None
    run_result: Optional[CommandRunResult] = None
    executor_pod_name: Optional[str] = None
    files: Dict[str, str] = {}
    proctor: Optional[ProctorVerdict] = None


class UnsupportedLanguage(ValueError):
    pass


def memory_mb(requested: int, default: int) -> int:
    return default if requested is None or requested <= 0 else max(int(requested), 16)


def request_job(req: RunCodeRequest, default_memory_mb: int, wall_slack_s: float) -> Job:
    """The Proctor job of a /run_code request; UnsupportedLanguage or BadJob when there is none."""
    language = LANGUAGE_MAP.get(req.language)
    if language is None:
        raise UnsupportedLanguage(f"language {req.language!r} is not run here; use one of "
                                  f"{', '.join(LANGUAGE_MAP)}")
    limits = Limits(cpu_s=req.run_timeout, wall_s=req.run_timeout + wall_slack_s, compile_s=req.compile_timeout,
                    memory_mb=memory_mb(req.memory_limit_MB, default_memory_mb))
    files = {path: base64.b64decode(content) for path, content in req.files.items()
             if isinstance(content, str) and "IGNORE_THIS_FILE" not in path}
    # stdin travels as a case whose expected output is never compared: its exit code and output are read.
    cases = [(req.stdin, "")] if req.stdin is not None else None
    extra: dict[str, Any] = {"fetch_files": tuple(req.fetch_files)} if req.fetch_files else {}
    return Job(language=language, code=req.code, cases=cases, files=files or None,  # type: ignore[arg-type]
               limits=limits, **extra)


def _run(result: Result) -> tuple[str, str, Optional[int]]:
    """The run's stdout, stderr and exit code (the case's, when stdin made it one)."""
    if result.cases:
        case = result.cases[0]
        return case.stdout, case.stderr, case.exit_code
    return result.stdout, result.stderr, result.exit_code


def own_status(result: Result) -> str:
    """Proctor's verdict of the run itself: stdin travels as a case whose expected output ("") is
    never meant to match, so a case that ran to exit 0 is 'passed', not 'failed'."""
    if result.cases and result.status == "failed" and result.cases[0].exit_code == 0:
        return "passed"
    return result.status


def return_code(status: str, exit_code: Optional[int]) -> int:
    if exit_code is not None and (exit_code != 0 or status in ("passed", "failed")):
        return exit_code
    return {"memory": KILLED_RC, "runtime_error": 1, "output_limit": 1, "failed": 1}.get(status, 0)


def response_of(job: Job, result: Result) -> RunCodeResponse:
    """A Proctor `Result` as SandboxFusion's answer."""
    verdict = ProctorVerdict(status=own_status(result), cpu_s=result.cpu_s, wall_s=result.wall_s,
                             truncated=result.truncated, attempts=result.attempts, error=result.error)
    if result.status == "infra_error":
        return RunCodeResponse(status=RunStatus.SandboxError, message=result.error or "the sandbox failed",
                               proctor=verdict)
    files = {p: base64.b64encode(c).decode() for p, c in (getattr(result, "files", None) or {}).items()
             if c is not None}
    compiled = job.language in COMPILED
    if result.status == "compile_error":
        timed_out = COMPILE_TIMEOUT_NOTE in result.stderr
        # Python that does not parse exits 1, as `python main.py` does (the sandbox's own code is 3).
        rc = (result.exit_code or 1) if compiled else 1
        step = CommandRunResult(
            status=CommandRunStatus.TimeLimitExceeded if timed_out else CommandRunStatus.Finished,
            execution_time=result.wall_s, return_code=None if timed_out else rc,
            stdout=result.stdout, stderr=result.stderr)
        if compiled:
            return RunCodeResponse(status=RunStatus.Failed, message="", compile_result=step, files=files,
                                   proctor=verdict)
        return RunCodeResponse(status=RunStatus.Failed, message="", run_result=step, files=files, proctor=verdict)
    compile_step = CommandRunResult(status=CommandRunStatus.Finished, return_code=0, stdout="", stderr="") \
        if compiled else None
    stdout, stderr, exit_code = _run(result)
    if result.status == "timeout":
        run = CommandRunResult(status=CommandRunStatus.TimeLimitExceeded, execution_time=result.wall_s,
                               stdout=stdout, stderr=stderr)
        return RunCodeResponse(status=RunStatus.Failed, message="", compile_result=compile_step, run_result=run,
                               files=files, proctor=verdict)
    rc = return_code(result.status, exit_code)
    run = CommandRunResult(status=CommandRunStatus.Finished, execution_time=result.wall_s, return_code=rc,
                           stdout=stdout, stderr=stderr)
    status = RunStatus.Success if rc == 0 else RunStatus.Failed
    return RunCodeResponse(status=status, message="", compile_result=compile_step, run_result=run, files=files,
                           proctor=verdict)


__all__ = ["RunCodeRequest", "RunCodeResponse", "CommandRunResult", "CommandRunStatus", "RunStatus",
           "request_job", "response_of", "UnsupportedLanguage", "LANGUAGE_MAP", "memory_mb"]
