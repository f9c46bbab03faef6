"""The jobs `proctor sandbox demo` runs: (name, expected status, job)."""

from __future__ import annotations

from proctor.sandbox import Job, Limits

_PROMPT = '''def is_palindrome(s: str) -> bool:
    """True if s reads the same forwards and backwards, ignoring case and non-letters."""
'''
_RIGHT = '''    t = [c.lower() for c in s if c.isalnum()]
    return t == t[::-1]
'''
_WRONG = '''    return s == s[::-1]
'''
_TESTS = '''
def check(candidate):
    assert candidate("racecar")
    assert candidate("A man, a plan, a canal: Panama")
    assert not candidate("proctor")
    assert candidate("")

check(is_palindrome)
'''
_FAST = Limits(cpu_s=1, wall_s=3)

_CPP_SUM = '''#include <iostream>
int main() { long long a, b; std::cin >> a >> b; std::cout << a + b << "\\n"; }
'''
_C_TESTED = '''int gcd(int a, int b) { return b ? gcd(b, a % b) : a; }'''
_C_TESTS = '''#include <assert.h>
int gcd(int, int);
int main(void) { assert(gcd(12, 18) == 6); assert(gcd(7, 1) == 1); return 0; }
'''

DEMO_JOBS: list[tuple[str, str, Job]] = [
    ("python: right answer", "passed", Job("python", _PROMPT + _RIGHT, tests=_TESTS)),
    ("python: wrong answer", "failed", Job("python", _PROMPT + _WRONG, tests=_TESTS)),
    ("python: syntax error", "compile_error", Job("python", _PROMPT + "    return (", tests=_TESTS)),
    ("hack: sys.exit(0) before the tests", "failed",
     Job("python", _PROMPT + "    return False\nimport sys; sys.exit(0)\n", tests=_TESTS)),
    ("hack: os._exit(0) from an exit hook", "failed",
     Job("python", _PROMPT + _WRONG + "import atexit, os; atexit.register(os._exit, 0)\n", tests=_TESTS)),
    ("attack: fork bomb", "timeout",
     Job("python", "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass\n", limits=_FAST)),
    ("attack: memory bomb", "memory",
     Job("python", "chunks = []\nwhile True: chunks.append(bytearray(50 << 20))\n", limits=_FAST)),
    ("attack: 100 MB output flood", "output_limit", Job("python", "print('x' * (100 << 20))", limits=_FAST)),
    ("attack: loop ignoring SIGTERM", "timeout",
     Job("python", "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: pass\n", limits=_FAST)),
    ("attack: network", "runtime_error",
     Job("python", "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)\n", limits=_FAST)),
    ("attack: kill every process", "runtime_error", Job("python", "import os, signal\nos.kill(-1, signal.SIGKILL)\n")),
    ("c: unit tests", "passed", Job("c", _C_TESTED, tests=_C_TESTS)),
    ("hack: c exit(0) before asserts", "failed",
     Job("c", "#include <stdlib.h>\nint gcd(int a, int b) { exit(0); }", tests=_C_TESTS)),
    ("c++: stdin/stdout cases", "passed", Job("cpp", _CPP_SUM, cases=[("1 2\n", "3\n"), ("-4 4", "0")])),
    ("c++: compile error", "compile_error", Job("cpp", "int main() { return undefined_name; }")),
]
