"""C++: <bits/stdc++.h> is precompiled in the image with the jobs' own flags, and a program's
verdict never depends on it (GCC reads the .gch only where it is valid for the program)."""

from __future__ import annotations

import subprocess

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
