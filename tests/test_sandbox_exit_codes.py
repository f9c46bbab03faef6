"""A program's own exit status is its own: a Python program's ``exit(3)`` (the status the sandbox
once used to say "did not parse") is a failure with exit code 3, never a compile error; a program
that does not parse is a compile error in every mode; a C program that closes its outputs before
it ends keeps its status, its time and its limits."""

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


# A program's end is no event to the server once its outputs are closed: it waits for the exit
# in growing steps. A program that closes them and runs on is still timed and limited as itself.
CLOSES_THEN_RUNS = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
int main(void) {
    printf("closing\n");
    fflush(stdout);
    close(1);
    close(2);
    clock_t start = clock();
    volatile unsigned long spin = 0;
    while (clock() - start < %s) spin++;
    return 7;
}
"""


def test_a_program_that_closes_its_outputs_then_exits_keeps_its_status_and_time(sandbox):
    r = sandbox.run(Job(language="c", code=CLOSES_THEN_RUNS % "CLOCKS_PER_SEC / 2"))
    assert (r.status, r.exit_code, r.stdout) == ("failed", 7, "closing\n")
    assert 0.4 < r.cpu_s < 3.0, r


def test_a_program_that_closes_its_outputs_then_spins_is_stopped_at_its_cpu_limit(sandbox):
    from proctor.sandbox import Limits

    r = sandbox.run(Job(language="c", code=CLOSES_THEN_RUNS % "100 * CLOCKS_PER_SEC",
                        limits=Limits(cpu_s=1.0, wall_s=10.0)))
    assert r.status == "timeout" and r.stdout == "closing\n", r
