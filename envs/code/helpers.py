"""The task's own helpers for its tests: the program may not stand in for them.

HumanEval's prompts define helpers beside the function to complete, and some tests
call them: /38 checks ``candidate(encode_cyclic(s)) == s``, /50 the same with
``encode_shift``, /32 checks ``poly(xs, candidate(xs))`` is near 0. The tests run
against the program's namespace, so a program that redefines the helper (an
``encode_cyclic`` that returns its input, a ``poly`` that returns 0) passes with a wrong
answer: measured, all three scored 1.0. The tests therefore get the prompt's own
definitions of the helpers they use (and of what those use, and the prompt's imports),
ahead of their own code; in the judge they shadow whatever the program defined.
"""

from __future__ import annotations

import ast
import functools
from typing import Optional

from proctor.pyast import parse

HEADER = "# The task's own helpers, used by the tests below (the program's may not stand in for them).\n"


def with_prompt_helpers(tests: str, prefix: Optional[str], entry_point: Optional[str]) -> str:
    """``tests`` preceded by the prompt's definitions they use (none used: ``tests`` unchanged)."""
    if not prefix:
        return tests
    helpers = prompt_helpers(prefix, entry_point, frozenset(_names(tests)))
    return tests if not helpers else HEADER + helpers + "\n\n" + tests


@functools.lru_cache(maxsize=1024)
def prompt_helpers(prefix: str, entry_point: Optional[str], used: frozenset[str]) -> str:
    """The source of the prompt's top-level definitions reachable from ``used``, with its imports."""
    try:
        tree = parse(prefix)
    except SyntaxError:
        return ""
    defined = {name: node for node in tree.body for name in _defines(node) if name != entry_point}
    wanted: dict[int, ast.stmt] = {}
    todo = [name for name in used if name in defined]
    while todo:
        node = defined[todo.pop()]
        if id(node) in wanted:
            continue
        wanted[id(node)] = node
        todo += [name for name in _names_in(node) if name in defined and id(defined[name]) not in wanted]
    if not wanted:
        return ""
    imports = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    lines = prefix.splitlines()
    keep = sorted([*imports, *wanted.values()], key=lambda n: n.lineno)
    return "\n".join("\n".join(lines[_first_line(n) - 1:n.end_lineno]) for n in keep) + "\n"


def _first_line(node: ast.stmt) -> int:
    """Where a statement's source starts: its first decorator, if it has any."""
    decorators = getattr(node, "decorator_list", None) or []
    return min([node.lineno, *(d.lineno for d in decorators)])


def _defines(node: ast.stmt) -> list[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return [node.name]
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return [t.id for t in targets if isinstance(t, ast.Name)]
    return []


def _names(source: str) -> set[str]:
    try:
        return _names_in(parse(source))
    except SyntaxError:
        return set()


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


__all__ = ["with_prompt_helpers", "prompt_helpers"]
