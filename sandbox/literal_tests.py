"""Python tests made only of literal assertions: judged by the sandbox's server, with no judge process.

Most tests of code datasets are a list of ``assert f(<literals>) == <literal>`` (MBPP),
or HumanEval's ``def check(candidate): assert candidate(<literals>) == <literal> ...``
followed by ``check(entry_point)``. For such tests the judge's work is to call the
program's function with data and compare the answer, as data, with data: the sandbox's
server (PID 1, root, unreadable to the program) does it itself over the same channel the
judge would use (server/calls.py), and the job costs one process instead of two.

`literal_plan` accepts only what it can judge exactly as Python would, in order:

* a module of docstrings, ``NAME = <literal>`` assignments, ``assert`` statements and
  one-parameter functions made only of asserts that the module then calls with the
  name of a program function (``check(candidate)`` ... ``check(has_close_elements)``);
* each assert tests ``CALL == LIT``, ``CALL != LIT`` (either side), ``CALL is/is not
  None/True/False``, ``CALL``, ``not CALL``, ``abs(CALL - LIT) < LIT`` (or ``<=``), or a
  literal alone (HumanEval's ``assert True``), with an optional literal message; CALL
  calls a name that is not a builtin with literal arguments only, and may be wrapped in
  one of tuple/list/set/frozenset/sorted/len (``tuple(CALL) == tuple(LIT)``);
* literals are what ``ast.literal_eval`` reads, and arithmetic on them (``3 * 19``,
  ``'ab' + 'c'``, ``2.0 / 3.0``), folded here with Python's own operators.

Anything else (an import, a loop, a helper, an f-string message) gives None: the tests
then run in the judge process as usual. Comparing data with data is the same in the
server as in a judge: the program's answer arrives as plain values (or as an object,
which equals nothing), never as code.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass
from typing import Optional

from proctor.pyast import parse

MAX_CHECKS = 2000
_BUILTINS = frozenset(dir(builtins))
_COMPARE = {ast.Eq: "eq", ast.NotEq: "ne", ast.Is: "is", ast.IsNot: "is_not"}
_IDENTITY_LITERALS = (None, True, False)
# What a check may apply to the program's answer before comparing (the judge's builtins).
TRANSFORMS = ("tuple", "list", "set", "frozenset", "sorted", "len")
_FOLD = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
         ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}
_MAX_FOLDED = 1 << 16   # the size of a folded string/list or number of digits: no literal bomb


class Unsupported(Exception):
    """The tests go beyond literal assertions."""


@dataclass(frozen=True)
class Check:
    """One assert: call ``name(*args, **kwargs)``, then test the answer ``kind`` against ``expected``."""

    line: int
    source: str                    # the assert as written, for the failure's traceback
    name: str
    args: tuple
    kwargs: tuple                  # ((name, value), ...)
    kind: str                      # eq | ne | is | is_not | true | false | close | const
    expected: object = None
    message: Optional[str] = None  # the assert's message, if it has one
    transform: str = ""            # one of TRANSFORMS, applied to the answer first
    tolerance: object = None       # close: abs(answer - expected) < tolerance (<= when inclusive)
    inclusive: bool = False


def literal_plan(tests: str) -> Optional[list[Check]]:
    """The checks of ``tests`` in order, or None when they are more than literal assertions."""
    try:
        module = parse(tests)
        checks = _module_checks(module.body, tests.splitlines())
    except (SyntaxError, ValueError, Unsupported, RecursionError, MemoryError):
        return None
    return checks if 0 < len(checks) <= MAX_CHECKS else None


def _module_checks(body: list[ast.stmt], lines: list[str]) -> list[Check]:
    templates: dict[str, tuple[str, list[ast.Assert]]] = {}
    checks: list[Check] = []
    for stmt in body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
            continue   # a docstring
        if isinstance(stmt, ast.Assign) and all(isinstance(t, ast.Name) for t in stmt.targets):
            _literal(stmt.value)   # METADATA = {...}: a value no check may use (checks use literals only)
            templates = {k: v for k, v in templates.items() if all(t.id != k for t in stmt.targets)}
            continue
        if isinstance(stmt, ast.FunctionDef):
            templates[stmt.name] = _template(stmt)
            continue
        if isinstance(stmt, ast.Assert):
            checks.append(_check(stmt, lines, {}))
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            checks.extend(_instantiate(stmt.value, templates, lines))
            continue
        raise Unsupported(type(stmt).__name__)
    return checks


def _template(func: ast.FunctionDef) -> tuple[str, list[ast.Assert]]:
    a = func.args
    if func.decorator_list or a.posonlyargs or a.vararg or a.kwonlyargs or a.kwarg or a.defaults \
            or len(a.args) != 1:
        raise Unsupported("a function that is not def check(candidate)")
    asserts = []
    for stmt in func.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue
        if isinstance(stmt, ast.Pass):
            continue
        if not isinstance(stmt, ast.Assert):
            raise Unsupported("a statement other than assert in a check function")
        asserts.append(stmt)
    return a.args[0].arg, asserts


def _instantiate(call: ast.Call, templates: dict, lines: list[str]) -> list[Check]:
    if not (isinstance(call.func, ast.Name) and call.func.id in templates and not call.keywords
            and len(call.args) == 1 and isinstance(call.args[0], ast.Name)):
        raise Unsupported("a call that is not check(<program function>)")
    target = call.args[0].id
    if target in _BUILTINS:
        raise Unsupported("the tests check a builtin")
    param, asserts = templates[call.func.id]
    return [_check(stmt, lines, {param: target}) for stmt in asserts]


def _check(stmt: ast.Assert, lines: list[str], names: dict[str, str]) -> Check:
    message = None if stmt.msg is None else str(_literal(stmt.msg))
    source = lines[stmt.lineno - 1].strip() if 0 < stmt.lineno <= len(lines) else ""
    test = stmt.test
    constant = _maybe_literal(test)
    if constant is not _NOT_LITERAL:   # assert True, "This prints if this assert fails"
        return Check(stmt.lineno, source, "", (), (), kind="const", expected=bool(constant), message=message)
    close = _close(test, names)
    if close is not None:
        name, args, kwargs, expected, tolerance, inclusive = close
        return Check(stmt.lineno, source, name, args, kwargs, kind="close", expected=expected, message=message,
                     tolerance=tolerance, inclusive=inclusive)
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return Check(stmt.lineno, source, *_call(test.operand, names), kind="false", message=message)
    if isinstance(test, ast.Call):
        return Check(stmt.lineno, source, *_call(test, names), kind="true", message=message)
    if isinstance(test, ast.Compare) and len(test.ops) == 1 and type(test.ops[0]) in _COMPARE:
        kind = _COMPARE[type(test.ops[0])]
        left, right = test.left, test.comparators[0]
        call, literal = (left, right) if _maybe_literal(left) is _NOT_LITERAL else (right, left)
        expected = _literal(_unwrap_tuple(literal))
        if kind in ("is", "is_not") and not any(expected is v for v in _IDENTITY_LITERALS):
            raise Unsupported("`is` with a value other than None/True/False")
        transform, call = _transform(call)
        if transform and kind in ("is", "is_not"):
            raise Unsupported("`is` after a transform")
        if isinstance(literal, ast.Call):   # tuple(LIT): a tuple of the literal
            expected = tuple(expected)   # type: ignore[arg-type]
        return Check(stmt.lineno, source, *_call(call, names), kind=kind, expected=expected, message=message,
                     transform=transform)
    raise Unsupported("an assertion of another shape")


_NOT_LITERAL = object()


def _maybe_literal(node: ast.AST) -> object:
    try:
        return _literal(node)
    except Unsupported:
        return _NOT_LITERAL


def _unwrap_tuple(node: ast.AST) -> ast.AST:
    """``tuple(LIT)`` on the literal side: the literal (made a tuple by the caller)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "tuple" \
            and len(node.args) == 1 and not node.keywords:
        return node.args[0]
    return node


