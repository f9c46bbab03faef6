"""HumanEval-X (THUDM/CodeGeeX) from its published rows: each language assembled into the
sandbox's two units, the program and the tests.

    from proctor.envs.code.humaneval_x import problems, humaneval_x_source
    p = problems("go")[0]
    p.job()                  # the canonical solution as a sandbox Job; p.wrong_job(): a control
    p.job(completion)        # a continuation of p.prompt, assembled the same way
    source = humaneval_x_source("rust")   # Tasks for CodeVerifier / proctor/HumanEvalX-v0

The rows (envs/code/data/humaneval_x/, Apache-2.0, see its NOTICE) were written for one
file per problem: prompt + completion + test. A sandbox job compiles the program and
the tests as separate units (sandbox/server/native.py, builders.py), so each unit gets
what the one file gave it:

* C++: the program gets the standard headers the canonical solutions assume
  (``CPP_HEADERS``) ahead of the prompt; the tests get ``CPP_TEST_HEADERS``, the prompt's
  own ``#include``/``using``/``typedef`` lines and a prototype of every function the
  prompt defines (the tests call helpers such as ``poly`` too).
* Java: the tests get the prompt's imports.
* Go: both files are ``package main``; each imports what its own text uses, from the
  row's ``import`` plus ``GO_PACKAGES`` (Go imports per file, and refuses an unused
  one: a prompt's import the completion does not use is dropped, as upstream's harness
  does). The tests always import testing and testify's assert (the row's ``test_setup``).
* Rust: the program is prompt + ``declaration`` (its ``use`` lines and the signature)
  + completion; rand, regex and md5 come from the image. The tests were written for
  rand 0.4, Debian ships 0.8: ``gen_range(a, b)`` is rewritten ``gen_range(a..b)``.
* JavaScript: prompt + completion, and the row's test as it is.

Each problem also has a wrong-solution control: a body that returns the zero value of
the declared return type (``{}``, 0, "", null, ``*new(T)``, ``Default::default()``; a
panic for a Rust type of the row's own), followed by whatever the canonical solution
defines after that function; the tests must reject it. ``BROKEN_UPSTREAM`` lists the
rows whose canonical solution or test is wrong in the published data, with the reason;
nothing else is special-cased.

For a model that writes the whole program (``humaneval_x_task``), the program is its
answer as it is, and the tests unit is the same.
"""

from __future__ import annotations

import gzip
import json
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Optional

from proctor.sandbox import Job, Limits

from ..core.sources import ListSource
from ..core.types import Task

LANGUAGES = ("cpp", "java", "go", "rust", "javascript")
DATA_DIR = Path(__file__).parent / "data" / "humaneval_x"
_FILE_TAG = {"cpp": "cpp", "java": "java", "go": "go", "rust": "rust", "javascript": "js"}
_ID_PREFIX = {"cpp": "CPP", "java": "Java", "go": "Go", "rust": "Rust", "javascript": "JavaScript"}

# Rows broken in the published data (the CodeGeeX commit in the NOTICE), found by running
# every canonical solution and wrong-solution control (tests/test_humaneval_x_full.py):
# task id -> why. The README cites this. A row whose test is right but whose canonical
# solution is wrong still trains and evaluates fairly; a row whose test accepts a wrong
# answer does not (``humaneval_x_source(skip_broken=True)`` leaves all of them out).
BROKEN_UPSTREAM: dict[str, str] = {
    "JavaScript/112": "canonical solution wrong: `return (z, false)` is JavaScript's comma operator, a boolean, "
                      "not the [string, boolean] pair the test expects",
    "JavaScript/155": "canonical solution wrong: `while (num > 0)` counts no digit of 0; the test expects "
                      "evenOddCount(0) to be [1, 0]",
    "JavaScript/32": "test flaky: it draws 100 random polynomials and asks |poly(x)| < 1e-4 at the returned root; "
                     "the canonical bisection stops on x (1e-10), which steep polynomials miss, so it fails "
                     "about 1 run in 400 (measured with node, 2,000 runs)",
    "Go/95": "canonical solution wrong: it stops looking after the second key (`else { break }`), so with "
             "Go's random map order the test's {\"p\", \"A\", \"B\"} map passes or fails by chance",
    "Rust/4": "test accepts wrong answers: its asserts lack abs() (`mad(v) - expected < 1e-6`), so any answer "
              "at or below the right one passes (the wrong-solution control, 0.0, does)",
    "Rust/32": "test accepts anything: the whole test module is inside a /* */ comment, so no test runs",
}

