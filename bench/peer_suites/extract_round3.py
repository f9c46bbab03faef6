"""Case readers for the peers added in round 3 (issue 25): rllm, TRL, SkyRL.

Their tests do not call a grader with (prediction, gold) literals in one expression, so
each has a reader of its own; like ``extract_cases.py`` they read literals with ``ast``
and never execute the tests.

* rllm ``tests/rewards/test_math_reward.py``: ``model_response = "..."``,
  ``task_info = {..., "ground_truth": ...}``, ``output = reward(task_info, model_response)``,
  then ``assert output.is_correct is True`` / ``assert not output.is_correct``. A list of
  golds is read as rllm reads it (empty ones dropped); a list of several golds, a missing
  gold and a non-math ``problem_type`` are skipped.
* TRL ``tests/test_rewards.py``: ``accuracy_reward``, ``reasoning_accuracy_reward`` (default
  delimiters only) and the cosine-scaled reward (its sign is the accuracy) on literal
  lists of completions and solutions, checked by ``assert rewards[i] == x`` or
  ``assert rewards == [...]``; ``None`` rewards (an unparsable gold) are skipped.
* SkyRL ``skyrl-gym/tests/test_aime.py``: ``parametrize("output, ground_truth, expected")``
  with rewards 1.0 / -1.0.
"""

from __future__ import annotations

import ast
from typing import Any, Optional

from extract_cases import Case, NotLiteral, _call_name, literal, parametrized


def rllm_cases(suite: str, rel: str, tree: ast.AST) -> tuple[list[Case], int]:
    """rllm: each ``reward(task_info, model_response)`` and the ``is_correct`` assert after it."""
    out: list[Case] = []
    skipped = 0
    for fn in _functions(tree):
        env: dict[str, Any] = {}
        pending: Optional[tuple[str, Any]] = None
        for stmt in fn.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                if _call_name(stmt.value) == "reward" and len(stmt.value.args) == 2:
                    info, response = (_value(a, env) for a in stmt.value.args)
                    pending = (response, info) if isinstance(info, dict) else None
                    continue
                try:
                    env[stmt.targets[0].id] = literal(stmt.value, env)
                except NotLiteral:
                    pass
                continue
            label = _is_correct(stmt)
            if label is None or pending is None:
                continue
            response, info = pending
            pending = None
            gold = _rllm_gold(info.get("ground_truth"))
            if gold is None or info.get("problem_type") != "MATH" or not isinstance(response, str):
                skipped += 1
                continue
            out.append(Case(suite, f"{rel}::{fn.name}", response, gold, label))
    return out, skipped


def trl_cases(suite: str, rel: str, tree: ast.AST) -> tuple[list[Case], int]:
    """TRL: literal completions/solutions passed to an accuracy reward, and the asserts on it."""
    out: list[Case] = []
    skipped = 0
    graders = ("accuracy_reward", "reasoning_accuracy_reward", "reward_fn")
    for fn in _functions(tree):
        env: dict[str, Any] = {}
        rows: Optional[list[tuple[str, str]]] = None
        sign = False
        for stmt in fn.body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
                call = stmt.value
                if _call_name(call) in graders and isinstance(call, ast.Call):
                    rows = _trl_rows(call, env)
                    sign = _call_name(call) == "reward_fn"
                    skipped += rows is None
                    continue
                try:
                    env[stmt.targets[0].id] = literal(call, env)
                except NotLiteral:
                    pass
                continue
            if rows is None or not isinstance(stmt, ast.Assert):
                continue
            for i, reward in _trl_asserts(stmt.test):
                if reward is None or i >= len(rows):
                    skipped += 1
                    continue
                pred, gold = rows[i]
                out.append(Case(suite, f"{rel}::{fn.name}", pred, gold, reward > 0 if sign else reward == 1.0))
    return out, skipped


