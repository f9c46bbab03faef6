"""Java, Go, Rust and JavaScript jobs: how each is built, checked and started.

Stdlib only: copied into the images beside the fork server.

Every language proves that its tests ran to their end the same way as C/C++ and
Python do: the server hands the run a one-time nonce on fd 4, and a guard that
runs before any code of the program (a launcher, a package init, a preinit
entry) reads it and writes it back on fd 3 only when the tests (a program
without tests: its main) returned. An early exit with status 0 (System.exit,
os.Exit, std::process::exit, process.exit) therefore never passes. The guards live in each image
(/opt/proctor/LANG, built from images/LANG); this module drives the compilers.

Sources go to /work/.proctor/src (a reserved name), build outputs to
/work/.proctor/build, a native program to /work/prog: nothing a job's own
``files`` can clash with. All compile steps of a job share one budget of
``limits["compile_s"]``, so the host's reply deadline holds.
"""

from __future__ import annotations

import base64
import os
import re
import time
from typing import Callable

import confine
from hygiene import GVISOR, WORK

LANGUAGES = ("java", "go", "rust", "javascript")
SRC = ".proctor/src"          # relative to WORK, the cwd of every step: short paths in messages
BUILD = ".proctor/build"
OPT = "/opt/proctor"
# Symbols a native program may not reference: they reach past the exit guard (guard.c).
GUARD_FORBIDDEN = ("__real_exit", "__wrap_exit", "dlsym", "dlvsym", "dlopen", "dlmopen",
                   "dl_iterate_phdr", "__libc_start_main", "proctor_guard")

RunStep = Callable[..., dict]
Built = tuple[list[dict], "dict | None"]   # compile steps, and run_step's arguments (None: build failed)


def build(job: dict, limits: dict, run_step: RunStep) -> Built:
    """Write the job's sources and build its program with `run_step`."""
    confine.makedirs(os.path.join(WORK, SRC))   # the job's compilers write there, as the job's user
    confine.makedirs(os.path.join(WORK, BUILD))
    budget = Budget(limits, run_step)
    return BUILDERS[job["language"]](job, limits, budget)


class Budget:
    """Runs compile steps against one shared deadline of compile_s."""

    def __init__(self, limits: dict, run_step: RunStep) -> None:
        self.limits, self.run_step = limits, run_step
        self.end = time.monotonic() + limits["compile_s"]

    def step(self, argv: list[str]) -> dict:
        left = max(self.end - time.monotonic(), 0.05)
        return self.run_step("compile", self.limits, argv=argv, wall_s=left, cpu_s=left)


def ok(step: dict) -> bool:
    return step["exit_code"] == 0 and not step["timed_out"] and not step["oom"]


def refused(step: dict, why: str) -> dict:
    """Turn a checking step into a failed compile that says why."""
    step.update(exit_code=1, signal=None, stdout="", stderr=base64.b64encode(f"[proctor] {why}\n".encode()).decode())
    return step


def write_src(name: str, text: str) -> str:
    rel = os.path.join(SRC, name)
    confine.write(os.path.join(WORK, rel), text.encode())
    return rel


def undefined_symbols(nm_step: dict) -> set[str]:
    """Names from `nm` output lines of the form '[addr] U name' (GNU and Go nm alike)."""
    text = base64.b64decode(nm_step["stdout"]).decode(errors="replace")
    return {parts[-1] for parts in (line.split() for line in text.splitlines())
            if len(parts) >= 2 and parts[-2] == "U"}


# --------------------------------------------------------------------------- Java

JAVA_HOME = "/usr/lib/jvm/java-17-openjdk-amd64"
# Under gVisor the runtimes start from readable copies (images/java, images/node): gVisor
# refuses to exec a binary its caller cannot read, and keeps every process out of an
# ancestor's /proc/PID/mem, dumpable or not (measured), which the execute-only binaries
# (non-dumpable runtimes) ensure under runc.
JAVA = f"{JAVA_HOME}/bin/java-readable" if GVISOR else f"{JAVA_HOME}/bin/java"
JAVA_JIT = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData", "-Xshare:auto"]
_JAVA_TYPE = re.compile(r"\b(?:class|interface|enum|record)\s+([A-Za-z_$][\w$]*)")
_JAVA_SKIP = re.compile(r'//[^\n]*|/\*.*?\*/|"""(?:\\.|[^\\])*?"""|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'',
                        re.S)