# The rows of BROKEN_UPSTREAM whose test accepts a wrong answer (their wrong-solution control passes).
WEAK_TESTS = frozenset({"Rust/4", "Rust/32"})

# What a C++ solution of the benchmark may use without including it (upstream's harness
# puts headers in front of every program).
CPP_HEADERS = ("stdio.h", "stdlib.h", "math.h", "string.h", "limits.h", "algorithm", "climits", "cmath",
               "cstdlib", "cstring", "iostream", "map", "numeric", "set", "sstream", "string", "unordered_map",
               "unordered_set", "utility", "vector")
# The tests unit gets these too, less <string.h>/<cstring>: C's strlen(const char*) would win
# over a program's strlen(string) for the tests' strlen("abc") (CPP/23), so they would
# never call the program.
CPP_TEST_HEADERS = tuple(h for h in CPP_HEADERS if h not in ("string.h", "cstring"))
# Go packages a file may use by their last path element without importing them; an
# import is added to a file only where its text uses the name (`strings.`).
GO_PACKAGES = {"bytes": "bytes", "fmt": "fmt", "math": "math", "md5": "crypto/md5", "hex": "encoding/hex",
               "rand": "math/rand", "reflect": "reflect", "regexp": "regexp", "sort": "sort", "strconv": "strconv",
               "strings": "strings", "time": "time", "unicode": "unicode", "utf8": "unicode/utf8"}
GO_TEST_IMPORTS = ("testing", "github.com/stretchr/testify/assert")

INSTRUCTION = ("Complete the following {name} code. Return the whole program ({whole}) in a single "
               "```{fence} code block, without tests or a main function.\n\n```{fence}\n{prompt}```\n")
_NAMES = {"cpp": ("C++", "includes and the function"), "java": ("Java", "imports and the Solution class"),
          "go": ("Go", "package clause, imports and the function"),
          "rust": ("Rust", "use lines and the function"), "javascript": ("JavaScript", "the function")}

_C_LIKE_SKIP = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)
_GO_SKIP = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|`[^`]*`|\'(?:\\.|[^\'\\\n])*\'', re.S)
_JS_SKIP = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|`(?:\\.|[^`\\])*`', re.S)
_RUST_SKIP = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\\n])\'', re.S)


def _blank(pattern: re.Pattern, text: str) -> str:
    """``text`` with every comment and literal ``pattern`` matches turned into spaces (newlines kept)."""
    return pattern.sub(lambda m: re.sub(r"[^\n]", " ", m.group(0)), text)


@dataclass(frozen=True)
class Problem:
    """One HumanEval-X row, assembled for the sandbox.

    ``prompt``: the code the model continues (Rust: the row's prompt + declaration).
    ``tests``: the tests unit. ``wrong_solution``: the control body (see the module doc).
    """

    language: str
    task_id: str
    prompt: str
    canonical_solution: str
    wrong_solution: str
    tests: str
    go_imports: tuple[str, ...] = ()   # Go: the row's own import paths

    def program(self, completion: str) -> str:
        """The program unit for a continuation of ``prompt``."""
        if self.language == "cpp":
            return cpp_program(self.prompt, completion)
        if self.language == "go":
            return go_program(self.prompt, completion, self.go_imports)
        return self.prompt + completion

    def job(self, completion: Optional[str] = None, limits: Optional[Limits] = None) -> Job:
        """The job for ``completion`` (a continuation of ``prompt``; default: the canonical solution)."""
        body = self.canonical_solution if completion is None else completion
        return Job(language=self.language, code=self.program(body), tests=self.tests,  # type: ignore[arg-type]
                   limits=limits)

    def wrong_job(self, limits: Optional[Limits] = None) -> Job:
        """The control: a body returning a zero value, which the tests must fail."""
        return self.job(self.wrong_solution, limits)

    @property
    def broken_upstream(self) -> Optional[str]:
        """Why the published row cannot pass or cannot fail, or None."""
        return BROKEN_UPSTREAM.get(self.task_id)

    def shown_prompt(self) -> str:
        """The code a model that writes the whole program is shown (Go: with its package clause)."""
        if self.language == "go":
            return f"package main\n\n{go_import_block(list(self.go_imports))}{self.prompt}"
        return self.prompt


