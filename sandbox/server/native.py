"""C and C++ jobs: compile the program and the tests apart, keep the program out of the tests' symbols, link with the guard.

Stdlib only: copied into the images beside the fork server.

The tests are compiled from a pipe (the compiler's stdin): they never exist as a file,
so no ``#include`` or ``.incbin`` of the program's can read them, and the program is
compiled first, before their object exists. Every step runs as the job's user in a
build dir of its own (layout.BUILD); the linked program moves to layout.BIN, owned by
root and execute-only under runc (not even the program can read its binary there).

The program may define only what the tests call and no library defines (its entry
points, say ``add`` or ``split_words``): every other global symbol of its object is
renamed out of the way before the link. So a program that defines ``__assert_fail``,
``memcmp``, ``std::string::compare`` (through an asm label), ``main`` or a template
instance the tests use keeps those definitions to itself: the tests call the C and
C++ libraries, and their own code, exactly as written. Refused outright, with a
compile error that says why: indirect functions (their resolvers run before the
guard reads the nonce), code in .preinit_array/.init/.fini, sections the compiler
never makes for a plain program, and references to the guard's own symbols.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import os
import re
import shutil
import stat
import time
from collections import OrderedDict

import confine
import layout
from runstep import Launch

GUARD_O = "/opt/proctor/native/guard.o"
RENAMED = "proctor.program."                 # prefix of the program's renamed symbols
FORBIDDEN_REFS = ("__real_main", "__wrap_main")
# Sections a compiler makes for ordinary C/C++ (and their relocation sections).
SECTION_PREFIXES = (".text", ".data", ".bss", ".rodata", ".tdata", ".tbss", ".init_array", ".fini_array",
                    ".eh_frame", ".gcc_except_table", ".note.GNU-stack", ".note.gnu.property", ".comment",
                    ".group", ".symtab", ".strtab", ".shstrtab", ".debug", ".ctors", ".dtors")
_DEFINED = set("TDBRCWVui")
# Every compile of a job's C or C++ (program and tests) uses exactly these: the precompiled
# <bits/stdc++.h> (make_pch) is valid only for the flags it was made with.
CC = ("/usr/bin/gcc", "-std=gnu17", "-O2")
CXX = ("/usr/bin/g++", "-std=gnu++17", "-O2")
PCH_HEADER = "bits/stdc++.h"
CRYPTO_SYMBOLS = "/opt/proctor/native/libcrypto-symbols.txt"   # list_crypto_symbols, at image build
# Preludes: header files of `#include <...>` lines only (images/cpp/preludes), each precompiled
# beside itself at image build. A C++ unit that starts with a prelude's exact text compiles with
# those lines blanked (line numbers stay) and `-include` of the prelude: the same tokens, but
# GCC reads the .gch instead of parsing ~20 headers (~0.3 s of a ~0.4 s compile).
PRELUDE_DIR = "/opt/proctor/preludes"
_PRELUDES: list[tuple[str, str]] = []
# The tests' object file, by its exact compile (flags and source): made once per container, then
# copied into each job's build dir, so the answers to one task compile their tests once. The
# tests are the task's, never the program's, and g++ writes nothing but its output, so the
# object is what g++ made of the tests alone. Kept in the server's memory (root's; no job can
# read or write it), at most this much.
TESTS_OBJECTS_BYTES = 8 << 20
TESTS_OBJECT_MAX = 2 << 20
_tests_objects: "OrderedDict[str, bytes]" = OrderedDict()


def build(job: dict, budget: "Budget", gvisor: bool) -> tuple[list[dict], Launch | None]:
    """Compile, check, rename, link. Returns the steps and how to run the program (None: it failed)."""
    c = job["language"] == "c"
    (compiler, std, opt), lang = (CC, "c") if c else (CXX, "c++")
    build_dir = layout.make_build_dir()
    src = f"main.{'c' if c else 'cpp'}"
    code, prelude = (job["code"], []) if c else with_prelude(job["code"])
    confine.write(os.path.join(build_dir, src), code.encode())
    steps = [budget.step([compiler, std, opt, "-pipe", *prelude, "-c", src, "-o", "main.o"])]
    if not ok(steps[-1]):
        return steps, None
    objects = ["main.o"]
    if job.get("tests"):
        body, prelude = (job["tests"], []) if c else with_prelude(job["tests"])
        tests = f'#line 1 "tests.{"c" if c else "cpp"}"\n' + body   # messages name it, not <stdin>
        argv = [compiler, std, opt, "-pipe", *prelude, "-x", lang, "-c", "-", "-o", "tests.o"]
        key = hashlib.sha256("\0".join([*argv, tests]).encode()).hexdigest()
        made = _tests_objects.get(key)
        if made is not None:
            confine.write(os.path.join(build_dir, "tests.o"), made)
        else:
            steps.append(budget.step(argv, stdin=tests.encode()))
            if not ok(steps[-1]):
                return steps, None
            _keep_tests_object(key, os.path.join(build_dir, "tests.o"))
        objects.insert(0, "tests.o")   # first: where both define a weak symbol, the tests' copy wins
    steps.append(budget.step(["/usr/bin/nm", "-P", "-A", *objects]))
    sections = budget.step(["/usr/bin/readelf", "-S", "-W", "main.o"])
    if not (ok(steps[-1]) and ok(sections)):
        return [refused(steps[-1], "could not list the program's symbols and sections")], None
    symbols = parse_nm(decode(steps[-1]))
    why = problem(symbols, section_names(decode(sections)))
    if why:
        return [refused(steps[-1], why)], None
    renames = renamed_symbols(symbols) if job.get("tests") else []
    if renames:
        groups = budget.step(["/usr/bin/readelf", "-g", "-W", "main.o"])
        if not ok(groups):
            return [refused(groups, "could not list the program's COMDAT groups")], None
        renames += renamed_groups(symbols, renames, decode(groups))
        confine.write(os.path.join(build_dir, "renames"), "".join(f"{s} {RENAMED}{s}\n" for s in renames).encode())
        steps.append(budget.step(["/usr/bin/objcopy", "--redefine-syms=renames", "main.o"]))
        if not ok(steps[-1]):
            return [refused(steps[-1], "could not rename the program's symbols")], None
    # gold: about half bfd's time for these links (~30 of ~60 ms); --wrap and COMDAT groups alike.
    link = [compiler, std, opt, "-fuse-ld=gold", "-o", "prog", GUARD_O, *objects, "-lm",
            *crypto_options(symbols), "-Wl,--wrap=main"]
    steps.append(budget.step(link))
    if not ok(steps[-1]):
        return steps, None
    return steps, Launch(argv=[install(os.path.join(build_dir, "prog"), gvisor)], data_limit=True, as_limit=True,
                         nonce_fd=True)


def _keep_tests_object(key: str, path: str) -> None:
    """Remember the tests' object g++ just wrote (a regular file, not a link), oldest out first."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > TESTS_OBJECT_MAX:
            return
        _tests_objects[key] = f.read()
    while sum(len(v) for v in _tests_objects.values()) > TESTS_OBJECTS_BYTES:
        _tests_objects.popitem(last=False)


