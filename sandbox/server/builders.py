"""Java, Go, Rust and JavaScript jobs: how each is built, checked and started.

Stdlib only: copied into the images beside the fork server.

Every step runs as the job's user in the build dir (layout.BUILD), which is gone
before the program runs; what the program needs at run time moves to layout.BIN
(root's) or travels on a pipe its launcher drains before any code of the program
runs. So no test source, object or class file is ever a file the program can read.

Tests that run inside the program's process (these four languages) prove that they
ran to their end the way C/C++ do: the server hands the run a one-time nonce on
fd 4, and a guard that runs before any code of the program (a launcher, a package
init, a preinit entry) reads it and writes it back on fd 3 only when the tests (a
program without tests: its main) returned. An early exit with status 0
(System.exit, os.Exit, std::process::exit, process.exit) therefore never passes.
The guards live in each image (/opt/proctor/LANG, built from images/LANG); this
module drives the compilers. All compile steps of a job share one budget of
``limits["compile_s"]`` (native.Budget), so the host's reply deadline holds.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import struct
import time

import confine
import javacd
import layout
from budgets import JAVAC_FLAGS, compile_mb
from classfile import read_class
from native import Budget, install, ok, refused
from runstep import Launch
from rustcheck import rust_refusal

LANGUAGES = ("java", "go", "rust", "javascript")
OPT = "/opt/proctor"
GUARD_O = f"{OPT}/native/guard.o"

Built = tuple[list[dict], "Launch | None"]   # compile steps, and how to run (None: the build failed)
Classes = javacd.Classes   # a Java build's class files by binary name


def build(job: dict, budget: Budget, gvisor: bool) -> Built:
    """Write the job's sources into a fresh build dir and build its program."""
    layout.make_build_dir()
    return BUILDERS[job["language"]](job, budget, gvisor)


def write_src(rel: str, text: str) -> str:
    """Write a source file into the build dir (as the job's user); returns its relative path."""
    confine.write(os.path.join(layout.BUILD, rel), text.encode())
    return rel


def undefined_symbols(nm_step: dict) -> set[str]:
    """Names from `nm` output lines of the form '[addr] U name' (GNU and Go nm alike)."""
    text = base64.b64decode(nm_step["stdout"]).decode(errors="replace")
    return {parts[-1] for parts in (line.split() for line in text.splitlines())
            if len(parts) >= 2 and parts[-2] == "U"}


# --------------------------------------------------------------------------- Java

JAVA_HOME = "/usr/lib/jvm/java-17-openjdk-amd64"
JAVA_JIT = ["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData", "-Xshare:auto"]
BUNDLE_FD = 5


def java_binary(gvisor: bool) -> str:
    """Under gVisor the runtimes start from readable copies (images/java, images/node): gVisor
    refuses to exec a binary its caller cannot read, and keeps every process out of an
    ancestor's /proc/PID/mem, dumpable or not (measured), which the execute-only binaries
    (non-dumpable runtimes) ensure under runc."""
    return f"{JAVA_HOME}/bin/java-readable" if gvisor else f"{JAVA_HOME}/bin/java"


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
    # A type named like a package's first part (`class java`) obscures the package in the
    # tests' fully qualified names: `java.util.Arrays.asList` would be the program's.
    known |= {p.split(".")[0] for p in _JDK_TYPES}
    return sorted({name for name, _ in java_top_types(code)} & known)


def build_java(job: dict, budget: Budget, gvisor: bool) -> Built:
    """javac both units; the classes reach the launcher on a pipe (fd 5), never as files the program can read."""
    units = [("code", job["code"])] + ([("tests", job["tests"])] if job.get("tests") else [])
    hidden = java_hidden_types(job["code"], job["tests"]) if job.get("tests") else []
    if hidden:
        why = (f"the program declares {', '.join(hidden)}, which would hide the JDK's type of that name "
               "from the tests; rename it")
        return [refused(budget.step(["/bin/true"]), why)], None
    sources = []
    for folder, text in units:
        public = [name for name, is_public in java_top_types(text) if is_public]
        # javac wants a public class in a file of its name; the folders keep the units apart.
        sources.append((f"src/{folder}/{public[0] if public else folder.title()}.java", text))
    step, classes = javac(sources, budget, gvisor)
    shutil.rmtree(layout.BUILD)
    if not ok(step):
        return [step], None
    why = java_equals_refusal(classes, os.path.basename(sources[0][0]))
    if why:
        return [refused(step, why)], None
    bundle = class_bundle(classes)
    # The main class: a public one of the tests (or of the program when there are none) first.
    candidates = sorted(java_top_types(units[-1][1]), key=lambda t: not t[1])
    limits = budget.limits
    argv = [java_binary(gvisor), *JAVA_JIT, f"-XX:SharedArchiveFile={OPT}/java/run.jsa", "-Xlog:disable",
            "-Xlog:all=error:stderr", "-XX:+DisableAttachMechanism", f"-Xmx{limits['memory_mb']}m", "-Xss8m",
            "-ea", "-Dfile.encoding=UTF-8", "--add-exports", "java.base/jdk.internal.access=proctor.launcher",
            "-p", f"{OPT}/java/mods",
            "-m", "proctor.launcher/proctor.launcher.Launcher", *(name for name, _ in candidates)]
    # The nonce pipe is root's: the launcher reads it (after main returned) through an fd, and the
    # program cannot reopen it through /proc/self/fd.
    return [step], Launch(argv=argv, nonce_fd=True, nonce_private=True, extra={BUNDLE_FD: bundle})