# --------------------------------------------------------------------------- rows

def data_file(language: str) -> Path:
    """The vendored rows of ``language`` (one of LANGUAGES)."""
    if language not in LANGUAGES:
        raise ValueError(f"HumanEval-X has no language {language!r}; choose one of {', '.join(LANGUAGES)}")
    return DATA_DIR / f"humaneval_{_FILE_TAG[language]}.jsonl.gz"


def rows(language: str) -> list[dict]:
    """The published rows of ``language``, as they are."""
    path = data_file(language)
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; restore it from git (see {DATA_DIR / 'NOTICE'})")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@lru_cache(maxsize=None)
def _problems(language: str) -> tuple[Problem, ...]:
    out = []
    for n, row in enumerate(rows(language), 1):
        try:
            out.append(problem_from_row(language, row))
        except (KeyError, ValueError) as exc:
            raise ValueError(f"{data_file(language)}, row {n} ({row.get('task_id', '?')}): {exc}") from None
    return tuple(out)


def problems(language: str) -> list[Problem]:
    """Every row of ``language`` (164), assembled."""
    return list(_problems(language))


def problem_from_row(language: str, row: dict) -> Problem:
    """One published row as a `Problem` (KeyError/ValueError name what the row lacks)."""
    task_id = row["task_id"]
    if not task_id.startswith(_ID_PREFIX[language] + "/"):
        raise ValueError(f"task_id {task_id!r} is not a {language} row")
    prompt = row["prompt"]
    go_imports: tuple[str, ...] = ()
    if language == "cpp":
        tests = cpp_tests(prompt, row["test"])
    elif language == "java":
        tests = java_tests(prompt, row["test"])
    elif language == "go":
        go_imports = tuple(re.findall(r'"([^"]+)"', row["import"] or ""))
        prompt = prompt.replace(row["import"], "", 1) if row["import"] else prompt
        tests = go_tests(row["test"])
    elif language == "rust":
        prompt = prompt + row["declaration"]
        tests = rust_tests(row["test"])
    else:
        tests = row["test"]
    return Problem(language=language, task_id=task_id, prompt=prompt, canonical_solution=row["canonical_solution"],
                   wrong_solution=wrong_body(language, prompt, row["canonical_solution"]), tests=tests,
                   go_imports=go_imports)


# --------------------------------------------------------------------------- C++

def _cpp_header_lines(prompt: str) -> str:
    """The standard headers, then the prompt's own #include/using/typedef lines."""
    lines = [f"#include <{h}>" for h in CPP_TEST_HEADERS]
    lines += [ln.strip() for ln in prompt.splitlines() if re.match(r"\s*(#\s*include|using\s|typedef\s)", ln)]
    return "\n".join(dict.fromkeys(lines)) + "\n"


def cpp_program(prompt: str, completion: str) -> str:
    """The standard headers, then the prompt and completion (numbered from line 1 in messages)."""
    headers = "".join(f"#include <{h}>\n" for h in CPP_HEADERS)
    return f"{headers}#line 1\n{prompt}{completion}"


def cpp_prototypes(prompt: str) -> list[str]:
    """A declaration for each function the prompt defines at top level, in order.

    The headers are read with comments and literals blanked and preprocessor lines
    dropped: each ``{`` at depth 0 whose text since the last ``;``/``}`` ends in ``)``
    opens a function definition.
    """
    flat = "\n".join("" if ln.lstrip().startswith("#") else ln for ln in _blank(_C_LIKE_SKIP, prompt).splitlines())
    out, depth, start = [], 0, 0
    for i, ch in enumerate(flat):
        if ch == "{":
            head = " ".join(flat[start:i].split())
            if depth == 0 and head.endswith(")") and "(" in head:
                out.append(head + ";")
            depth += 1
        elif ch == "}":
            depth = max(depth - 1, 0)
            if depth == 0:
                start = i + 1
        elif ch == ";" and depth == 0:
            start = i + 1
    if not out:
        raise ValueError("the prompt defines no function to declare for the tests")
    return out


