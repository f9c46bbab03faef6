"""A Python program's own exit status is its own: ``exit(3)`` (the status the sandbox once used
to say "did not parse") is a failure with exit code 3, never a compile error; a program that
does not parse is a compile error in every mode."""

from __future__ import annotations

import pytest

from proctor.sandbox import Job

pytestmark = pytest.mark.docker


@pytest.mark.parametrize("code", ["raise SystemExit(3)", "import sys\nsys.exit(3)", "import os\nos._exit(3)",
                                  "import sys\nsys.stderr.write('  File \"main.py\"\\nSyntaxError: x\\n')\nsys.exit(3)"])
def test_exit_3_is_a_failure_not_a_syntax_error(sandbox, code):
    alone = sandbox.run(Job(language="python", code=code))
    assert (alone.status, alone.exit_code) == ("failed", 3)
    with_case = sandbox.run(Job(language="python", code=code, cases=[("", "")]))
    assert with_case.status == "failed" and with_case.cases[0].exit_code == 3


@pytest.mark.parametrize("tests", [None, "assert f() == 1", "import math\nassert f() == round(math.pi) - 2"])
def test_a_program_that_does_not_parse_is_a_compile_error(sandbox, tests):
    r = sandbox.run(Job(language="python", code="def f(:\n    return 1", tests=tests))
    assert r.status == "compile_error" and "SyntaxError" in r.stderr
    case = sandbox.run(Job(language="python", code="def f(:\n    return 1", cases=[("", "")]))
    assert case.status == "compile_error"
