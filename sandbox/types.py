"""The sandbox's public data types: what a job asks for and what it gets back."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal, Optional, Sequence, Union

from .errors import BadJob
from .jobcheck import check_job

Language = Literal["python", "c", "cpp", "java", "go", "rust", "javascript"]
LANGUAGES: tuple[str, ...] = ("python", "c", "cpp", "java", "go", "rust", "javascript")

Status = Literal[
    "passed",         # tests ran to their end / every case matched, and the program exited 0
    "failed",         # an assertion failed, wrong output, or it exited before its tests finished
    "compile_error",  # C/C++ did not compile, or Python did not parse
    "runtime_error",  # an uncaught exception, a crash signal, a non-zero exit
    "timeout",        # CPU-time or wall-clock limit
    "memory",         # memory limit
    "output_limit",   # stdout or stderr grew past Limits.output_bytes
    "infra_error",    # the sandbox itself failed (after retries): never a wrong answer
]
STATUSES: tuple[str, ...] = (
    "passed", "failed", "compile_error", "runtime_error",
    "timeout", "memory", "output_limit", "infra_error",
)


@dataclass(frozen=True)
class Limits:
    """Resource limits for one job.

    ``cpu_s`` decides verdicts (a loaded machine must not turn a right answer into
    a timeout); ``wall_s`` is the looser backstop that also catches sleeping programs.
    Both apply to the whole process tree, not only the first process.
    """

    wall_s: float = 15.0
    cpu_s: float = 5.0
    memory_mb: int = 512
    pids: int = 64
    output_bytes: int = 1 << 20   # per stream (stdout, stderr)
    disk_mb: int = 64             # writable work dir; /tmp gets a quarter of it
    compile_s: float = 30.0       # wall limit of a C/C++ compile (CPU limit: the same)

    def __post_init__(self) -> None:
        for name in ("wall_s", "cpu_s", "compile_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or not value > 0:
                raise BadJob(f"Limits.{name} must be a positive number of seconds, got {value!r}")
        for name, low in (("memory_mb", 16), ("pids", 4), ("output_bytes", 256), ("disk_mb", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or value < low:
                raise BadJob(f"Limits.{name} must be an integer >= {low}, got {value!r}")


Case = tuple[str, str]  # (stdin, expected stdout)
FileContent = Union[str, bytes]


@dataclass(frozen=True)
class Job:
    """One program to run.

    Python: ``tests`` run as a module of their own in a judge process apart from the
    program; every name ``code`` defines is visible to them (HumanEval style), and
    their calls travel to the program's process as data. C/C++: ``code`` and ``tests``
    are compiled as two translation units and linked; the tests call only what the
    program defines for them (its other symbols stay its own).
    ``cases``: (stdin, expected stdout) pairs; each must match after trimming trailing
    white space per line. The expected outputs never leave the host: the sandbox sends
    back a hash of each output, compared here. ``files``: extra files written into the
    work dir first (relative paths of plain names; ``main.py`` is the Python program's).
    ``stop_on_first_failure``: stop at the first run that fails (the tests, or a case):
    the cases after it are not run (``Result.cases_skipped`` counts them). For binary
    rewards, where only ``Result.passed`` matters.
    ``fetch_files``: paths relative to the work dir (the rules of ``files`` names; at most
    64; a list is stored as a tuple) to read back once the job's last run (the tests' run,
    or the last case that ran) has ended and every process of the job is gone: the runs
    of one job share one work dir, so that is the work dir as all of them left it.
    ``Result.files`` holds what was there.
    """

    language: Language
    code: str
    tests: Optional[str] = None
    cases: Optional[Sequence[Case]] = None
    files: Optional[dict[str, FileContent]] = None
    limits: Optional[Limits] = None
    stop_on_first_failure: bool = False
    fetch_files: Optional[tuple[str, ...]] = None

    def __post_init__(self) -> None:
        if self.language not in LANGUAGES:
            raise BadJob(f"Job.language must be one of {', '.join(LANGUAGES)}; got {self.language!r}")
        if not isinstance(self.code, str):
            raise BadJob(f"Job.code must be a str, got {type(self.code).__name__}")
        if self.tests is not None and not isinstance(self.tests, str):
            raise BadJob(f"Job.tests must be a str or None, got {type(self.tests).__name__}")
        if self.cases is not None:
            cases = list(self.cases)
            for i, case in enumerate(cases):
                if (not isinstance(case, (tuple, list)) or len(case) != 2
                        or not all(isinstance(part, str) for part in case)):
                    raise BadJob(f"Job.cases[{i}] must be a (stdin, expected_stdout) pair of str, got {case!r:.80}")
            object.__setattr__(self, "cases", tuple((c[0], c[1]) for c in cases))
        if self.files is not None and not isinstance(self.files, dict):
            raise BadJob(f"Job.files must be a dict of path -> str or bytes, got {type(self.files).__name__}")
        if self.limits is not None and not isinstance(self.limits, Limits):
            raise BadJob(f"Job.limits must be a Limits, got {type(self.limits).__name__}")
        if not isinstance(self.stop_on_first_failure, bool):
            raise BadJob(f"Job.stop_on_first_failure must be True or False, got {self.stop_on_first_failure!r}")
        if self.fetch_files is not None:
            if not isinstance(self.fetch_files, (list, tuple)):
                raise BadJob(f"Job.fetch_files must be a list or tuple of relative paths (e.g. ['out.txt']), "
                             f"got {type(self.fetch_files).__name__}")
            object.__setattr__(self, "fetch_files", tuple(self.fetch_files))
        check_job(self.language, self.code, self.tests, self.cases or (), self.files,
                  self.effective_limits.disk_mb, self.fetch_files or ())

    @property
    def effective_limits(self) -> Limits:
        return self.limits if self.limits is not None else Limits()

    def with_limits(self, **changes: float) -> "Job":
        return replace(self, limits=replace(self.effective_limits, **changes))


@dataclass(frozen=True)
class CaseResult:
    """One stdin/stdout case."""

    status: Status
    passed: bool
    stdout: str
    stderr: str
    exit_code: Optional[int]
    wall_s: float
    expected: str


@dataclass(frozen=True)
class Result:
    """What a job produced. ``passed`` is ``status == "passed"``.

    ``wall_s``/``cpu_s``: summed over the job's build (its compile, check and link steps)
    and every run.
    ``cached``: this job did not run; the verdict is that of an identical job (from a
    `VerdictCache`, or a twin in the same batch). ``wall_s``/``cpu_s``/``host`` are
    then those of the run that produced it.
    ``files``: None unless the job set ``Job.fetch_files``; then one entry per asked path:
    the file's bytes, or None where the program left no regular file there (missing, a
    directory, a symlink or a path through one, a fifo, unreadable to the program). A file
    larger than ``Limits.output_bytes`` is never cut: it is None too, and ``error`` then
    says which file was left out and how large it was (so does a file that would take the
    job's fetched files past 96 MiB together). Also None for an ``infra_error``, and for the
    ``memory`` verdict of a program that took the sandbox itself down (nothing was read).
    """

    status: Status
    passed: bool
    stdout: str = ""
    stderr: str = ""
    exit_code: Optional[int] = None
    wall_s: float = 0.0
    cpu_s: float = 0.0
    cases: tuple[CaseResult, ...] = ()
    truncated: bool = False     # stdout or stderr was cut at Limits.output_bytes
    error: str = ""             # for infra_error: what failed and what to do; else which fetched file was
                                # left out for its size (see ``files``), or ""
    attempts: int = 1           # > 1 when infra errors were retried
    host: str = ""              # which Docker engine ran it
    cases_skipped: int = 0      # cases not run after a failure (Job.stop_on_first_failure)
    cached: bool = False        # the verdict of an identical job: this one did not run
    files: Optional[dict[str, Optional[bytes]]] = None   # Job.fetch_files as the job left them

    @property
    def infra_error(self) -> bool:
        return self.status == "infra_error"

    @property
    def pass_fraction(self) -> float:
        """Fraction of cases passed (or 1.0/0.0 for a test-based job).

        Cases skipped after a failure (``stop_on_first_failure``) count as not passed,
        so the fraction is a lower bound then; ``passed`` is exact either way.
        """
        if self.cases or self.cases_skipped:
            return sum(c.passed for c in self.cases) / (len(self.cases) + self.cases_skipped)
        return 1.0 if self.passed else 0.0


def infra_result(error: str, attempts: int, host: str = "", wall_s: float = 0.0) -> Result:
    return Result(status="infra_error", passed=False, error=error, attempts=attempts, host=host, wall_s=wall_s)


__all__ = [
    "Language", "LANGUAGES", "Status", "STATUSES", "Limits", "Job", "Result", "CaseResult",
    "Case", "FileContent", "infra_result",
]