def java_top_types(source: str) -> list[tuple[str, bool]]:
    """(name, is public) of each top-level type, in order; comments and literals skipped."""
    flat = _JAVA_SKIP.sub(" ", source)
    depth, start, found = 0, 0, []
    for i, ch in enumerate(flat + "{"):
        if ch not in "{};":
            continue
        if depth == 0:
            head = flat[start:i]
            match = _JAVA_TYPE.search(head)
            if match and ch == "{":
                found.append((match.group(1), re.search(r"\bpublic\b", head[:match.start()]) is not None))
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth = max(depth - 1, 0)
        start = i + 1
    return found


_JDK_TYPES: dict[str, set[str]] = {}   # package -> its top-level type names, read once


def java_hidden_types(code: str, tests: str) -> list[str]:
    """Top-level types of the program that would hide a JDK type the tests name.

    A type of the program's (default) package wins over java.lang and over the
    tests' on-demand imports: a class Arrays of the program's would replace
    java.util.Arrays in `Arrays.asList(...)` of the tests, and forge their checks.
    """
    if not _JDK_TYPES:
        with open(f"{OPT}/java/jdk-types.txt") as f:
            for line in f:
                package, name = line.split()
                _JDK_TYPES.setdefault(package, set()).add(name)
    packages = {"java.lang", *re.findall(r"^\s*import\s+([\w.]+)\.\*\s*;", _JAVA_SKIP.sub(" ", tests), re.M)}
    known = set().union(*(_JDK_TYPES.get(p, set()) for p in packages))
    return sorted({name for name, _ in java_top_types(code)} & known)


def build_java(job: dict, limits: dict, budget: Budget) -> Built:
    units = [("code", job["code"])] + ([("tests", job["tests"])] if job.get("tests") else [])
    hidden = java_hidden_types(job["code"], job["tests"]) if job.get("tests") else []
    if hidden:
        why = (f"the program declares {', '.join(hidden)}, which would hide the JDK's type of that name "
               "from the tests; rename it")
        return [refused(budget.step(["/bin/true"]), why)], None
    paths = []
    for folder, text in units:
        public = [name for name, is_public in java_top_types(text) if is_public]
        # javac wants a public class in a file of its name; the folders keep the units apart.
        paths.append(write_src(f"{folder}/{public[0] if public else folder.title()}.java", text))
    # Absolute: the class-data-sharing archive of the launcher records paths as given.
    classes = os.path.join(WORK, BUILD, "classes")
    javac = [f"{JAVA_HOME}/bin/javac", *(f"-J{f}" for f in JAVA_JIT), f"-J-XX:SharedArchiveFile={OPT}/java/javac.jsa",
             "-J-Xlog:disable", "-J-Xlog:all=error:stderr", "-encoding", "UTF-8", "-proc:none", "-implicit:none",
             "-nowarn", "-Xlint:none", "-d", classes, *paths]
    step = budget.step(javac)
    if not ok(step):
        return [step], None
    # The main class: a public one of the tests (or of the program when there are none) first.
    candidates = sorted(java_top_types(units[-1][1]), key=lambda t: not t[1])
    argv = [JAVA, *JAVA_JIT, f"-XX:SharedArchiveFile={OPT}/java/run.jsa", "-Xlog:disable",
            "-Xlog:all=error:stderr", "-XX:+DisableAttachMechanism", f"-Xmx{limits['memory_mb']}m", "-Xss8m",
            "-ea", "-Dfile.encoding=UTF-8", "-cp", classes, "-p", f"{OPT}/java/mods",
            "-m", "proctor.launcher/proctor.launcher.Launcher", *(name for name, _ in candidates)]
    return [step], {"argv": argv, "data_limit": False}


# --------------------------------------------------------------------------- Go