def cpp_tests(prompt: str, test: str) -> str:
    """The tests unit: headers, the prompt's declarations, then the row's test (from line 1)."""
    return _cpp_header_lines(prompt) + "\n".join(cpp_prototypes(prompt)) + "\n#line 1\n" + test


# --------------------------------------------------------------------------- Java

def java_tests(prompt: str, test: str) -> str:
    """The prompt's imports, then the row's test (its Main class)."""
    imports = [ln.strip() for ln in prompt.splitlines() if re.match(r"\s*import\s+[\w.*]+\s*;", ln)]
    return "\n".join(imports) + "\n\n" + test


# --------------------------------------------------------------------------- Go

def go_used_packages(text: str) -> set[str]:
    """The names X that ``text`` uses as ``X.Name`` (comments and literals skipped)."""
    return set(re.findall(r"(?<![\w.])([A-Za-z_]\w*)\s*\.\s*[A-Za-z_]", _blank(_GO_SKIP, text)))


def go_import_block(paths: list[str]) -> str:
    """An import declaration of ``paths``, or nothing when there are none."""
    return "import (\n" + "".join(f'    "{p}"\n' for p in paths) + ")\n" if paths else ""


def go_program(prompt: str, completion: str, row_imports: tuple[str, ...]) -> str:
    """``package main``, the imports the code uses (the row's, then GO_PACKAGES), the code."""
    code = prompt + completion
    used = go_used_packages(code)
    known = {p.rsplit("/", 1)[-1]: p for p in row_imports}
    known.update({k: v for k, v in GO_PACKAGES.items() if k not in known})
    paths = [path for name, path in known.items() if name in used]
    return f"package main\n\n{go_import_block(sorted(paths))}{code}"


def go_tests(test: str) -> str:
    """``package main``, testing and testify's assert, and any GO_PACKAGES the test uses."""
    used = go_used_packages(test)
    extra = sorted(path for name, path in GO_PACKAGES.items() if name in used and path not in GO_TEST_IMPORTS)
    return f"package main\n\n{go_import_block([*GO_TEST_IMPORTS, *extra])}{test}"


# --------------------------------------------------------------------------- Rust

def rust_tests(test: str) -> str:
    """The row's test, with rand 0.4's ``gen_range(low, high)`` written as rand 0.8's ``gen_range(low..high)``."""
    out, pos = [], 0
    for match in re.finditer(r"\.gen_range\(", test):
        if match.start() < pos:
            continue
        args, end = _call_args(test, match.end())
        if len(args) == 2:
            out.append(test[pos:match.end()] + f"{args[0].strip()}..{args[1].strip()})")
            pos = end
    return "".join(out) + test[pos:]


def _call_args(text: str, start: int) -> tuple[list[str], int]:
    """The top-level comma-separated arguments from ``start`` (just after ``(``), and the index after ``)``."""
    depth, args, begin = 0, [], start
    for i in range(start, len(text)):
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                args.append(text[begin:i])
                return args, i + 1
            depth -= 1
        elif ch == "," and depth == 0:
            args.append(text[begin:i])
            begin = i + 1
    raise ValueError(f"unbalanced call at offset {start} of the test")


# --------------------------------------------------------------------------- wrong-solution controls

_SKIPS = {"cpp": _C_LIKE_SKIP, "java": _C_LIKE_SKIP, "go": _GO_SKIP, "rust": _RUST_SKIP, "javascript": _JS_SKIP}


def open_braces(language: str, prompt: str) -> int:
    """How many ``{`` the prompt leaves open (the completion closes them)."""
    flat = _blank(_SKIPS[language], prompt)
    depth = flat.count("{") - flat.count("}")
    if depth < 1:
        raise ValueError("the prompt leaves no brace open for the completion to close")
    return depth


def wrong_body(language: str, prompt: str, canonical: str) -> str:
    """A completion that returns the zero value of the function's return type.

    What the canonical solution writes after that function closes (more functions the
    tests call, such as Rust/50's decode_shift, the class's closing brace) follows as it is.
    """
    depth = open_braces(language, prompt)
    flat, level = _blank(_SKIPS[language], canonical), depth
    for i, ch in enumerate(flat):
        level += (ch == "{") - (ch == "}")
        if level < depth:
            return f"    return {zero_value(language, prompt)};\n}}{canonical[i + 1:]}"
    return f"    return {zero_value(language, prompt)};\n" + "}\n" * depth


