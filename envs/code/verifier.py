"""`CodeVerifier`: run a completion's program against the task's tests in the sandbox.

A task's ``data`` says how to judge it:

* ``language``: ``python`` (default), ``c``, ``cpp``, ``java``, ``go``, ``rust`` or ``javascript``.
* ``tests``: Python appended to the program (HumanEval/MBPP asserts), or for C/C++ a
  second translation unit with its own ``main``.
* ``cases``: ``[[stdin, expected_stdout], ...]``; the program must print the expected output.
* ``entry_point``: the function under test; Python tests that define ``check`` but
  never call it get ``check(<entry_point>)`` appended.
* ``prompt_prefix`` (Python): code the model was asked to continue (HumanEval's
  signature and docstring), put in front of the extracted code.
* ``partial_credit``: reward the fraction of cases passed instead of all-or-nothing.
  Without it the reward is binary, so the sandbox stops at the first failing case
  (``Job.stop_on_first_failure``): the verdict is the same, the rest is not run.
* ``limits``: a dict of `Limits` fields that override the verifier's for this task.

A completion with no extractable code scores 0 without a sandbox run; a sandbox that
failed (after its retries), or that has no host able to start containers at all, gives
``Verdict.infra``, which trainers drop, never 0.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re
import threading
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence, Union

from proctor.sandbox import BadJob, InfraError, Job, Limits, Result, Sandbox
from proctor.sandbox.runner import JobRunner
from ..core.types import Task, Verdict
from ..core.verifier import Verifier, all_verdicts
from .extract import after_thinking, extract_code, normalize_language, python_parses
from .feedback import failure_feedback, tail
from .helpers import with_prompt_helpers

NO_CODE_FEEDBACK = "No code found. Put your whole solution in one ```{lang} code block."
_FENCE_NAME = {"python": "python", "c": "c", "cpp": "cpp", "java": "java", "go": "go", "rust": "rust",
               "javascript": "javascript"}


BACKENDS = ("docker", "ray")


def make_sandbox(options: Mapping[str, Any]) -> JobRunner:
    """The sandbox ``options`` describe; a bad key is a clear error.

    ``backend: ray`` (with ``address``, and `FleetOptions` keys): a `RaySandbox` on the
    cluster's sandbox fleet; a ``url``: a `RemoteSandbox`; else (``backend: docker``, the
    default) a local `Sandbox`. Ray is imported only for ``backend: ray``.
    """
    options = dict(options)
    backend = options.pop("backend", "docker")
    if backend not in BACKENDS:
        raise ValueError(f"sandbox.backend is {backend!r}; it is one of {', '.join(BACKENDS)}")
    if backend == "ray":
        from proctor.sandbox.fleet import FleetOptions, RaySandbox

        allowed = [*inspect.signature(RaySandbox).parameters, *FleetOptions.__dataclass_fields__]
        allowed.remove("options")
        make = RaySandbox
    elif options.get("url"):
        from proctor.sandbox.remote import RemoteSandbox

        allowed, make = list(inspect.signature(RemoteSandbox).parameters), RemoteSandbox
    else:
        allowed, make = list(inspect.signature(Sandbox).parameters), Sandbox
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise ValueError(f"sandbox.{unknown[0]} is not an option of {make.__name__}; its options are "
                         f"{', '.join(allowed)}")
    return make(**options)


@dataclass(frozen=True)
class Extracted:
    """``code``: what the model wrote; ``program``: what runs (with the prompt it continues)."""

    code: str
    program: str


class CodeVerifier(Verifier):
    """Judges code completions in the Docker sandbox; ``verify_batch`` runs a whole batch at once.

    ``sandbox``: a `Sandbox` or `RemoteSandbox` to share (the caller closes it); or a
    mapping, as a config file gives it: ``{url: ..., token_file: ...}`` (any
    `RemoteSandbox` argument) judges on a ``proctor sandbox serve`` service,
    ``{backend: ray, address: auto}`` on the Ray cluster's sandbox fleet (docs/ray.md),
    other keys are `Sandbox` arguments; without one (or with a mapping), the verifier starts its own
    on first use and ``close`` stops it. ``limits``: per-job limits unless a task's ``data["limits"]`` overrides
    them. ``extract_mode`` / ``fallback``: see `extract_code`.
    """

    def __init__(self, sandbox: Union[JobRunner, Mapping[str, Any], None] = None, limits: Optional[Limits] = None,
                 extract_mode: str = "last", *, fallback: str = "parse",
                 sandbox_options: Optional[Mapping[str, Any]] = None) -> None:
        extract_code("", "python", extract_mode, fallback=fallback)   # fail now on a bad mode
        self.limits = limits if limits is not None else Limits()
        self.extract_mode = extract_mode
        self.fallback = fallback
        if isinstance(sandbox, Mapping):
            sandbox_options, sandbox = {**(sandbox_options or {}), **sandbox}, None
        self._sandbox: Optional[JobRunner] = sandbox
        self._owns_sandbox = sandbox is None
        self._sandbox_options = dict(sandbox_options or {})
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ lifecycle
    @property
    def sandbox(self) -> JobRunner:
        """The sandbox jobs go to, started on first use when none was given."""
        with self._lock:
            if self._sandbox is None:
                self._sandbox = make_sandbox(self._sandbox_options)
            return self._sandbox

    def warmup(self, languages: Sequence[str] = ("python",)) -> None:
        """Start containers for these languages now, sized for this verifier's limits."""
        self.sandbox.warmup([normalize_language(x) for x in languages], limits=self.limits)

    def close(self) -> None:
        with self._lock:
            if self._owns_sandbox and self._sandbox is not None:
                self._sandbox.close()
                self._sandbox = None

    def __enter__(self) -> "CodeVerifier":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ judging
    def verify(self, task: Task, completion: str) -> Verdict:
        return self.verify_batch([task], [completion])[0]

    def verify_batch(self, tasks: Sequence[Task], completions: Sequence[str]) -> list[Verdict]:
        """Judge every pair; all runnable jobs go to the sandbox in one ``run_many``."""
        if len(tasks) != len(completions):
            raise ValueError(f"{len(tasks)} tasks but {len(completions)} completions: they go in pairs")
        verdicts: list[Optional[Verdict]] = [None] * len(tasks)
        jobs: list[Job] = []
        where: list[tuple[int, int]] = []   # (index in the batch, extracted code length)
        for i, (task, completion) in enumerate(zip(tasks, completions)):
            spec = task_spec(task)
            found = self._extract(spec, completion)
            if found is None:
                lang = _FENCE_NAME[spec["language"]]
                verdicts[i] = Verdict(reward=0.0, parts={self.name: 0.0}, correct=False,
                                      feedback=NO_CODE_FEEDBACK.format(lang=lang),
                                      info={"reason": "no_code", "code_chars": 0})
                continue
            jobs.append(build_job(spec, found.program, self.limits))
            where.append((i, len(found.code)))
        if jobs:
            try:
                results = self.sandbox.run_many(jobs)
            except InfraError as exc:   # no host can run anything (e.g. NoHostAvailable): not judged
                for i, _ in where:
                    verdicts[i] = Verdict.infra(f"sandbox: {exc}")
                return all_verdicts(verdicts, f"{type(self).__name__}.verify_batch")
            for (i, code_chars), job, result in zip(where, jobs, results):
                verdicts[i] = self.score(tasks[i], job, result, code_chars)
        return all_verdicts(verdicts, f"{type(self).__name__}.verify_batch")

    def extract(self, task: Task, completion: str) -> Optional[Extracted]:
        """The code in ``completion`` and the program to run for it, or None when there is none."""
        return self._extract(task_spec(task), completion)

    def _extract(self, spec: Mapping[str, Any], completion: str) -> Optional[Extracted]:
        lang = spec["language"]
        code = extract_code(completion, lang, self.extract_mode, fallback=self.fallback)
        prefix = spec["prompt_prefix"]
        if lang != "python" or not prefix:
            return None if code is None else Extracted(code, code)
        if code is None:
            # A base model continues the function body without any fence: it parses only
            # together with the prompt it continues.
            answer = after_thinking(completion) if isinstance(completion, str) else ""
            joined = _join_continuation(prefix, answer)
            return Extracted(answer, joined) if answer.strip() and python_parses(joined) else None
        return Extracted(code, assemble_python(code, prefix, spec["entry_point"]))

    def score(self, task: Task, job: Job, result: Result, code_chars: int) -> Verdict:
        """A sandbox `Result` as a `Verdict`."""
        info: dict[str, Any] = {"status": result.status, "attempts": result.attempts,
                                "code_chars": code_chars, "wall_s": result.wall_s,
                                "stderr_tail": tail(result.stderr, 500)}
        if result.infra_error:
            return Verdict.infra(result.error or "the sandbox failed without saying why",
                                 **{k: v for k, v in info.items() if k != "status"},
                                 sandbox_status=result.status, host=result.host)
        if result.cases:
            info["cases_passed"] = sum(c.passed for c in result.cases)
            info["cases"] = len(result.cases)
        reward = 1.0 if result.passed else 0.0
        if task.data.get("partial_credit") and result.cases:
            reward = _case_fraction(job, result)
        return Verdict(reward=reward, parts={self.name: reward}, correct=result.passed, info=info,
                       feedback=None if result.passed else failure_feedback(job, result))