GOROOT = "/usr/lib/go-1.19"
GO_TOOLS = f"{GOROOT}/pkg/tool/linux_amd64"
GO_PKGS = ["-I", f"{OPT}/go/pkg", "-I", "/usr/share/gocode/pkg/linux_amd64"]
_GO_TEST = re.compile(r"^func\s+(Test(?:[^a-z]\w*)?)\s*\(\s*\w+\s+\*testing\.T\s*\)", re.M)
_GO_PACKAGE = re.compile(r"^package\s+\w+", re.M)
GO_PROG = "proctorprog"
GO_MAIN = """package main

import (
\t"os"
\t"testing"
\t"testing/internal/testdeps"

\tguard "proctorguard"
\tprog "proctorprog"
)

var tests = []testing.InternalTest{
%s}

func main() {
\tm := testing.MainStart(testdeps.TestDeps{}, tests, nil, nil, nil)
\tcode := m.Run()
\tif code == 0 {
\t\tguard.Finish()
\t}
\tos.Exit(code)
}
"""


# A program without tests: its main runs, and the guard marks that it returned.
GO_PLAIN_MAIN = """package main

import (
\t_ "unsafe"

\tguard "proctorguard"
\t_ "proctorprog"
)

//go:linkname programMain proctorprog.main
func programMain()

func main() {
\tprogramMain()
\tguard.Finish()
}
"""
_GO_MAIN_FUNC = re.compile(r"^func\s+main\s*\(\s*\)", re.M)


def go_step(budget: Budget, argv: list[str]) -> dict:
    """A Go tool run; the tools print their errors on stdout, moved to stderr where errors are read."""
    step = budget.step(argv)
    if not ok(step) and step["stdout"]:
        step["stderr"] = base64.b64encode(base64.b64decode(step["stdout"]) + base64.b64decode(step["stderr"])).decode()
        step["stdout"] = ""
    return step


def go_link(budget: Budget, steps: list[dict], main_archive: str) -> Built:
    link = [f"{GO_TOOLS}/link", "-o", "prog", "-L", f"{OPT}/go/pkg", "-L", "/usr/share/gocode/pkg/linux_amd64",
            "-L", BUILD, main_archive]
    steps.append(go_step(budget, link))
    if not ok(steps[-1]):
        return steps, None
    return steps, {"argv": [os.path.join(WORK, "prog")], "data_limit": True}


def build_go(job: dict, limits: dict, budget: Budget) -> Built:
    tests = job.get("tests")
    names = _GO_TEST.findall(tests) if tests else []
    if tests and not names:
        why = "Go tests must define at least one func TestXxx(t *testing.T)"
        return [refused(budget.step(["/bin/true"]), why)], None
    if not tests and not _GO_MAIN_FUNC.search(job["code"]):
        return [refused(budget.step(["/bin/true"]), "a Go program without tests needs a func main()")], None
    # The program (and its tests) become an importable package whose init runs after the
    # guard's; a generated main runs the tests, or the program's own main.
    units = [("code.go", job["code"])] + ([("tests.go", tests)] if tests else [])
    files = [write_src(name, _GO_PACKAGE.sub(f"package {GO_PROG}", text, count=1)) for name, text in units]
    files.append(write_src("zz_proctor_guard.go", f'package {GO_PROG}\n\nimport _ "proctorguard"\n'))
    compile_ = [f"{GO_TOOLS}/compile", "-pack", *GO_PKGS]
    steps = [go_step(budget, [*compile_, "-p", GO_PROG, "-o", f"{BUILD}/{GO_PROG}.a", *files])]
    if not ok(steps[-1]):
        return steps, None
    steps.append(budget.step([f"{GO_TOOLS}/nm", f"{BUILD}/{GO_PROG}.a"]))
    reaching = sorted(s for s in undefined_symbols(steps[-1])
                      if s.startswith("proctorguard.") and s != "proctorguard..inittask")
    if not ok(steps[-1]) or reaching:
        why = ("the program references the test guard (" + ", ".join(reaching) + ")" if reaching
               else "could not list the program's symbols")
        return [refused(steps[-1], why)], None
    main_src = GO_MAIN % "".join(f'\t{{"{n}", prog.{n}}},\n' for n in names) if tests else GO_PLAIN_MAIN
    main_go = write_src("proctor_main.go", main_src)
    steps.append(go_step(budget, [*compile_, "-p", "main", "-I", BUILD, "-o", f"{BUILD}/main.a", main_go]))
    if not ok(steps[-1]):
        return steps, None
    return go_link(budget, steps, f"{BUILD}/main.a")