def _transform(node: ast.AST) -> tuple[str, ast.AST]:
    """``tuple(CALL)``, ``sorted(CALL)``...: (the builtin's name, CALL); else ("", node)."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in TRANSFORMS \
            and len(node.args) == 1 and not node.keywords and isinstance(node.args[0], ast.Call):
        return node.func.id, node.args[0]
    return "", node


def _close(test: ast.AST, names: dict[str, str]) -> Optional[tuple]:
    """``abs(CALL - LIT) < LIT`` (or ``LIT - CALL``, or ``<=``), or None."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Lt, ast.LtE))):
        return None
    left = test.left
    if not (isinstance(left, ast.Call) and isinstance(left.func, ast.Name) and left.func.id == "abs"
            and len(left.args) == 1 and not left.keywords and isinstance(left.args[0], ast.BinOp)
            and isinstance(left.args[0].op, ast.Sub)):
        return None
    diff = left.args[0]
    call, literal = (diff.left, diff.right) if isinstance(diff.left, ast.Call) else (diff.right, diff.left)
    name, args, kwargs = _call(call, names)
    return name, args, kwargs, _literal(literal), _literal(test.comparators[0]), isinstance(test.ops[0], ast.LtE)


def _call(node: ast.AST, names: dict[str, str]) -> tuple[str, tuple, tuple]:
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
        raise Unsupported("not a call of a name")
    name = names.get(node.func.id, node.func.id)
    if name in _BUILTINS or node.func.id in _BUILTINS:
        raise Unsupported("a call of a builtin")
    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        raise Unsupported("*args or **kwargs")
    args = tuple(_literal(a) for a in node.args)
    kwargs = tuple((k.arg, _literal(k.value)) for k in node.keywords)
    return name, args, kwargs


