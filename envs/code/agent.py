"""``proctor/CodeAgent-v0``: write code, run the visible tests, fix, submit; hidden tests judge.

    env = gymnasium.make("proctor/CodeAgent-v0")                   # HumanEval, its tests split
    env = gymnasium.make("proctor/CodeAgent-v0", tasks="tasks.jsonl")   # rows with visible_tests

The model has two tools: ``run_tests(code)`` runs a candidate against the task's *visible*
tests only (``data["visible_tests"]`` / ``data["visible_cases"]``) and says which failed and
how; ``python(code)`` is a stateful interpreter for experiments. The final answer (a reply
with no call, its code in a fence as for ``proctor/Code-v0``) is judged by every test of the
task (``data["tests"]`` / ``data["cases"]``), which the model never sees. HumanEval's
``check`` functions are split by `split_visible`: the statements up to its first assert are
visible, the whole function judges.
"""

from __future__ import annotations

import ast
from dataclasses import replace
from typing import Any, Mapping, Optional, Union

from proctor.pyast import parse

from ..core.sources import BadRow, ListSource, TaskSource
from ..core.types import Task
from ..core.verifier import Rubric
from ..tools.env import ToolEnv
from ..tools.episode import ToolLimits
from ..tools.python import PythonTool
from ..tools.schema import Tool, ToolContext, ToolOutput
from .tasks import code_task_from_row
from .verifier import CodeVerifier

AGENT_INSTRUCTION = (
    "{prompt}\n\nYou can run your code against the visible tests with the run_tests tool and experiment with the "
    "python tool. When you are done, answer with the whole solution in a single ```python code block, without "
    "a tool call; hidden tests judge it.")


def split_visible(tests: str, keep: int = 1) -> Optional[str]:
    """HumanEval-style ``tests`` (a ``def check(candidate)``) with only the statements up to its
    ``keep``-th assert; None when it has fewer than ``keep + 1`` asserting statements (nothing
    would stay hidden) or no ``check`` to split."""
    try:
        tree = parse(tests)
    except SyntaxError:
        return None
    check = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "check"), None)
    if check is None:
        return None
    asserting = [s for s in check.body if any(isinstance(n, ast.Assert) for n in ast.walk(s))]
    if len(asserting) <= keep:
        return None
    lines = tests.splitlines(keepends=True)
    drop = {i for s in asserting[keep:] for i in range(s.lineno - 1, s.end_lineno or s.lineno)}
    return "".join(line for i, line in enumerate(lines) if i not in drop)


def visible_task(task: Task) -> Optional[Task]:
    """The task judged by its visible tests only, or None when it has none."""
    tests, cases = task.data.get("visible_tests"), task.data.get("visible_cases")
    if not tests and not cases:
        return None
    data = {k: v for k, v in task.data.items() if k not in ("tests", "cases", "visible_tests", "visible_cases")}
    if tests:
        data["tests"] = tests
    if cases:
        data["cases"] = cases
    return replace(task, id=f"{task.id}#visible", data={**data, "partial_credit": False})


class RunTestsTool(Tool):
    """``run_tests(code)``: the candidate against the task's visible tests, through ``verifier``."""

    name = "run_tests"
    description = ("Run a candidate solution against the task's visible tests. Returns whether they pass, or the "
                   "first failure with its output.")
    parameters = {"type": "object", "properties": {"code": {
        "type": "string", "description": "The whole candidate program (the function with its imports)."}},
        "required": ["code"]}

    def __init__(self, verifier: CodeVerifier) -> None:
        self.verifier = verifier

    def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        task = visible_task(context.task)
        if task is None:
            return ToolOutput("Error: this task has no visible tests; answer when your code is ready", "error")
        limits = {**(task.data.get("limits") or {}), "wall_s": context.timeout_s}
        verdict = self.verifier.verify(replace(task, data={**task.data, "limits": limits}), str(arguments["code"]))
        if not verdict.scored:
            return ToolOutput(str(verdict.info.get("error", "the sandbox failed")), "infra_error")
        if verdict.correct:
            return ToolOutput("All visible tests passed.")
        return ToolOutput(f"The visible tests failed.\n{verdict.feedback or verdict.info.get('status', '')}".rstrip())


def agent_task(task: Task, visible: Optional[str] = None, visible_cases: Any = None) -> Task:
    """``task`` with the agent's instruction and its visible tests (given, or split from its tests)."""
    visible = visible or (split_visible(task.data["tests"]) if task.data.get("tests") else None)
    prompt = AGENT_INSTRUCTION.format(prompt=task.prompt) if isinstance(task.prompt, str) else task.prompt
    extra = {k: v for k, v in (("visible_tests", visible), ("visible_cases", visible_cases)) if v}
    return replace(task, prompt=prompt, data={**task.data, **extra})


def agent_row(row: Mapping[str, Any], row_id: str) -> Task:
    """A code row (``proctor/Code-v0``'s fields) with ``visible_tests`` and/or ``visible_cases``."""
    task = code_task_from_row(row, row_id)
    visible, cases = row.get("visible_tests"), row.get("visible_cases")
    if isinstance(visible, (list, tuple)):
        visible = "\n".join(map(str, visible)) + "\n"
    if visible is not None and not isinstance(visible, str):
        raise BadRow("code agent task", row_id, "visible_tests", f"must be a str or a list of str, got "
                     f"{type(visible).__name__}")
    if not visible and not cases and not split_visible(task.data.get("tests") or ""):
        raise BadRow("code agent task", row_id, "visible_tests", "missing: the run_tests tool needs visible tests "
                     "(a HumanEval-style check() with two or more asserts is split on its own)")
    return agent_task(task, visible, cases)


def humaneval_agent_source() -> ListSource:
    """HumanEval's problems whose tests split into visible and hidden (160 of 164)."""
    from .tasks import humaneval_source

    base = humaneval_source()
    tasks = [agent_task(t) for t in (base[i] for i in range(len(base)))]
    return ListSource([t for t in tasks if t.data.get("visible_tests")], name="humaneval-agent")


def code_agent(source: TaskSource, *, sandbox: Union[Any, Mapping[str, Any], None] = None, limits: Any = None,
               tool_limits: Union[ToolLimits, Mapping[str, Any], None] = None, parser: Any = "hermes",
               extract_fallback: str = "parse", session_memory_mb: int = 256, **kw: Any) -> ToolEnv:
    """``source``'s code tasks with ``run_tests`` and ``python``, one sandbox for the tools and the
    judge (``sandbox``: a Sandbox, RemoteSandbox or their options). ``limits``: each sandbox job's
    `Limits`; ``tool_limits``: the episode's `ToolLimits`."""
    verifier = CodeVerifier(sandbox=sandbox, limits=limits, fallback=extract_fallback)
    tools = [RunTestsTool(verifier), PythonTool(lambda: verifier.sandbox, memory_mb=session_memory_mb)]
    return ToolEnv(source, Rubric(verifier), tools=tools, parser=parser, limits=tool_limits, **kw)


__all__ = ["AGENT_INSTRUCTION", "RunTestsTool", "agent_row", "agent_task", "code_agent", "humaneval_agent_source",
           "split_visible", "visible_task"]
