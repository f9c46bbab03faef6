"""Literal tests judged by the server (sandbox/literal_tests.py, server/calls.py) against the judge process.

The planner must accept only what it can judge exactly as Python would; and a program
must get the same verdict whether its literal tests are judged by the server or, the
same tests with one harmless non-literal line, by the judge process.
"""

from __future__ import annotations

import pytest

from proctor.sandbox import Job, Limits
from proctor.sandbox.literal_tests import literal_plan

HUMANEVAL_STYLE = '''
METADATA = {'author': 'jt', 'dataset': 'test'}


def check(candidate):
    """Docstring."""
    assert candidate([1, 2], 3) == 3
    assert not candidate([], 0)
    assert candidate(x=[5], y=1) != 2, "the message"
    assert candidate([1], 1) is not None


check(add)
'''


def test_the_planner_reads_humaneval_and_mbpp_shapes():
    plan = literal_plan(HUMANEVAL_STYLE)
    assert [(c.name, c.kind) for c in plan] == [("add", "eq"), ("add", "false"), ("add", "ne"), ("add", "is_not")]
    assert plan[0].args == ([1, 2], 3) and plan[0].expected == 3 and plan[0].line == 7
    assert plan[2].kwargs == (("x", [5]), ("y", 1)) and plan[2].message == "the message"
    mbpp = literal_plan('assert remove_Occ("hello","l") == "heo"\nassert 3 == f(1, -2.5)\nassert g((1, 2), {1: {2}})\n')
    assert [(c.name, c.kind, c.expected) for c in mbpp] == [("remove_Occ", "eq", "heo"), ("f", "eq", 3), ("g", "true", None)]


def test_the_planner_folds_literals_and_reads_humaneval_idioms():
    plan = literal_plan("assert True, 'This prints if this assert fails'\n"
                        "assert abs(f(1) - 2.0 / 3.0) < 1e-6\nassert abs(0.5 - f(2)) <= 0.1\n"
                        "assert tuple(f([1])) == tuple([1, 2])\nassert f(3 * 19) == [3, 19]\n"
                        "assert sorted(f('ab' + 'c')) == ['a']\nassert len(f(0)) == 2\n")
    assert [c.kind for c in plan] == ["const", "close", "close", "eq", "eq", "eq", "eq"]
    assert plan[1].expected == 2.0 / 3.0 and plan[1].tolerance == 1e-6 and not plan[1].inclusive
    assert plan[2].inclusive and plan[3].transform == "tuple" and plan[3].expected == (1, 2)
    assert plan[4].args == (57,) and plan[5].args == ("abc",) and plan[5].transform == "sorted"


@pytest.mark.parametrize("tests", [
    "assert f(1) == 1 / 0\n",                                  # folding raises
    "assert f('x' * 100000) == 1\n",                           # a folded literal too large
    "assert f(1) == 2 ** 10\n",                                # an operator not folded
    "assert abs(f(1) - g(1)) < 1e-6\n",                        # two calls
    "import math\nassert f(1) == 1\n",                         # an import
    "for i in range(3):\n    assert f(i) == i\n",              # a loop
    "assert f(1) == g(1)\n",                                   # two calls
    "assert f(x) == 1\n",                                      # a name as an argument
    "assert sorted([3]) == [3]\n",                             # a builtin alone
    "assert f(1) == 1, f'{f(1)}'\n",                           # a message that calls
    "assert f(1) is 5\n",                                      # `is` with a number
    "assert f(*[1]) == 1\n",                                   # *args
    "def check(c):\n    x = c(1)\n    assert x == 1\ncheck(f)\n",   # a statement that is not assert
    "def check(c, d):\n    assert c(1) == d\ncheck(f, 1)\n",    # two parameters
    "def check(c):\n    assert c(1) == 1\ncheck(len)\n",        # checks a builtin
    "assert 1 == 1\n",                                         # a comparison without a call
    "assert abs(f(1)) < 1e-6\n",                               # abs of the call alone
    "assert len(f(1)) > 3\n",                                  # an order comparison
    "x = 1\n",                                                 # no assert
    "assert f(1) == 1 == 1\n",                                 # a chained comparison
    "",
])
def test_the_planner_refuses_anything_more(tests):
    assert literal_plan(tests) is None