def skyrl_cases(suite: str, rel: str, tree: ast.AST) -> tuple[list[Case], int]:
    """SkyRL: ``(output, ground_truth, expected)`` rows, expected 1.0 (right) or -1.0 (wrong)."""
    out: list[Case] = []
    skipped = 0
    for fn, rows, bad in parametrized(tree):
        skipped += bad
        for row in rows:
            if not {"output", "ground_truth", "expected"} <= set(row) or row["expected"] not in (1.0, -1.0):
                skipped += 1
                continue
            out.append(Case(suite, f"{rel}::{fn.name}", str(row["output"]), str(row["ground_truth"]),
                            row["expected"] == 1.0))
    return out, skipped


CUSTOM = {"rllm": rllm_cases, "trl": trl_cases, "skyrl": skyrl_cases}


def _functions(tree: ast.AST) -> list[ast.FunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]


def _value(node: ast.AST, env: dict[str, Any]) -> Any:
    try:
        return literal(node, env)
    except NotLiteral:
        return None


def _is_correct(stmt: ast.stmt) -> Optional[bool]:
    """The label of ``assert output.is_correct [is True]`` / ``assert not output.is_correct``."""
    if not isinstance(stmt, ast.Assert):
        return None
    test, label = stmt.test, True
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        test, label = test.operand, False
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], ast.Is):
        if isinstance(test.comparators[0], ast.Constant) and isinstance(test.comparators[0].value, bool):
            label = label == test.comparators[0].value
            test = test.left
    if isinstance(test, ast.Attribute) and test.attr == "is_correct":
        return label
    return None


def _rllm_gold(gt: Any) -> Optional[str]:
    """rllm's gold: a string or number; a list keeps its non-empty entries (none: "")."""
    if isinstance(gt, (str, int, float)) and not isinstance(gt, bool):
        return str(gt)
    if isinstance(gt, list):
        kept = [str(g) for g in gt if str(g).strip() and str(g).strip() != "\\boxed{}"]
        if len(kept) <= 1:
            return kept[0] if kept else ""
    return None


def _trl_rows(call: ast.Call, env: dict[str, Any]) -> Optional[list[tuple[str, str]]]:
    """(completion text, solution) pairs of a reward call, or None (a non-default option,
    a non-literal argument)."""
    if any(k.arg not in (None,) for k in call.keywords) or len(call.args) < 2:
        return None
    completions, solutions = _value(call.args[0], env), _value(call.args[1], env)
    if not isinstance(completions, list) or not isinstance(solutions, list) or len(completions) != len(solutions):
        return None
    try:
        return [(c[0]["content"], str(s)) for c, s in zip(completions, solutions)]
    except (KeyError, IndexError, TypeError):
        return None


def _trl_asserts(test: ast.AST) -> list[tuple[int, Optional[float]]]:
    """(index, reward) pairs of ``rewards[i] == x`` / ``rewards[i] is None`` / ``rewards == [..]``."""
    if not isinstance(test, ast.Compare) or len(test.ops) != 1 or not isinstance(test.left, (ast.Subscript, ast.Name)):
        return []
    right = test.comparators[0]
    if isinstance(test.left, ast.Subscript) and isinstance(test.left.slice, ast.Constant):
        i = test.left.slice.value
        if isinstance(test.ops[0], ast.Is):
            return [(i, None)]
        v = _number(right)
        return [(i, v)] if isinstance(test.ops[0], ast.Eq) and v is not None else []
    if isinstance(test.left, ast.Name) and isinstance(test.ops[0], ast.Eq) and isinstance(right, ast.List):
        return [(i, _number(e)) for i, e in enumerate(right.elts)]
    return []


def _number(node: ast.AST) -> Optional[float]:
    """A literal number, also ``pytest.approx(x, ...)``."""
    if isinstance(node, ast.Call) and _call_name(node) == "approx" and node.args:
        node = node.args[0]
    v = _value(node, {})
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None