def preludes() -> list[tuple[str, str]]:
    """(path, text) of the image's preludes, longest first; read once (the image's read-only layer)."""
    if not _PRELUDES and os.path.isdir(PRELUDE_DIR):
        for name in sorted(os.listdir(PRELUDE_DIR)):
            if name.endswith(".h"):
                path = os.path.join(PRELUDE_DIR, name)
                with open(path, encoding="utf-8") as f:
                    _PRELUDES.append((path, f.read()))
        _PRELUDES.sort(key=lambda p: -len(p[1]))
    return _PRELUDES


def with_prelude(source: str) -> tuple[str, list[str]]:
    """``source`` with a prelude's lines blanked and the options that include it instead, when it
    starts with one (its exact text); else ``source`` and no options."""
    for path, text in preludes():
        if source.startswith(text):
            return "\n" * text.count("\n") + source[len(text):], ["-include", path]
    return source, []


def install(built: str, gvisor: bool) -> str:
    """Move a built program where the job cannot write it; under runc it cannot read it either.

    gVisor refuses to exec a binary its caller cannot read, so there it stays readable.
    """
    target = os.path.join(layout.BIN, "prog")
    shutil.move(built, target)
    os.chown(target, 0, 0)
    os.chmod(target, 0o755 if gvisor else 0o711)
    shutil.rmtree(layout.BUILD)
    return target


def decode(step: dict) -> str:
    return base64.b64decode(step["stdout"]).decode(errors="replace")


def ok(step: dict) -> bool:
    return step["exit_code"] == 0 and not step["timed_out"] and not step["oom"]


def refused(step: dict, why: str) -> dict:
    """Turn a checking step into a failed compile that says why."""
    step.update(exit_code=1, signal=None, stdout="", stderr=base64.b64encode(f"[proctor] {why}\n".encode()).decode())
    return step


def parse_nm(text: str) -> dict[str, dict[str, str]]:
    """``nm -P -A`` output -> {object: {symbol: type letter}}."""
    out: dict[str, dict[str, str]] = {}
    for line in text.splitlines():
        head, _, rest = line.partition(": ")
        parts = rest.split()
        if len(parts) >= 2:
            out.setdefault(head.strip(), {})[parts[0]] = parts[1]
    return out


