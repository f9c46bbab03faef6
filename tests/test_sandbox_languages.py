"""Java, Go, Rust and JavaScript jobs against the real sandbox (Docker engine, no mocks).

Each language runs real HumanEval-X problems (the vendored sample: canonical
solutions pass, wrong ones fail), stdin/stdout cases, and the statuses a verdict
can take (compile_error, runtime_error), with the language's own job layout.
The exit-0 guard and the hostile programs are in test_sandbox_adversarial_langs.py.
"""

from __future__ import annotations

import pytest

from humaneval_x import LANGUAGES, first, problems
from proctor.envs.code.extract import extract_code, normalize_language
from proctor.sandbox import Job, Limits, Result, Sandbox

pytestmark = pytest.mark.docker

LIM = Limits(wall_s=10, cpu_s=5, memory_mb=256)

# A program that prints the sum of the two integers on stdin.
SUM = {
    "java": ("import java.util.*;\n"
             "public class Main {\n"
             "  public static void main(String[] a) {\n"
             "    Scanner s = new Scanner(System.in);\n"
             "    System.out.println(s.nextLong() + s.nextLong());\n"
             "  }\n"
             "}\n"),
    "go": ('package main\n\nimport "fmt"\n\n'
           "func main() {\n\tvar a, b int64\n\tfmt.Scan(&a, &b)\n\tfmt.Println(a + b)\n}\n"),
    "rust": ("use std::io::Read;\n"
             "fn main() {\n"
             "    let mut s = String::new();\n"
             "    std::io::stdin().read_to_string(&mut s).unwrap();\n"
             "    let v: Vec<i64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect();\n"
             "    println!(\"{}\", v[0] + v[1]);\n"
             "}\n"),
    "javascript": ("const [a, b] = require('fs').readFileSync(0, 'utf8').trim().split(/\\s+/).map(Number);\n"
                   "console.log(a + b);\n"),
}
# A body for problem 0 (has_close_elements) that does not compile / parse.
BROKEN = {"java": "        return 1 +;\n    }\n}\n", "go": "    return 1 +\n}\n",
          "rust": "    return 1 +;\n}\n", "javascript": "  return (;\n}\n"}
# A body for problem 0 that crashes: an index out of range / a null dereference.
CRASH = {"java": "        return numbers.get(99) > 0;\n    }\n}\n",
         "go": "    return math.Abs(numbers[99]) > 0\n}\n",
         "rust": "    numbers[99] > 0.0\n}\n",
         "javascript": "  return numbers.foo.bar;\n}\n"}


def explain(r: Result) -> str:
    return (f"status={r.status} exit={r.exit_code} attempts={r.attempts}\nstdout={r.stdout[-800:]!r}\n"
            f"stderr={r.stderr[-1500:]!r}\nerror={r.error[-1500:]}")


@pytest.fixture(scope="module")
def sb(docker_ready):
    with Sandbox() as sandbox:
        yield sandbox


@pytest.mark.parametrize("language", LANGUAGES)
def test_humaneval_x_canonical_passes_and_wrong_fails(sb, language):
    sample = problems(language)
    jobs = [p.job(limits=LIM) for p in sample] + [p.job(p.wrong_solution, limits=LIM) for p in sample]
    results = sb.run_many(jobs)
    for p, r in zip(sample, results[:len(sample)]):
        assert r.status == "passed", f"{p.task_id} canonical: " + explain(r)
    for p, r in zip(sample, results[len(sample):]):
        assert r.status == "failed", f"{p.task_id} wrong solution: " + explain(r)


@pytest.mark.parametrize("language", LANGUAGES)
def test_compile_errors_and_crashes(sb, language):
    p = first(language)
    broken, crash = sb.run_many([p.job(BROKEN[language], limits=LIM), p.job(CRASH[language], limits=LIM)])
    assert broken.status == "compile_error", explain(broken)
    assert "code" in broken.stderr or "main.js" in broken.stderr, "the message names the program's file: " \
        + explain(broken)
    assert crash.status == "runtime_error", explain(crash)


@pytest.mark.parametrize("language", LANGUAGES)
def test_stdin_stdout_cases(sb, language):
    r = sb.run(Job(language=language, code=SUM[language], limits=LIM,
                   cases=[("2 3\n", "5\n"), ("40 2", "42"), ("1 1", "3")]))
    assert [c.status for c in r.cases] == ["passed", "passed", "failed"], explain(r)
    assert r.cases[2].stdout.strip() == "2"
    assert r.status == "failed"