_JAVACD: dict[bool, javacd.Javacd] = {}   # the container's compile server (by gvisor), started on first use


def prestart(gvisor: bool) -> None:
    """In a Java image, start the compile server while the container waits for its first job."""
    if os.path.exists(javacd.JAR):
        try:
            java_compile_server(gvisor).start()
        except OSError:
            pass   # the first Java job tries again, and falls back to javac's command line


def java_compile_server(gvisor: bool) -> javacd.Javacd:
    if gvisor not in _JAVACD:
        _JAVACD[gvisor] = javacd.Javacd(java_binary(gvisor), compile_mb("java", 0) << 20)
    return _JAVACD[gvisor]


def javac(sources: list[tuple[str, str]], budget: Budget, gvisor: bool) -> tuple[dict, Classes]:
    """Compile the units (path, source) with the warm compile server, or with the command-line
    javac when the server gives no verdict: (the compile step, the classes by binary name)."""
    try:
        return java_compile_server(gvisor).compile(sources, max(budget.end - time.monotonic(), 0.05),
                                                   budget.limits["output_bytes"])
    except javacd.Unavailable:
        return javac_command(sources, budget)


def javac_command(sources: list[tuple[str, str]], budget: Budget) -> tuple[dict, Classes]:
    """The command-line javac, in the job's build dir, as the job's user."""
    paths = [write_src(path, text) for path, text in sources]
    # --limit-modules java.se: what the program can name is the Java SE API (no sun.misc.Unsafe).
    argv = [f"{JAVA_HOME}/bin/javac", *(f"-J{f}" for f in (*JAVA_JIT, *JAVAC_FLAGS)),
            f"-J-XX:SharedArchiveFile={OPT}/java/javac.jsa", "-J-Xlog:disable", "-J-Xlog:all=error:stderr",
            "-encoding", "UTF-8", "-proc:none", "-implicit:none", "-nowarn", "-Xlint:none",
            "--limit-modules", "java.se", "-d", "classes", *paths]
    step = budget.step(argv)
    return step, read_classes(os.path.join(layout.BUILD, "classes")) if ok(step) else {}


def read_classes(root: str) -> Classes:
    """Every class file under ``root``, by binary name (``a/B$C.class`` -> ``a.B$C``)."""
    classes = {}
    for folder, _dirs, files in os.walk(root):
        for file in files:
            if file.endswith(".class"):
                path = os.path.join(folder, file)
                with open(path, "rb") as f:
                    classes[os.path.relpath(path, root)[:-len(".class")].replace(os.sep, ".")] = f.read()
    return classes


def java_equals_refusal(classes: Classes, program_file: str) -> str | None:
    """Why the program's classes may not run: one of them defines equals(Object).

    The tests run in the program's JVM and compare its values with equals
    (``s.f(x).equals(expected)``): an equals the program writes (an anonymous ArrayList
    whose equals is always true) would decide them.
    """
    for name, data in sorted(classes.items()):
        try:
            info = read_class(data)
        except (ValueError, struct.error, IndexError):
            return f"could not read the compiled class {name}"
        if info.source_file != program_file:
            continue
        if ("equals", "(Ljava/lang/Object;)Z") in info.methods:
            return (f"the program's class {info.name.replace('/', '.')} defines equals(Object); the tests "
                    "compare values with equals, so the program may not define it (records included)")
        reflective = java_reflection(info)
        if reflective:
            return (f"the program's class {info.name.replace('/', '.')} uses {reflective}: reflection and "
                    "proxies are not available (a proxy's handler answers equals; reflection reads the tests)")
    return None


