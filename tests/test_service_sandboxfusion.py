"""SandboxFusion's own client (PyPI ``sandbox-fusion``), unchanged, against ``proctor sandbox serve``:
/run_code in python, cpp, java, go and nodejs (stdout, exit codes, stdin, files, fetch_files,
timeouts, compile errors) and /run_jupyter (state across cells). The token travels as the URL's
password, which is how ``requests`` (the client's and verl's HTTP library) sends it."""

from __future__ import annotations

import base64

import pytest
from sandbox_fusion import (CommandRunStatus, RunCodeRequest, RunJupyterRequest, RunStatus, run_code,
                            run_jupyter)

from service_server import ServiceProcess

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def endpoint(docker_ready, tmp_path_factory):
    service = ServiceProcess(tmp_path_factory.mktemp("sf"), "--pool-size", "2", "--warm", "python")
    try:
        yield f"http://sf:{service.token}@127.0.0.1:{service.port}"
    finally:
        service.stop()


def run(endpoint, **kw):
    return run_code(RunCodeRequest(**kw), endpoint=endpoint, max_attempts=1, client_timeout=180)


def test_python_stdout_exit_code_and_stdin(endpoint):
    ok = run(endpoint, code="print(input()[::-1])", language="python", stdin="abc\n")
    assert ok.status == RunStatus.Success
    assert ok.run_result.status == CommandRunStatus.Finished and ok.run_result.return_code == 0
    assert ok.run_result.stdout == "cba\n"
    bad = run(endpoint, code="import sys\nprint('so far')\nsys.exit(3)", language="python")
    assert bad.status == RunStatus.Failed and bad.run_result.return_code == 3 and bad.run_result.stdout == "so far\n"
    crash = run(endpoint, code="raise ValueError('nope')", language="python")
    assert crash.status == RunStatus.Failed and crash.run_result.return_code == 1
    assert "ValueError: nope" in crash.run_result.stderr


def test_python_timeout_is_time_limit_exceeded(endpoint):
    r = run(endpoint, code="while True:\n    pass", language="python", run_timeout=1)
    assert r.status == RunStatus.Failed
    assert r.run_result.status == CommandRunStatus.TimeLimitExceeded


def test_files_in_and_fetch_files_out(endpoint):
    data = bytes(range(256))
    code = ("d = open('in.bin', 'rb').read()\n"
            "open('out.bin', 'wb').write(d[::-1])\n"
            "open('note.txt', 'w').write(str(len(d)))\n")
    r = run(endpoint, code=code, language="python", files={"in.bin": base64.b64encode(data).decode()},
            fetch_files=["out.bin", "note.txt", "never-written.txt"])
    assert r.status == RunStatus.Success
    assert base64.b64decode(r.files["out.bin"]) == data[::-1]
    assert base64.b64decode(r.files["note.txt"]) == b"256"
    assert "never-written.txt" not in r.files   # as SandboxFusion: only files that exist come back


CPP_SUM = "#include <iostream>\nint main(){long a,b; std::cin>>a>>b; std::cout<<a+b<<std::endl; return 0;}\n"


def test_cpp_stdin_compile_error_and_timeout(endpoint):
    ok = run(endpoint, code=CPP_SUM, language="cpp", stdin="2 40\n")
    assert ok.status == RunStatus.Success and ok.run_result.stdout.strip() == "42"
    assert ok.compile_result.status == CommandRunStatus.Finished and ok.compile_result.return_code == 0
    broken = run(endpoint, code="int main( { return 0; }", language="cpp")
    assert broken.status == RunStatus.Failed and broken.run_result is None
    assert broken.compile_result.return_code != 0 and "error" in broken.compile_result.stderr
    spin = run(endpoint, code="int main(){ volatile long x = 0; for(;;) x++; }", language="cpp", run_timeout=1)
    assert spin.status == RunStatus.Failed and spin.run_result.status == CommandRunStatus.TimeLimitExceeded


JAVA = ("import java.util.Scanner;\npublic class Main {\n  public static void main(String[] a) {\n"
        "    Scanner s = new Scanner(System.in); int n = s.nextInt();\n    System.out.println(n * n);\n"
        "    if (n < 0) System.exit(4);\n  }\n}\n")
GO = ("package main\n\nimport \"fmt\"\n\nfunc main() {\n\tvar n int\n\tfmt.Scan(&n)\n\tfmt.Println(n + 1)\n}\n")
NODE = "const lines = require('fs').readFileSync(0, 'utf8').trim().split(/\\s+/);\nconsole.log(lines.length);\n"


@pytest.mark.parametrize("language,code,stdin,expected", [
    ("java", JAVA, "7\n", "49"), ("go", GO, "41\n", "42"), ("nodejs", NODE, "a b c\n", "3")])
def test_more_languages_with_stdin(endpoint, language, code, stdin, expected):
    r = run(endpoint, code=code, language=language, stdin=stdin)
    assert r.status == RunStatus.Success, (r.message, r.compile_result, r.run_result)
    assert r.run_result.stdout.strip() == expected


def test_more_languages_fail_and_compile_errors(endpoint):
    assert run(endpoint, code=JAVA, language="java", stdin="-2\n").run_result.return_code == 4
    go_broken = run(endpoint, code="package main\nfunc main() { undefined_name() }\n", language="go")
    assert go_broken.status == RunStatus.Failed and go_broken.run_result is None
    assert go_broken.compile_result.return_code != 0
    node_throw = run(endpoint, code="throw new Error('boom')", language="nodejs")
    assert node_throw.status == RunStatus.Failed and node_throw.run_result.return_code != 0


def test_unsupported_language_is_an_error_naming_the_field(endpoint):
    with pytest.raises(Exception, match="422.*language"):
        run(endpoint, code="echo hi", language="bash")


def test_jupyter_keeps_state_across_cells(endpoint):
    r = run_jupyter(RunJupyterRequest(cells=["import math\na = 123", "a", "print(a + 1)",
                                             "raise RuntimeError('error message')", "b = math.sqrt(a - 119); b",
                                             "open('o.txt', 'w').write('kept')"],
                                      fetch_files=["o.txt"]),
                    endpoint=endpoint, max_attempts=1, client_timeout=180)
    assert r.status == RunStatus.Success
    assert [c.display for c in r.cells][:2] == [[], [{"text/plain": "123"}]]
    assert r.cells[2].stdout == "124\n"
    assert r.cells[3].error and r.cells[3].error[0]["ename"] == "RuntimeError"
    assert r.cells[4].display == [{"text/plain": "2.0"}]   # after the error the state is still there
    assert base64.b64decode(r.files["o.txt"]) == b"kept"


def test_jupyter_total_timeout(endpoint):
    r = run_jupyter(RunJupyterRequest(cells=["x = 1", "while True:\n    pass", "x"], total_timeout=2),
                    endpoint=endpoint, max_attempts=1, client_timeout=180)
    assert r.status == RunStatus.Failed
    assert r.driver.status == CommandRunStatus.TimeLimitExceeded