HELLO = {"java": 'public class Hi {\n  public static void main(String[] a) { System.out.println("hi"); }\n}\n',
         "go": 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("hi") }\n',
         "rust": 'fn main() { println!("hi"); }\n',
         "javascript": "console.log('hi');\n"}


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_program_without_tests_passes_when_its_main_returns(sb, language):
    r = sb.run(Job(language=language, code=HELLO[language], limits=LIM))
    assert r.status == "passed" and r.stdout == "hi\n", explain(r)


def test_go_program_without_tests_needs_main(sb):
    r = sb.run(Job(language="go", code="package main\n\nfunc F() int { return 1 }\n", limits=LIM))
    assert r.status == "compile_error" and "func main()" in r.stderr, explain(r)


def test_java_main_class_and_file_names_follow_the_public_classes(sb):
    """javac wants a public class in a file of its name; the tests' public class with main() runs."""
    code = ("/* public class NotThis {} */\n"
            "public class Calc {\n  public static int add(int a, int b) { return a + b; }\n"
            "  static String s = \"class Nope {\";\n}\n"
            "class Helper { static int twice(int x) { return 2 * x; } }\n")
    tests = ("class Util {}\n"
             "public class CalcTest {\n  public static void main(String[] args) {\n"
             "    assert Calc.add(2, 3) == 5 : \"add\";\n"
             "    if (Helper.twice(4) != 8) throw new AssertionError(\"twice\");\n  }\n}\n")
    ok = sb.run(Job(language="java", code=code, tests=tests, limits=LIM))
    assert ok.status == "passed", explain(ok)
    # `assert` statements are enabled (-ea): a false one fails the run.
    bad = sb.run(Job(language="java", code=code.replace("a + b", "a - b"), tests=tests, limits=LIM))
    assert bad.status == "failed", explain(bad)
    assert "AssertionError: add" in bad.stderr


def test_java_program_may_not_hide_jdk_types_from_the_tests(sb):
    """A class Arrays of the program would replace java.util.Arrays in the tests' checks."""
    p = first("java")
    forged = ("class Arrays {\n"
              "  static <T> java.util.List<T> asList(T... t) { return new java.util.ArrayList<>(); }\n}\n")
    r = sb.run(p.job(p.wrong_solution, after=forged, limits=LIM))
    assert r.status == "compile_error", explain(r)
    assert "Arrays" in r.stderr and "rename" in r.stderr, explain(r)


def test_go_tests_need_test_functions(sb):
    r = sb.run(Job(language="go", code="package main\n\nfunc F() int { return 1 }\n",
                   tests="package main\n\nfunc helper() {}\n", limits=LIM))
    assert r.status == "compile_error", explain(r)
    assert "TestXxx" in r.stderr


def test_go_plain_testing_without_testify(sb):
    code = "package main\n\nfunc Add(a, b int) int { return a + b }\n"
    tests = ('package main\n\nimport "testing"\n\n'
             "func TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n"
             "\t\tt.Fatalf(\"Add(2, 3) = %d\", Add(2, 3))\n\t}\n}\n"
             "func TestSub(t *testing.T) {\n\tt.Run(\"zero\", func(t *testing.T) {\n"
             "\t\tif Add(0, 0) != 0 {\n\t\t\tt.Error(\"zero\")\n\t\t}\n\t})\n}\n")
    ok, bad = sb.run_many([Job(language="go", code=code, tests=tests, limits=LIM),
                           Job(language="go", code=code.replace("a + b", "a * b"), tests=tests, limits=LIM)])
    assert ok.status == "passed", explain(ok)
    assert bad.status == "failed", explain(bad)
    assert "Add(2, 3) = 6" in bad.stdout