_RUST_DEFAULT = {"i8", "i16", "i32", "i64", "i128", "isize", "u8", "u16", "u32", "u64", "u128", "usize", "f32", "f64",
                 "bool", "char", "str", "String", "Vec", "Option", "HashMap", "HashSet", "BTreeMap", "BTreeSet"}
_JAVA_ZERO = {"int": "0", "long": "0", "short": "0", "byte": "0", "double": "0", "float": "0",
              "boolean": "false", "char": "'\\0'", "String": '""'}


def zero_value(language: str, prompt: str) -> str:
    """An expression of the last function's return type holding its zero value."""
    flat = _blank(_SKIPS[language], prompt)
    if language == "cpp":
        return "{}"
    if language == "javascript":
        return "null"
    if language == "rust":
        found = re.findall(r"\bfn\s+\w+\s*(?:<[^>]*>)?\s*\([^{]*?\)\s*(?:->\s*([^{]+?))?\s*\{", flat)
        kind = found[-1].strip() if found else ""
        # A type of the row's own (Rust/137's RtnType) has no Default: the control panics instead.
        head = re.match(r"&?(?:'\w+\s+)?(?:mut\s+)?([\w:]+)", kind)
        plain = kind.startswith("(") or (head is not None and head.group(1) in _RUST_DEFAULT)   # tuples too
        return "Default::default()" if plain else 'panic!("wrong solution")'
    if language == "java":
        found = re.findall(r"\b(?:public|private|protected)\s+(?:static\s+)?([\w.<>\[\], ?]+?)\s+\w+\s*\(", flat)
        if not found:
            raise ValueError("no method signature in the prompt")
        kind = found[-1].strip()
        if kind in _JAVA_ZERO:
            return _JAVA_ZERO[kind]
        base = kind.split("<", 1)[0]
        if base in ("List", "ArrayList", "Collection"):
            return "new ArrayList<>()"
        return "Optional.empty()" if base == "Optional" else "null"
    found = re.findall(r"^func\s+\w+\s*\((?:[^()]|\([^()]*\))*\)\s*(.*?)\s*\{\s*$", flat, re.M)   # go
    if not found:
        raise ValueError("no func signature in the prompt")
    results = found[-1].strip()
    if results.startswith("("):
        parts = _call_args(results, 1)[0]
        return ", ".join(f"*new({p.strip()})" for p in parts)
    return f"*new({results})"


# --------------------------------------------------------------------------- tasks

def humaneval_x_task(problem: Problem) -> Task:
    """A problem as a code `Task`: the model returns the whole program, judged against the tests unit."""
    name, whole = _NAMES[problem.language]
    fence = problem.language
    prompt = INSTRUCTION.format(name=name, whole=whole, fence=fence, prompt=problem.shown_prompt())
    return Task(id=problem.task_id, prompt=prompt, answer=None, source=f"humaneval-x-{problem.language}",
                data={"language": problem.language, "tests": problem.tests, "prompt_prefix": problem.prompt})


def humaneval_x_source(language: str, *, skip_broken: bool = False) -> ListSource:
    """The 164 HumanEval-X problems of ``language`` as code tasks (``skip_broken``: less BROKEN_UPSTREAM's)."""
    chosen = [p for p in problems(language) if not (skip_broken and p.broken_upstream)]
    return ListSource([humaneval_x_task(p) for p in chosen], name=f"humaneval-x-{language}")


def reference_completion(task: Task) -> Optional[str]:
    """The canonical solution of a HumanEval-X task, as a fenced whole program; None for a row
    broken upstream (its canonical solution is no known-right answer)."""
    language = task.data.get("language")
    if language not in LANGUAGES:
        return None
    found = next((p for p in _problems(language) if p.task_id == task.id), None)
    if found is None or found.broken_upstream:
        return None
    return f"```{language}\n{found.program(found.canonical_solution)}```"


__all__ = ["BROKEN_UPSTREAM", "CPP_HEADERS", "GO_PACKAGES", "LANGUAGES", "WEAK_TESTS", "Problem", "data_file",
           "humaneval_x_source", "humaneval_x_task", "problem_from_row", "problems", "reference_completion", "rows"]