# Reflection reads the tests' classes; a Proxy (or a JMX or java.beans one) answers equals
# through its handler, which no equals(Object) check sees. Lambdas, string concatenation
# and records bootstrap through java.lang.invoke too: only what reaches other classes'
# members by name is refused.
_JAVA_REFLECTIVE_PACKAGES = ("java/lang/reflect/", "java/beans/", "javax/management/")
_JAVA_REFLECTIVE_MEMBERS = {
    "java/lang/Class": {"forName", "getMethod", "getMethods", "getDeclaredMethod", "getDeclaredMethods",
                        "getField", "getFields", "getDeclaredField", "getDeclaredFields", "getConstructor",
                        "getConstructors", "getDeclaredConstructor", "getDeclaredConstructors", "newInstance",
                        "getClassLoader", "getEnclosingMethod", "getEnclosingConstructor", "getRecordComponents"},
    "java/lang/invoke/MethodHandles": None, "java/lang/invoke/MethodHandles$Lookup": None,
    "java/lang/invoke/MethodHandleProxies": None, "java/lang/ClassLoader": None,
}


def java_reflection(info) -> str | None:   # info: classfile.ClassInfo
    """What reflective API a compiled class of the program refers to, or None."""
    for name in (*info.classes, *info.texts):
        for package in _JAVA_REFLECTIVE_PACKAGES:
            if package in name:
                return package.rstrip("/").replace("/", ".")
    for owner, member in info.members:
        refused_members = _JAVA_REFLECTIVE_MEMBERS.get(owner, ())
        if refused_members is None or member in refused_members:
            return f"{owner.replace('/', '.').replace('$', '.')}.{member}"
    return None


def class_bundle(classes: Classes) -> bytes:
    """Every class as one blob: count, then (binary name, bytes) records, big-endian, by name."""
    records = [struct.pack(">I", len(name.encode())) + name.encode() + struct.pack(">I", len(data)) + data
               for name, data in sorted(classes.items())]
    return struct.pack(">I", len(records)) + b"".join(records)


# --------------------------------------------------------------------------- Go