# --------------------------------------------------------------------------- building jobs

def task_spec(task: Task) -> dict[str, Any]:
    """What the verifier needs from ``task.data``, checked: a broken task raises ValueError."""
    data = task.data
    lang = normalize_language(data.get("language", "python"))
    tests, cases = data.get("tests"), data.get("cases")
    if isinstance(tests, (list, tuple)):
        tests = "\n".join(str(t) for t in tests)
    if not tests and not cases:
        raise ValueError(f"task {task.id!r} has neither data['tests'] nor data['cases']: a code task "
                         "needs one of them to be judged (build it with code_task_from_row)")
    return {"language": lang, "tests": tests or None, "cases": [tuple(c) for c in cases] if cases else None,
            "entry_point": data.get("entry_point") or None, "prompt_prefix": data.get("prompt_prefix") or None,
            "limits": data.get("limits") or None, "task_id": task.id,
            "partial_credit": bool(data.get("partial_credit"))}


def build_job(spec: Mapping[str, Any], code: str, limits: Limits) -> Job:
    lang, tests = spec["language"], spec["tests"]
    if tests and lang == "python":
        tests = with_prompt_helpers(python_tests(tests, spec["entry_point"]), spec["prompt_prefix"],
                                    spec["entry_point"])
    elif tests and lang in ("c", "cpp"):
        code = rename_main(code, tests)
    if spec["limits"]:
        try:
            limits = dataclasses.replace(limits, **spec["limits"])
        except TypeError as exc:
            raise ValueError(f"task {spec['task_id']!r}: data['limits'] has a field Limits does not "
                             f"know ({exc}); use wall_s, cpu_s, memory_mb, ...") from None
    # A binary reward needs only the first failing case (partial credit needs them all).
    try:
        return Job(language=lang, code=code, tests=tests, cases=spec["cases"], limits=limits,
                   stop_on_first_failure=bool(spec["cases"]) and not spec["partial_credit"])
    except BadJob as exc:   # the task's data, never the model's answer: name the task
        raise BadJob(f"task {spec['task_id']!r}: {exc}") from None