def section_names(text: str) -> list[str]:
    """Section names from ``readelf -S -W``."""
    names = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("[") and "]" in line and not line.startswith("[ 0]"):   # entry 0: the null section
            fields = line.split("]", 1)[1].split()
            if fields and fields[0] != "Name":
                names.append(fields[0])
    return names


def problem(symbols: dict[str, dict[str, str]], sections: list[str]) -> str | None:
    program = symbols.get("main.o", {})
    ifunc = sorted(s for s, t in program.items() if t == "i")
    if ifunc:
        return (f"the program defines indirect functions ({', '.join(ifunc[:3])}), whose resolvers run before "
                "the test harness starts; remove the ifunc/target_clones attribute")
    reserved = sorted(s for s in program if s in FORBIDDEN_REFS or s.startswith(("proctor", RENAMED)))
    if reserved:
        return f"the program uses {', '.join(reserved[:3])}, reserved for the test harness"
    for name in sections:
        base = name
        for prefix in (".rela", ".rel"):
            if base.startswith(prefix + "."):
                base = base[len(prefix):]
        if not base.startswith(SECTION_PREFIXES) or base.startswith((".init.", ".fini.")) or base in (".init", ".fini"):
            return (f"the program puts code or data in section {name!r}, which the test harness does not "
                    "allow (only the sections a compiler makes for ordinary code)")
    return None


def renamed_symbols(symbols: dict[str, dict[str, str]]) -> list[str]:
    """The program's global definitions that are not its entry points: everything but what only it defines for the tests."""
    program = symbols.get("main.o", {})
    tests = symbols.get("tests.o", {})
    wanted = {s for s, t in tests.items() if t == "U"}
    libraries = library_symbols()
    return sorted(s for s, t in program.items()
                  if t in _DEFINED and not (s in wanted and s not in libraries))


_GROUP = re.compile(r"^COMDAT group section \[\s*\d+\] `[^']*' \[(.+)\] contains", re.M)


def renamed_groups(symbols: dict[str, dict[str, str]], renames: list[str], readelf_groups: str) -> list[str]:
    """Signatures of the program's COMDAT groups that must be renamed with its symbols.

    The linker keeps one group per signature, the first it sees (the tests'): a template
    instance both units define (``vector<string>``'s constructor, whose group is named by
    a local ``C5`` symbol that nm does not list) would lose the program's copy, renamed
    definitions and all, and the program's calls would go to address 0 or fail to link.
    Renaming the signature keeps the program's group its own. A group named by a symbol
    the program keeps (an entry point of the tests) is left alone.
    """
    program = symbols.get("main.o", {})
    kept = {s for s, t in program.items() if t in _DEFINED} - set(renames)
    signatures = dict.fromkeys(_GROUP.findall(readelf_groups))
    return [s for s in signatures if s not in kept and s not in renames]


def crypto_options(symbols: dict[str, dict[str, str]]) -> list[str]:
    """The link options for libcrypto (openssl/md5.h, HumanEval-X's C++ md5 row): none unless an
    object calls one of its functions.

    --as-needed alone gives the same program, but gold still reads all of libcrypto's symbols
    for that (~17 of ~40 ms a link). A strong undefined reference is what --as-needed counts,
    so the test is the same one the linker makes; without the list, the link reads libcrypto.
    """
    library = crypto_symbols()
    if library is not None and not any(t == "U" and s in library for obj in symbols.values() for s, t in obj.items()):
        return []
    return ["-Wl,--push-state,--as-needed", "-lcrypto", "-Wl,--pop-state"]


def crypto_symbols() -> frozenset[str] | None:
    """libcrypto's functions and data (listed when the image was built), or None where no list is."""
    try:
        return _names(CRYPTO_SYMBOLS)
    except FileNotFoundError:
        return None