# ---------------------------------------------------------------- server vs judge, for real

pytestmark_docker = pytest.mark.docker
LIM = Limits(wall_s=3, cpu_s=1, memory_mb=256)
TESTS = ("assert True\nassert f([1, 2]) == [2, 4]\nassert f([]) == []\nassert f([0]) != [1]\nassert f([3])\n"
         "assert tuple(f([2 * 2])) == tuple([8])\n")
PROGRAMS = {
    "right": "def f(xs):\n    return [2 * x for x in xs]\n",
    "wrong": "def f(xs):\n    return [x for x in xs]\n",
    "tuple for a list": "def f(xs):\n    return tuple(2 * x for x in xs)\n",
    "raises": "def f(xs):\n    raise ValueError('no')\n",
    "asserts itself": "def f(xs):\n    assert False, 'mine'\n",
    "always-equal object": "class E:\n    def __eq__(self, o):\n        return True\ndef f(xs):\n    return E()\n",
    "exits inside the call": "import sys\ndef f(xs):\n    sys.exit(0)\n",
    "kills itself": "import os, signal\ndef f(xs):\n    os.kill(os.getpid(), signal.SIGKILL)\n",
    "loops": "def f(xs):\n    while True:\n        pass\n",
    "syntax error": "def f(xs)\n    return xs\n",
    "missing": "def g(xs):\n    return xs\n",
    "raises at import": "raise RuntimeError('import')\ndef f(xs):\n    return xs\n",
    "exits at import": "import sys\nsys.exit(0)\n",
    "list subclass": "class L(list):\n    def __eq__(self, o):\n        return True\ndef f(xs):\n    return L(x for x in xs)\n",
    "int subclass": "class I(int):\n    pass\ndef f(xs):\n    return [I(2 * x) for x in xs]\n",
    "binds a stdlib function": "import operator\nf = operator.neg\n",
    "returns a generator": "def f(xs):\n    return (2 * x for x in xs)\n",
    "returns a string": "def f(xs):\n    return ''.join(str(2 * x) for x in xs)\n",
}


CLOSE_TESTS = "assert abs(g(2) - 2.0 / 3.0) < 1e-9\nassert abs(1.0 - g(3)) <= 0\n"
CLOSE_PROGRAMS = {
    "right": "def g(x):\n    return x / 3\n",
    "wrong": "def g(x):\n    return x / 4\n",
    "returns a string": "def g(x):\n    return str(x)\n",
    "returns an object": "class N:\n    def __sub__(self, o):\n        return 0\n    __rsub__ = __sub__\ndef g(x):\n    return N()\n",
}


def _same_verdict(sandbox, code: str, tests: str, should_pass: bool) -> None:
    literal = Job("python", code, tests=tests, limits=LIM)
    judged = Job("python", code, tests="import math\n" + tests, limits=LIM)   # one non-literal line
    assert literal_plan(literal.tests) is not None and literal_plan(judged.tests) is None
    a, b = sandbox.run_many([literal, judged])
    assert a.status == b.status, f"server: {a.status} {a.stderr[-300:]!r}\njudge: {b.status} {b.stderr[-300:]!r}"
    assert a.status != "infra_error" and (a.status == "passed") == should_pass, a.stderr[-300:]


@pytest.mark.docker
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_the_server_and_the_judge_give_the_same_verdict(sandbox, name):
    _same_verdict(sandbox, PROGRAMS[name], TESTS, name in ("right", "int subclass"))


@pytest.mark.docker
@pytest.mark.parametrize("name", list(CLOSE_PROGRAMS))
def test_the_same_verdict_for_tolerance_checks(sandbox, name):
    _same_verdict(sandbox, CLOSE_PROGRAMS[name], CLOSE_TESTS, name == "right")