_DEFINES_CHECK = re.compile(r"^(async\s+)?def\s+check\s*\(", re.M)
_CALLS_CHECK = re.compile(r"(?<![\w.])check\s*\(")


def python_tests(tests: str, entry_point: Optional[str]) -> str:
    """HumanEval's tests define ``check(candidate)`` and leave the call to the harness."""
    if not entry_point or not _DEFINES_CHECK.search(tests):
        return tests
    calls = len(_CALLS_CHECK.findall(tests)) - len(_DEFINES_CHECK.findall(tests))
    return tests if calls > 0 else tests.rstrip() + f"\n\n\ncheck({entry_point})\n"


def defines(code: str, name: str) -> bool:
    """Whether ``code`` defines ``name`` at module level (a def, class or assignment)."""
    return re.search(rf"^(async\s+def|def|class)\s+{re.escape(name)}\b|^{re.escape(name)}\s*=",
                     code, re.M) is not None


def assemble_python(code: str, prefix: str, entry_point: Optional[str]) -> str:
    """The program for a task whose prompt is code to complete (HumanEval).

    A continuation of the function body goes right after the prompt. A whole function
    goes after the complete prompt: its imports and helper functions (HumanEval/10, /38
    define two) stay available, and the model's definition replaces the prompt's stub.
    """
    continuation = (not defines(code, entry_point)) if entry_point else code[:1] in (" ", "\t")
    if continuation:
        return _join_continuation(prefix, code)
    # A __future__ import must open the module, so such code cannot follow the prompt.
    if "__future__" in code or not _parses_cached(prefix):
        return code
    return prefix.rstrip() + "\n\n\n" + code


@functools.lru_cache(maxsize=4096)
def _parses_cached(prefix: str) -> bool:
    # A batch holds G completions per prompt: parse each prompt once, not G times.
    return python_parses(prefix)


def _join_continuation(prefix: str, body: str) -> str:
    return prefix if not body.strip() else (prefix if prefix.endswith("\n") else prefix + "\n") + body.lstrip("\n")


_MAIN = re.compile(r"\bmain\s*\(")


def rename_main(code: str, tests: str) -> str:
    """Tests that bring their own ``main`` would clash with a demo ``main`` in the answer
    (a link error, scored as a compile error): rename the answer's one out of the way."""
    if not (_MAIN.search(tests) and _MAIN.search(code)):
        return code
    return "#define main proctor_answer_main\n#line 1\n" + code


def _case_fraction(job: Job, result: Result) -> float:
    cases = result.cases
    passed = sum(c.passed for c in cases)
    if not job.tests:
        return passed / len(cases)
    # The test run counts as one more case. Result.status is the test run's status
    # unless that passed, in which case it is the first failing case's.
    failing = next((c for c in cases if not c.passed), None)
    tests_ok = result.passed or (failing is not None and failing.status == result.status
                                 and result.exit_code == 0)
    return (passed + tests_ok) / (len(cases) + 1)


__all__ = ["CodeVerifier", "Extracted", "assemble_python", "build_job", "defines", "python_tests", "rename_main",
           "task_spec"]