def test_go_http_assertions_work_from_the_tests_or_the_program(sb):
    """A job whose sources say HTTP builds against testify's full assert; the rest against
    a copy without the HTTP assertions (no net/http to link). Both kinds judge alike."""
    code = ('package main\n\nimport (\n\t"fmt"\n\t"net/http"\n)\n\n'
            "func Hello(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, \"hello \" + r.URL.Query().Get(\"n\")) }\n")
    tests = ('package main\n\nimport (\n\t"net/url"\n\t"testing"\n\n\t"github.com/stretchr/testify/assert"\n)\n\n'
             "func TestHello(t *testing.T) {\n"
             '\tassert.HTTPBodyContains(t, Hello, "GET", "/", url.Values{"n": {"go"}}, "hello go")\n'
             "\tassert.HTTPSuccess(t, Hello, \"GET\", \"/\", nil)\n}\n")
    # The program names an HTTP assertion itself, behind a dot import; the tests do not say HTTP.
    dotted = ('package main\n\nimport (\n\t"net/http"\n\t"testing"\n\n\t. "github.com/stretchr/testify/assert"\n)\n\n'
              "func ok(w http.ResponseWriter, r *http.Request) {}\n"
              "func Check(t *testing.T) bool { return HTTPSuccess(t, ok, \"GET\", \"/\", nil) }\n")
    plain = ('package main\n\nimport (\n\t"testing"\n\n\t"github.com/stretchr/testify/assert"\n)\n\n'
             "func TestCheck(t *testing.T) {\n\tassert.True(t, Check(t))\n}\n")
    ok, wrong, own = sb.run_many([
        Job(language="go", code=code, tests=tests, limits=LIM),
        Job(language="go", code=code.replace('"hello "', '"bye "'), tests=tests, limits=LIM),
        Job(language="go", code=dotted, tests=plain, limits=LIM)])
    assert ok.status == "passed", explain(ok)
    assert wrong.status == "failed" and "hello go" in wrong.stdout, explain(wrong)
    assert own.status == "passed", explain(own)


def test_rust_tests_need_test_attributes_and_crate_allows_are_kept(sb):
    no_tests = sb.run(Job(language="rust", code="fn f() -> i32 { 1 }\n",
                          tests="fn main() { assert_eq!(f(), 2); }\n", limits=LIM))
    assert no_tests.status == "compile_error", explain(no_tests)
    assert "#[test]" in no_tests.stderr
    allowed = sb.run(Job(language="rust", code="#![allow(dead_code)]\n// a helper\nfn f() -> i32 { 1 }\nfn g() {}\n",
                         tests="#[test]\nfn t() { assert_eq!(f(), 1); }\n", limits=LIM))
    assert allowed.status == "passed", explain(allowed)
    # Any other crate-level attribute (here one that would drop the whole crate) stays put and fails.
    dropped = sb.run(Job(language="rust", code="#![cfg(any())]\nfn f() -> i32 { 2 }\n",
                         tests="#[test]\nfn t() { assert_eq!(f(), 1); }\n", limits=LIM))
    assert dropped.status == "compile_error", explain(dropped)


def test_rust_debug_build_checks_overflow(sb):
    """Debug builds, as `cargo test` makes them: arithmetic overflow panics."""
    r = sb.run(Job(language="rust", code="fn add(a: i32, b: i32) -> i32 { a + b }\n",
                   tests="#[test]\nfn t() {\n    let one: i32 = \"1\".parse().unwrap();\n"
                         "    assert_eq!(add(i32::MAX, one), 0);\n}\n", limits=LIM))
    assert r.status == "runtime_error", explain(r)
    assert "overflow" in r.stderr


def test_javascript_asynchronous_tests_are_awaited(sb):
    code = "const f = async (x) => x + 1;\n"
    tests = "(async () => {\n  console.assert(await f(1) === 2);\n})()\n"
    ok, bad = sb.run_many([Job(language="javascript", code=code, tests=tests, limits=LIM),
                           Job(language="javascript", code=code.replace("x + 1", "x"), tests=tests, limits=LIM)])
    assert ok.status == "passed", explain(ok)
    assert bad.status == "failed", explain(bad)


def test_javascript_require_and_assert_module(sb):
    code = "const path = require('path');\nconst base = (p) => path.basename(p);\n"
    tests = "const assert = require('assert');\nassert.strictEqual(base('/a/b.txt'), 'b.txt');\n"
    r = sb.run(Job(language="javascript", code=code, tests=tests, limits=LIM))
    assert r.status == "passed", explain(r)


# ---------------------------------------------------------------- the Code env (no engine)

@pytest.mark.parametrize("language,tag,bare", [
    ("java", "java", "import java.util.*;\nclass Solution {}\n"),
    ("go", "golang", "package main\n\nfunc F() {}\n"),
    ("rust", "rs", "fn f() -> i32 { 1 }\n"),
    ("javascript", "js", "const f = (x) => x;\n"),
])
def test_code_env_takes_the_new_languages(language, tag, bare):
    assert normalize_language(tag) == language
    answer = f"Here:\n```python\nprint(1)\n```\n```{tag}\n{bare}```\n"
    assert extract_code(answer, language) == bare
    assert extract_code(bare, language) == bare                      # no fence: it opens like a source file
    assert extract_code("Sure, here it is.", language) is None