def _literal(node: ast.AST) -> object:
    """A literal, or arithmetic on literals folded as Python folds it (bounded: no literal bomb)."""
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):   # [2 * 2]: its items folded
        items = [_literal(e) for e in node.elts]
        return list(items) if isinstance(node, ast.List) else tuple(items) if isinstance(node, ast.Tuple) \
            else _hashable_set(items)
    if isinstance(node, ast.Dict) and None not in node.keys:
        try:
            return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values)}   # type: ignore[arg-type]
        except TypeError:
            raise Unsupported("an unhashable key") from None
    if isinstance(node, ast.BinOp) and type(node.op) in _FOLD:
        left, right = _literal(node.left), _literal(node.right)
        if not all(type(v) in (int, float, str) for v in (left, right)):
            raise Unsupported("arithmetic on values other than numbers and strings")
        try:
            value = _FOLD[type(node.op)](left, right)
        except (ArithmeticError, TypeError, ValueError, MemoryError) as exc:
            raise Unsupported(f"arithmetic that raises: {exc}") from None
        if (isinstance(value, str) and len(value) > _MAX_FOLDED) or \
                (isinstance(value, int) and value.bit_length() > _MAX_FOLDED):
            raise Unsupported("a folded literal too large")
        return value
    raise Unsupported("not a literal")


def _hashable_set(items: list) -> set:
    try:
        return set(items)
    except TypeError:
        raise Unsupported("an unhashable set item") from None


def encode_plan(checks: list[Check]) -> list[dict]:
    """The checks as the server gets them: values in pyrpc's encoding (data only)."""
    from .server.pywire import Codec

    codec = Codec(None)   # literals are data: no handle is ever made
    return [{"line": c.line, "source": c.source, "name": c.name, "args": [codec.encode(a) for a in c.args],
             "kwargs": [[k, codec.encode(v)] for k, v in c.kwargs], "kind": c.kind,
             "expected": codec.encode(c.expected), "message": c.message, "transform": c.transform,
             "tolerance": codec.encode(c.tolerance), "inclusive": c.inclusive} for c in checks]


__all__ = ["Check", "encode_plan", "literal_plan"]