def list_crypto_symbols() -> int:
    """At image build: write the names libcrypto's shared object defines (CRYPTO_SYMBOLS); returns how many."""
    import subprocess

    lib = subprocess.run([CC[0], "-print-file-name=libcrypto.so"], capture_output=True, text=True,
                         check=True).stdout.strip()
    if not os.path.isabs(lib):
        raise RuntimeError("gcc finds no libcrypto.so: install libssl-dev")
    out = subprocess.run(["/usr/bin/nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True)
    names = sorted({line.split()[-1].split("@")[0] for line in out.stdout.splitlines() if len(line.split()) >= 2})
    if len(names) < 1000:
        raise RuntimeError(f"nm listed {len(names)} symbols of {lib}: expected thousands")
    with open(CRYPTO_SYMBOLS, "w") as f:
        f.write("".join(n + "\n" for n in names))
    return len(names)


def library_symbols() -> frozenset[str]:
    """Every symbol the C and C++ libraries define (listed when the image was built)."""
    return _names("/opt/proctor/native/library-symbols.txt")


@functools.lru_cache(maxsize=None)
def _names(path: str) -> frozenset[str]:
    """The names of a symbol list the image holds, one a line; read once (the image's read-only layer)."""
    with open(path) as f:
        return frozenset(line.strip() for line in f if line.strip())


class Budget:
    """Runs compile steps against one shared deadline of ``compile_s``, with the compilers' limits."""

    def __init__(self, limits: dict, run_step, as_bytes: int, fsize_bytes: int, cwd: str = layout.BUILD) -> None:
        self.limits, self.run_step = limits, run_step
        self.as_bytes, self.fsize_bytes, self.cwd = as_bytes, fsize_bytes, cwd
        self.end = time.monotonic() + limits["compile_s"]

    def step(self, argv: list[str], stdin: bytes | None = None, as_bytes: int | None = None) -> dict:
        left = max(self.end - time.monotonic(), 0.05)
        launch = Launch(argv=argv, cwd=self.cwd, fsize_bytes=self.fsize_bytes,
                        as_bytes=self.as_bytes if as_bytes is None else as_bytes)
        return self.run_step("compile", self.limits, launch, wall_s=left, cpu_s=left, stdin=stdin)


def make_pch() -> str:
    """At image build (as root, before any job): precompile <bits/stdc++.h> beside itself with the
    flags of every C++ compile, so a program that includes it first compiles in a third of the time.

    GCC reads ``stdc++.h.gch`` in place of the header only when it was made with the same
    options, and falls back to the header itself otherwise, so a job's verdict cannot depend on
    it. It lies in the image's read-only layer: every job sees the same one, none can change it.
    Returns the .gch's path; raises RuntimeError when GCC would not use it.
    """
    import subprocess

    compiler, std, opt = CXX
    probe = subprocess.run([compiler, std, opt, "-x", "c++", "-H", "-fsyntax-only", "-"],
                           input=f"#include <{PCH_HEADER}>\n", capture_output=True, text=True, check=True)
    header = probe.stderr.splitlines()[0].split(" ", 1)[1].strip()
    if not header.endswith(PCH_HEADER):
        raise RuntimeError(f"g++ -H named {header!r} first, not {PCH_HEADER}")
    subprocess.run([compiler, std, opt, "-x", "c++-header", header, "-o", header + ".gch"], check=True)
    used = pch_used()
    if used is None:
        raise RuntimeError(f"g++ does not use {header}.gch with the jobs' flags")
    for path, text in preludes():
        if any(line and not re.fullmatch(r"#include <[\w./+-]+>", line) for line in text.split("\n")):
            raise RuntimeError(f"{path}: a prelude holds only `#include <header>` lines")
        subprocess.run([compiler, std, opt, "-x", "c++-header", path, "-o", path + ".gch"], check=True)
        if prelude_used(text) != path + ".gch":
            raise RuntimeError(f"g++ does not use {path}.gch for a unit that starts with its text")
    return used


def prelude_used(text: str) -> str | None:
    """The .gch a job's C++ unit that starts with ``text`` (then a function) reads, or None."""
    source, prelude = with_prelude(text + "int f() { return 0; }\n")
    return _gch_read(source, prelude)


def pch_used() -> str | None:
    """The .gch a job's compile of ``#include <bits/stdc++.h>`` reads, or None."""
    return _gch_read(f'#line 1 "main.cpp"\n#include <{PCH_HEADER}>\nint main() {{ return 0; }}\n', [])


def _gch_read(source: str, options: list[str]) -> str | None:
    """The .gch g++ reads compiling ``source`` as a job's C++ unit with ``options`` (-H marks it '!'), or None."""
    import subprocess

    compiler, std, opt = CXX
    out = subprocess.run([compiler, std, opt, "-pipe", *options, "-x", "c++", "-H", "-Winvalid-pch", "-c", "-",
                          "-o", "/dev/null"], input=source, capture_output=True, text=True, check=True)
    used = [line[2:] for line in out.stderr.splitlines() if line.startswith("! ")]
    return used[0] if used else None


if __name__ == "__main__":   # python3 native.py make-pch | crypto-symbols (images/cpp/Dockerfile)
    import sys

    if sys.argv[1:] == ["make-pch"]:
        print(make_pch())
    elif sys.argv[1:] == ["crypto-symbols"]:   # images/cpp/Dockerfile
        print(list_crypto_symbols(), "libcrypto symbols")
    elif sys.argv[1:] == ["pch-used"]:   # tests/test_sandbox_pch.py
        print(pch_used() or "none")
    elif sys.argv[1:] == ["preludes-used"]:   # tests/test_sandbox_pch.py: "prelude gch" per line
        for prelude_path, prelude_text in preludes():
            print(prelude_path, prelude_used(prelude_text) or "none")
