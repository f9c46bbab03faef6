"""C++: <bits/stdc++.h> and the preludes (images/cpp/preludes: include blocks a unit may start
with) are precompiled in the image with the jobs' own flags, and a program's verdict never
depends on them (GCC reads a .gch only where it is valid for the program; a prelude's lines are
blanked, so messages keep their line numbers). The tests' object is made once per container
for each exact tests source; a program's verdict never depends on an earlier job's."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from proctor.sandbox import Job, Limits
from proctor.sandbox.engine import connect
from proctor.sandbox.images import require_image

pytestmark = pytest.mark.docker


def test_the_jobs_compile_reads_the_precompiled_header(docker_ready):
    ref = require_image(connect(), "cpp")
    out = subprocess.run(["docker", "run", "--rm", "--network=none", "--entrypoint", "python3", ref,
                          "/opt/proctor/native.py", "pch-used"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("bits/stdc++.h.gch")


CASES = [("1 2\n", "3\n"), ("-5 5\n", "0\n")]
SUM = "using namespace std;\nint main(){ long long a, b; cin >> a >> b; cout << a + b << endl; }\n"


@pytest.mark.parametrize("head", ["#include <bits/stdc++.h>\n",                     # the precompiled header
                                  "#include <iostream>\n#include <bits/stdc++.h>\n",  # after another: not used
                                  "#define NDEBUG 1\n#include <bits/stdc++.h>\n",     # a macro first: GCC decides
                                  "#include <iostream>\n"])
def test_verdicts_do_not_depend_on_it(sandbox, head):
    right = sandbox.run(Job(language="cpp", code=head + SUM, cases=CASES))
    assert right.status == "passed", right.stderr
    wrong = sandbox.run(Job(language="cpp", code=head + SUM.replace("a + b", "a - b"), cases=CASES))
    assert wrong.status == "failed"


def test_a_macro_that_breaks_the_headers_still_breaks_them(sandbox):
    """Were the .gch read in spite of the macro, this would compile: GCC refuses the .gch and parses the header."""
    r = sandbox.run(Job(language="cpp", code="#define vector 42\n#include <bits/stdc++.h>\nint main(){}\n",
                        limits=Limits(compile_s=60)))
    assert r.status == "compile_error"


PRELUDES = sorted((Path(__file__).resolve().parents[1] / "images" / "cpp" / "preludes").glob("*.h"))


def test_the_jobs_compile_reads_each_preludes_precompiled_header(docker_ready):
    ref = require_image(connect(), "cpp")
    out = subprocess.run(["docker", "run", "--rm", "--network=none", "--entrypoint", "python3", ref,
                          "/opt/proctor/native.py", "preludes-used"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    used = dict(line.split() for line in out.stdout.splitlines())
    assert len(used) == len(PRELUDES) >= 2
    assert all(gch == header + ".gch" for header, gch in used.items()), used


def test_humaneval_x_units_start_with_a_prelude():
    """The assembly (envs/code/humaneval_x.py) and the image's preludes must not drift apart:
    a unit that starts with no prelude compiles, just four times slower."""
    from proctor.envs.code.humaneval_x import problems

    texts = [p.read_text() for p in PRELUDES]
    for p in problems("cpp"):
        for unit in (p.program(p.canonical_solution), p.tests):
            assert any(unit.startswith(t) for t in texts), (p.task_id, unit[:200])


def test_a_preludes_lines_keep_their_numbers(sandbox):
    prelude = PRELUDES[0].read_text()
    lines = prelude.count("\n")
    r = sandbox.run(Job(language="cpp", code=prelude + "int main() {\n  return not_declared_anywhere;\n}\n",
                        limits=Limits(compile_s=60)))
    assert r.status == "compile_error"
    assert f"main.cpp:{lines + 2}:" in r.stderr, r.stderr[-500:]
    ok = sandbox.run(Job(language="cpp", code=prelude + SUM, cases=CASES))
    assert ok.status == "passed", ok.stderr


@pytest.mark.parametrize("language", ["cpp", "c"])
def test_verdicts_do_not_depend_on_an_earlier_jobs_tests_object(sandbox, language):
    """Jobs alternate between two tests sources that differ in one constant; the program is
    right for one only. Each job's verdict follows its own tests, whichever ran before."""
    head = PRELUDES[0].read_text() if language == "cpp" else "#include <assert.h>\n"
    proto = "int f(void);\n" if language == "c" else "int f();\n"
    tests = {k: f"{head}#include <assert.h>\n{proto}int main(void) {{ assert(f() == {k}); return 0; }}\n"
             for k in (1, 2)}
    for i, k in enumerate([1, 2, 1, 2, 1]):
        code = f"{head}int f(void) {{ return 1; }}\n/* job {i} */\n"
        r = sandbox.run(Job(language=language, code=code, tests=tests[k], limits=Limits(compile_s=60)))
        assert r.status == ("passed" if k == 1 else "failed"), (i, k, r.status, r.stderr[-300:])