GOROOT = "/usr/lib/go-1.19"
GO_TOOLS = f"{GOROOT}/pkg/tool/linux_amd64"
GO_PKGS = ["-I", f"{OPT}/go/pkg", "-I", "/usr/share/gocode/pkg/linux_amd64"]
GO_NOHTTP = f"{OPT}/go/nohttp"   # testify's assert without its HTTP assertions (images/go)
_GO_TEST = re.compile(r"^func\s+(Test(?:[^a-z]\w*)?)\s*\(\s*\w+\s+\*testing\.T\s*\)", re.M)
_GO_PACKAGE = re.compile(r"^package\s+\w+", re.M)
GO_PROG = "proctorprog"
# The tests run from a generated main that hands them to the image's runner
# (images/go/testmain.go): it resets os.Args (no -test.run of the program's) and counts
# each test only if its function returned without failing or skipping; a test that did
# not run to its end (flags set by the program's init, runtime.Goexit) fails the run.
GO_MAIN = """package main

import (
\ttm "proctortestmain"
\tprog "proctorprog"
)

func main() {
\ttm.Run([]tm.Test{
%s\t})
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
_GO_COMMENTS = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|`[^`]*`|\'(?:\\.|[^\'\\\n])*\'', re.S)
_GO_IMPORT = re.compile(r"\bimport\s*(\([^)]*\)|[^\n;]*)")
_GO_PATH = re.compile(r'"((?:\\.|[^"\\\n])*)"|`([^`]*)`')
# unsafe reaches any memory (the guard's nonce); "C" is cgo; go:linkname reaches any
# symbol (the generated main's, the guard's); go:embed reads files at compile time.
_GO_REFUSED_IMPORTS = ("unsafe", "C")
_GO_REFUSED_DIRECTIVES = ("//go:linkname", "//go:embed", "//go:cgo_")


def go_imports(code: str) -> set[str]:
    """The import paths of a Go file (comments skipped, strings kept for the paths)."""
    flat = _GO_COMMENTS.sub(lambda m: m.group(0) if m.group(0)[0] in "\"`" else " ", code)
    paths = set()
    for block in _GO_IMPORT.findall(flat):
        for quoted, raw in _GO_PATH.findall(block):
            paths.add(quoted or raw)
    return paths


def go_refusal(code: str) -> str | None:
    paths = go_imports(code)
    escaped = sorted(p for p in paths if "\\" in p)
    if escaped:
        # The compiler unquotes an import path: "\u0075nsafe" is "unsafe".
        return f'the program writes an escape in the import path "{escaped[0]}"; write the path out'
    imported = sorted(paths & set(_GO_REFUSED_IMPORTS))
    if imported:
        return f'the program imports "{imported[0]}", which is not available in the sandbox'
    directive = next((d for d in _GO_REFUSED_DIRECTIVES if d in code), None)
    if directive:
        return f"the program uses {directive}, which is not available in the sandbox"
    return None


def go_step(budget: Budget, argv: list[str]) -> dict:
    """A Go tool run; the tools print their errors on stdout, moved to stderr where errors are read."""
    step = budget.step(argv)
    if not ok(step) and step["stdout"]:
        step["stderr"] = base64.b64encode(base64.b64decode(step["stdout"]) + base64.b64decode(step["stderr"])).decode()
        step["stdout"] = ""
    return step


def build_go(job: dict, budget: Budget, gvisor: bool) -> Built:
    tests = job.get("tests")
    names = _GO_TEST.findall(tests) if tests else []
    if tests and not names:
        why = "Go tests must define at least one func TestXxx(t *testing.T)"
        return [refused(budget.step(["/bin/true"]), why)], None
    if not tests and not _GO_MAIN_FUNC.search(job["code"]):
        return [refused(budget.step(["/bin/true"]), "a Go program without tests needs a func main()")], None
    why = go_refusal(job["code"])
    if why:
        return [refused(budget.step(["/bin/true"]), why)], None
    # The program (and its tests) become an importable package whose init runs after the
    # guard's; a generated main runs the tests, or the program's own main.
    units = [("code.go", job["code"])] + ([("tests.go", tests)] if tests else [])
    files = [write_src(name, _GO_PACKAGE.sub(f"package {GO_PROG}", text, count=1)) for name, text in units]
    files.append(write_src("zz_proctor_guard.go", f'package {GO_PROG}\n\nimport _ "proctorguard"\n'))
    # No source that says HTTP can name an HTTP assertion (a dot import or a method value
    # still spells it), so such a job builds against the assert without them; every step
    # of one build searches the same dirs, so the linker sees one assert.
    nohttp = not any("HTTP" in text for _, text in units)
    compile_ = [f"{GO_TOOLS}/compile", "-pack", *(["-I", GO_NOHTTP] if nohttp else []), *GO_PKGS]
    steps = [go_step(budget, [*compile_, "-p", GO_PROG, "-o", f"{GO_PROG}.a", *files])]
    if not ok(steps[-1]):
        return steps, None
    steps.append(budget.step([f"{GO_TOOLS}/nm", f"{GO_PROG}.a"]))
    reaching = sorted(s for s in undefined_symbols(steps[-1])
                      if s.startswith(("proctorguard.", "proctortestmain.")) and not s.endswith("..inittask"))
    if not ok(steps[-1]) or reaching:
        why = ("the program references the test guard or runner (" + ", ".join(reaching) + ")" if reaching
               else "could not list the program's symbols")
        return [refused(steps[-1], why)], None
    if tests:
        main_src = GO_MAIN % "".join(f'\t\t{{"{n}", prog.{n}}},\n' for n in names)
    else:
        main_src = GO_PLAIN_MAIN
    main_go = write_src("proctor_main.go", main_src)
    steps.append(go_step(budget, [*compile_, "-p", "main", "-I", ".", "-o", "main.a", main_go]))
    if not ok(steps[-1]):
        return steps, None
    # -s -w: no ELF symbol table or DWARF (the runtime's own tables stay, so panics still name
    # functions and lines); the link writes half as much and takes about half the time.
    link = [f"{GO_TOOLS}/link", "-s", "-w", "-o", "prog", *(["-L", GO_NOHTTP] if nohttp else []),
            "-L", f"{OPT}/go/pkg", "-L", "/usr/share/gocode/pkg/linux_amd64", "-L", ".", "main.a"]
    steps.append(go_step(budget, link))
    if not ok(steps[-1]):
        return steps, None
    return steps, Launch(argv=[install(os.path.join(layout.BUILD, "prog"), gvisor)], data_limit=True,
                         nonce_fd=True)


# --------------------------------------------------------------------------- Rust

RUSTC = "/usr/bin/rustc"
# std as a shared library (rustc -C prefer-dynamic): rustc then takes ~0.1 s instead of ~0.35 s,
# most of which was linking std in. The program finds it by its rpath; the image checks it is
# there. gold links what is left ~15 ms faster than bfd.
RUST_STD_LIB = "/usr/lib/rustlib/x86_64-unknown-linux-gnu/lib"
RUST_CRATES = f"{OPT}/rust"   # the image's precompiled crates (images/rust): deps/*.rlib, externs.txt
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


def rust_extern_args(crates: str = RUST_CRATES) -> list[str]:
    """rustc arguments that make the image's crates (rand, regex, md5) nameable by a program.

    Only the crates listed in externs.txt (``name=path`` lines) are in the extern prelude;
    their own dependencies (libc, getrandom, ...) are found through ``-L dependency=``,
    which no ``extern crate`` of the program can name. An image without the list (an
    older one) gives no arguments, and such a `use` fails to compile as it always did.
    """
    try:
        with open(os.path.join(crates, "externs.txt")) as f:
            externs = [line.strip() for line in f if line.strip()]
    except FileNotFoundError:
        return []
    return ["-L", f"dependency={crates}/deps", *(arg for e in externs for arg in ("--extern", e))]


def build_rust(job: dict, budget: Budget, gvisor: bool) -> Built:
    """rustc reads the crate root (the tests, then an include! of the program) from its stdin.

    The tests are never a file, so no include_str! of the program's can read them. The
    whole crate is compiled with -F unsafe_code: no unsafe block, #[no_mangle],
    #[export_name] or #[link_section], so no code runs before main and no symbol of the
    C library, of std (a shared library here: -C prefer-dynamic) or of the guard is
    replaced. The tests run without arguments (their harness options come from the
    environment), so no argument rewriting can filter them.
    """
    tests = job.get("tests")
    if tests and "#[test]" not in tests:
        step = budget.step(["/bin/true"])
        return [refused(step, "Rust tests must contain #[test] functions: they run under rustc --test")], None
    why = rust_refusal(job["code"]) if tests else None
    if why:
        return [refused(budget.step(["/bin/true"]), why)], None
    code, allows = hoist_allows(job["code"])
    program = os.path.join(layout.BUILD, write_src("code.rs", code))
    root = f'{allows}{tests}\ninclude!("{program}");\n' if tests else f'{allows}include!("{program}");\n'
    argv = [RUSTC, "--edition", "2021", "-C", "opt-level=0", "-C", "debuginfo=0", "-C", "codegen-units=1",
            "-A", "warnings", "-F", "unsafe_code", "--crate-name", "main", "-o", "prog", *rust_extern_args(),
            "-C", "prefer-dynamic", "-C", f"link-arg=-Wl,-rpath,{RUST_STD_LIB}", "-C", "link-arg=-fuse-ld=gold",
            "-C", f"link-arg={GUARD_O}", "-C", "link-arg=-Wl,--wrap=main", "-"]
    steps = [budget.step(argv + (["--test"] if tests else []), stdin=root.encode())]
    if not ok(steps[-1]):
        return steps, None
    env = {"RUST_TEST_THREADS": "1", "RUST_TEST_NOCAPTURE": "1"} if tests else {}
    return steps, Launch(argv=[install(os.path.join(layout.BUILD, "prog"), gvisor)], data_limit=True, as_limit=True,
                         nonce_fd=True, env=env)


# --------------------------------------------------------------------------- JavaScript

PROGRAM_FD, TESTS_FD = 5, 6


def node_binary(gvisor: bool) -> str:
    return "/usr/bin/node-readable" if gvisor else "/usr/bin/node"


def build_javascript(job: dict, budget: Budget, gvisor: bool) -> Built:
    """Nothing to compile: the launcher reads both scripts from pipes and parses them before running either."""
    shutil.rmtree(layout.BUILD)
    names = ["/work/main.js"] + (["/work/tests.js"] if job.get("tests") else [])
    extra = {PROGRAM_FD: job["code"].encode()}
    if job.get("tests"):
        extra[TESTS_FD] = job["tests"].encode()
    limits = budget.limits
    argv = [node_binary(gvisor), f"--max-old-space-size={limits['memory_mb']}", "--stack-size=4000",
            f"{OPT}/node/launcher.js", "--sandbox-fds", layout.WORK, *names]
    return [], Launch(argv=argv, nonce_fd=True, extra=extra)


BUILDERS = {"java": build_java, "go": build_go, "rust": build_rust, "javascript": build_javascript}