# --------------------------------------------------------------------------- Rust

RUSTC = "/usr/bin/rustc"


_RUST_ALLOW = re.compile(r"\s*#!\[allow\([\w:, ]*\)\]\s*")


def hoist_allows(code: str) -> tuple[str, str]:
    """Move leading `#![allow(...)]` lines of the program to the crate root, keeping line numbers.

    An included file may not hold inner attributes. Only `allow` moves: a crate-level
    `#![cfg(...)]` could remove the tests, so every other inner attribute stays where
    it is and fails to compile.
    """
    lines, allows = code.split("\n"), []
    for i, line in enumerate(lines):
        if _RUST_ALLOW.fullmatch(line):
            allows.append(line.strip() + "\n")
            lines[i] = ""
        elif line.strip() and not line.lstrip().startswith("//"):
            break
    return "\n".join(lines), "".join(allows)


def build_rust(job: dict, limits: dict, budget: Budget) -> Built:
    tests = job.get("tests")
    if tests and "#[test]" not in tests:
        step = budget.step(["/bin/true"])
        return [refused(step, "Rust tests must contain #[test] functions: they run under rustc --test")], None
    if tests and re.search(r"\bmacro_export\b", job["code"]):
        # An exported macro reaches the tests' module through `use super::*` and can
        # shadow assert_eq!; textual macro scope only flows forward, and the tests come first.
        step = budget.step(["/bin/true"])
        return [refused(step, "#[macro_export] is not available: it could redefine the tests' assert macros")], None
    code, allows = hoist_allows(job["code"])
    write_src("code.rs", code)
    if tests:
        write_src("tests.rs", tests)
        root = write_src("main.rs", f'{allows}include!("tests.rs");\ninclude!("code.rs");\n')
    else:
        root = write_src("main.rs", f'{allows}include!("code.rs");\n')
    argv = [RUSTC, "--edition", "2021", "-C", "opt-level=0", "-C", "debuginfo=0", "-C", "codegen-units=1",
            "-A", "warnings", "--emit", "link,obj", "-o", "prog",
            # The guard's atexit lives in libc_nonshared.a: name libc again after the guard.
            "-C", f"link-arg={OPT}/rust/guard.o", "-C", "link-arg=-lc", "-C", "link-arg=-Wl,--wrap=exit", root]
    steps = [budget.step(argv + (["--test"] if tests else []))]
    if not ok(steps[-1]):
        return steps, None
    steps.append(budget.step(["/usr/bin/nm", "-u", "prog.o"]))
    bad = sorted(undefined_symbols(steps[-1]) & set(GUARD_FORBIDDEN))
    if not ok(steps[-1]) or bad:
        why = (f"the program references {', '.join(bad)}, reserved for the test harness" if bad
               else "could not list the program's symbols")
        return [refused(steps[-1], why)], None
    os.unlink(os.path.join(WORK, "prog.o"))
    run = [os.path.join(WORK, "prog")] + (["--test-threads=1", "--nocapture"] if tests else [])
    return steps, {"argv": run, "data_limit": True, "as_limit": True}


# --------------------------------------------------------------------------- JavaScript

NODE = "/usr/bin/node-readable" if GVISOR else "/usr/bin/node"


def build_javascript(job: dict, limits: dict, budget: Budget) -> Built:
    """Nothing to compile: the launcher parses both scripts before running either."""
    paths = [write_src("main.js", job["code"])]
    if job.get("tests"):
        paths.append(write_src("tests.js", job["tests"]))
    argv = [NODE, f"--max-old-space-size={limits['memory_mb']}", "--stack-size=4000",
            f"{OPT}/node/launcher.js", "--sandbox-fds", WORK, *(os.path.join(WORK, p) for p in paths)]
    return [], {"argv": argv, "data_limit": False}


BUILDERS = {"java": build_java, "go": build_go, "rust": build_rust, "javascript": build_javascript}
