"""Hostile Java, Go, Rust and JavaScript programs against the real sandbox (no mocks).

Two kinds: forged passes (a wrong solution that exits 0 before the tests can fail,
or that disarms the tests' checks) must never pass; and resource attacks (memory,
output, CPU, processes, network, files) must get their own verdict. Both run as
one batch per language, then a benign job of that language must still pass.
Language-independent hygiene (leftover processes and files, signals to PID 1) is
in test_sandbox_adversarial.py; it does not depend on the program's language.
"""

from __future__ import annotations

import pytest

from humaneval_x import LANGUAGES, first
from proctor.sandbox import Job, Limits, Result, Sandbox

pytestmark = pytest.mark.docker

LIM = Limits(wall_s=5, cpu_s=2, memory_mb=256)

# Problem 0 (has_close_elements) of each language: its wrong solution returns false.
JAVA_END, GO_END, RUST_END = "    }\n}\n", "}\n", "}\n"

# name -> (body of has_close_elements, code after it, expected status). Each one is
# the wrong solution plus a way to exit 0 early or to silence the tests.
FORGED: dict[str, dict[str, tuple[str, str, str]]] = {
    "java": {
        "System.exit(0)": ("        System.exit(0);\n        return false;\n" + JAVA_END, "", "failed"),
        "Runtime.halt(0)": ("        Runtime.getRuntime().halt(0);\n        return false;\n" + JAVA_END, "", "failed"),
        "exit in a static initializer": ("        return false;\n    }\n    static { System.exit(0); }\n}\n", "",
                                         "failed"),
        "exit from another thread": ("        new Thread(() -> System.exit(0)).start();\n"
                                     "        try { Thread.sleep(3000); } catch (InterruptedException e) { }\n"
                                     "        return false;\n" + JAVA_END, "", "failed"),
        "exit in a shutdown hook": ("        Runtime.getRuntime().addShutdownHook(\n"
                                    "            new Thread(() -> System.out.println(\"bye\")));\n"
                                    "        System.exit(0);\n        return false;\n" + JAVA_END, "", "failed"),
        "reflection into the launcher": (
            "        try {\n"
            "            java.lang.reflect.Method m = Class.forName(\"proctor.launcher.Launcher\")\n"
            "                .getDeclaredMethod(\"main\", String[].class);\n"
            "            m.setAccessible(true);\n"
            "            m.invoke(null, (Object) new String[] {\"Main\"});\n"
            "        } catch (Throwable t) { System.out.println(t); }\n"
            "        System.exit(0);\n        return false;\n" + JAVA_END, "", "compile_error"),   # reflection refused
        "nonce from fd 4 to fd 3": (
            "        try {\n"
            "            byte[] b = new java.io.FileInputStream(\"/proc/self/fd/4\").readAllBytes();\n"
            "            java.io.FileOutputStream o = new java.io.FileOutputStream(\"/proc/self/fd/3\");\n"
            "            o.write(b);\n            o.flush();\n"
            "        } catch (Exception e) { System.out.println(e); }\n"
            "        System.exit(0);\n        return false;\n" + JAVA_END, "", "failed"),
        "own Arrays hiding java.util.Arrays": (
            "        return false;\n" + JAVA_END,
            "class Arrays {\n"
            "    static <T> java.util.List<T> asList(T... t) { return new java.util.ArrayList<>(); }\n}\n",
            "compile_error"),
    },
    "go": {
        "os.Exit(0)": ("    os.Exit(0)\n    return false\n" + GO_END, "", "failed"),
        "os.Exit(0) in init": ("    return false\n" + GO_END, "func init() { os.Exit(0) }\n", "failed"),
        "syscall.Exit(0)": ("    syscall.Exit(0)\n    return false\n" + GO_END, "", "failed"),
        "nonce from fd 4 to fd 3": (
            "    return false\n" + GO_END,
            "func init() {\n\tb := make([]byte, 128)\n\tn, _ := syscall.Read(4, b)\n"
            "\tif n > 0 {\n\t\tsyscall.Write(3, b[:n])\n\t}\n\tos.Exit(0)\n}\n", "failed"),
        "calls the guard": ("    return false\n" + GO_END,
                            "func init() { proctorguard.Finish(); os.Exit(0) }\n", "compile_error"),
        "go:linkname to the guard": ("    return false\n" + GO_END,
                                     "//go:linkname finish proctorguard.Finish\nfunc finish()\n\n"
                                     "func init() { finish(); os.Exit(0) }\n", "compile_error"),
        # The image's runner (proctortestmain.Run) calls the guard when the tests it is given
        # pass: run from the program's init with a test that checks nothing, it would forge one.
        "calls the tests' runner": ("    return false\n" + GO_END,
                                    "func init() {\n\tproctortestmain.Run([]proctortestmain.Test{"
                                    '{"TestFake", func(t *testing.T) {}}})\n}\n', "compile_error"),
        "go:linkname to the runner": ("    return false\n" + GO_END,
                                      "//go:linkname run proctortestmain.Run\nfunc run([]struct{})\n\n"
                                      "func init() { run(nil) }\n", "compile_error"),
    },
    "rust": {
        "std::process::exit(0)": ("    std::process::exit(0);\n" + RUST_END, "", "failed"),
        "exit(0) from a thread": ("    std::thread::spawn(|| std::process::exit(0)).join().unwrap();\n    false\n"
                                  + RUST_END, "", "failed"),
        # unsafe code does not compile (rustc -F unsafe_code): no libc call, no code before main.
        "libc exit(0)": ("    unsafe { exit(0) }\n" + RUST_END, 'extern "C" { fn exit(code: i32) -> !; }\n',
                         "compile_error"),
        "libc _exit(0)": ("    unsafe { _exit(0) }\n" + RUST_END, 'extern "C" { fn _exit(code: i32) -> !; }\n',
                          "compile_error"),
        "__real_exit past the wrapper": ("    unsafe { __real_exit(0) }\n" + RUST_END,
                                         'extern "C" { fn __real_exit(code: i32) -> !; }\n', "compile_error"),
        "__real_exit by link_name": ("    unsafe { e(0) }\n" + RUST_END,
                                     'extern "C" {\n    #[link_name = "__real_exit"]\n    fn e(code: i32) -> !;\n}\n',
                                     "compile_error"),
        "dlsym for exit": ("    unsafe { let f: extern \"C\" fn(i32) = std::mem::transmute(dlsym(std::ptr::null_mut(),"
                           " b\"exit\\0\".as_ptr())); f(0); }\n    false\n" + RUST_END,
                           'extern "C" { fn dlsym(h: *mut u8, s: *const u8) -> *const u8; }\n', "compile_error"),
        "exported assert_eq! that checks nothing": (
            "    return false;\n" + RUST_END,
            "#[macro_export]\nmacro_rules! assert_eq { ($($t:tt)*) => {}; }\n", "compile_error"),
        "local assert_eq! after the tests": (
            "    return false;\n" + RUST_END, "macro_rules! assert_eq { ($($t:tt)*) => {}; }\n", "compile_error"),
        "attribute swallowing the tests": ("    return false;\n" + RUST_END, "#[cfg(any())]\n", "compile_error"),
    },
    "javascript": {
        "process.exit(0)": ("  return false;\n}\n", "process.exit(0);\n", "failed"),
        "process.exit(0) inside the function": ("  process.exit(0);\n}\n", "", "failed"),
        "process.reallyExit(0)": ("  return false;\n}\n", "process.reallyExit(0);\n", "failed"),
        "exit(0) before an awaited assertion": ("  return false;\n}\n",
                                                "Promise.resolve().then(() => process.exit(0));\n", "failed"),
        "console.assert replaced": ("  return false;\n}\n", "console.assert = () => {};\n", "failed"),
        "console.assert redefined": ("  return false;\n}\n",
                                     "Object.defineProperty(console, 'assert', { value: () => {} });\n",
                                     "runtime_error"),
        "own const console": ("  return false;\n}\n", "const console = { assert() {} };\n", "runtime_error"),
        "globalThis.console replaced": ("  return false;\n}\n", "globalThis.console = { assert() {} };\n", "failed"),
        "JSON.stringify replaced": ("  return false;\n}\n",
                                    "JSON.stringify = () => 'same';\nconsole.assert(JSON.stringify(1) !== 'same');\n",
                                    "failed"),  # the program's own realm: its own check throws
        "nonce from fd 4 to fd 3": ("  return false;\n}\n",
                                    "const fs = require('fs');\nconst b = Buffer.alloc(128);\nlet n = 0;\n"
                                    "try { n = fs.readSync(4, b); } catch (e) { }\n"
                                    "fs.writeSync(fs.openSync('/proc/self/fd/3', 'w'), b.subarray(0, n));\n"
                                    "process.exit(0);\n", "failed"),
        "inspector": ("  return false;\n}\n", "require('inspector').open(9229);\n", "runtime_error"),
        "process.binding": ("  return false;\n}\n", "process.binding('fs');\n", "runtime_error"),
        "SIGUSR1 to start the inspector": ("  return false;\n}\n",
                                           "process.kill(process.pid, 'SIGUSR1');\n"
                                           "require('child_process').execSync('sleep 0.2');\n", "failed"),
    },
}
# Go: the imports the hacks above use, added to the prompt's import block; those of
# GO_OPTIONAL_IMPORTS only where a hack names them (Go refuses an unused import).
GO_IMPORTS = '    "os"\n    "syscall"\n'
GO_OPTIONAL_IMPORTS = ("proctorguard", "proctortestmain", "testing")
GO_USES = "var _ = math.Abs\nvar _ = os.Exit\nvar _ = syscall.Exit\n"


def explain(r: Result) -> str:
    return (f"status={r.status} exit={r.exit_code} attempts={r.attempts}\nstdout={r.stdout[-600:]!r}\n"
            f"stderr={r.stderr[-1200:]!r}\nerror={r.error[-1500:]}")


def forged_job(language: str, body: str, after: str) -> Job:
    p = first(language)
    if language == "go":
        used = "".join(f'    "{name}"\n' for name in GO_OPTIONAL_IMPORTS
                       if f"{name}." in after and f'"{name}"' not in p.prefix)
        prefix = p.prefix.replace("import (\n", "import (\n" + GO_IMPORTS + used, 1)
        return Job(language="go", code=prefix + body + GO_USES + after, tests=p.tests, limits=LIM)
    return p.job(body, after=after, limits=LIM)


@pytest.fixture(scope="module")
def sb(docker_ready):
    with Sandbox() as sandbox:
        yield sandbox


def assert_benign_passes(sb: Sandbox, language: str) -> None:
    r = sb.run(first(language).job(limits=LIM))
    assert r.status == "passed", f"benign {language} job after the hostile batch: " + explain(r)
    assert r.attempts == 1, "benign job needed a retry: " + explain(r)


@pytest.mark.parametrize("language", LANGUAGES)
def test_forged_passes_never_pass(sb, language):
    cases = FORGED[language]
    results = sb.run_many([forged_job(language, body, after) for body, after, _ in cases.values()])
    wrong = []
    for (name, (_, _, expected)), r in zip(cases.items(), results):
        if r.status != expected:
            wrong.append(f"{name}: expected {expected}, got " + explain(r))
    assert not wrong, "\n\n".join(wrong)
    assert_benign_passes(sb, language)


# Hostile bodies of has_close_elements, by language: (memory, flood, loop, fork bomb, network, write outside).
ATTACKS = {
    "java": {
        "memory": "        java.util.List<long[]> l = new java.util.ArrayList<>();\n"
                  "        while (true) l.add(new long[1 << 20]);\n" + JAVA_END,
        "output flood": "        String s = \"x\".repeat(1 << 20);\n"
                        "        for (int i = 0; i < 100; i++) System.out.print(s);\n"
                        "        return false;\n" + JAVA_END,
        "cpu loop": "        while (true) { }\n" + JAVA_END,
        "fork bomb": "        for (int i = 0; i < 300; i++) {\n"
                     "            try { new ProcessBuilder(\"sleep\", \"30\").start(); } catch (Exception e) { }\n"
                     "        }\n        while (true) { }\n" + JAVA_END,
        "thread bomb": "        for (int i = 0; i < 5000; i++) {\n"
                       "            try { new Thread(() -> { while (true) { } }).start(); } catch (Throwable e) { }\n"
                       "        }\n        while (true) { }\n" + JAVA_END,
        "network": "        try { new java.net.Socket(\"1.1.1.1\", 80); }\n"
                   "        catch (java.io.IOException e) { throw new RuntimeException(e); }\n        return false;\n"
                   + JAVA_END,
        "write outside /work": "        try {\n"
                               "            java.nio.file.Files.writeString(\n"
                               "                java.nio.file.Path.of(\"/opt/proctor/x\"), \"1\");\n"
                               "        }\n"
                               "        catch (java.io.IOException e) { throw new RuntimeException(e); }\n"
                               "        return false;\n" + JAVA_END,
    },
    "go": {
        "memory": "    var l [][]byte\n    for {\n        b := make([]byte, 50<<20)\n"
                  "        for i := range b {\n            b[i] = 1\n        }\n"
                  "        l = append(l, b)\n    }\n" + GO_END,
        "output flood": "    s := string(make([]byte, 1<<20))\n    for i := 0; i < 100; i++ {\n"
                        "        os.Stdout.WriteString(s)\n    }\n    return false\n" + GO_END,
        "cpu loop": "    for {\n    }\n" + GO_END,
        "fork bomb": "    for i := 0; i < 300; i++ {\n"
                     "        syscall.ForkExec(\"/bin/sleep\", []string{\"sleep\", \"30\"}, nil)\n"
                     "    }\n    for {\n    }\n" + GO_END,
        "network": "    var sa syscall.SockaddrInet4\n    sa.Port = 80\n    sa.Addr = [4]byte{1, 1, 1, 1}\n"
                   "    fd, _ := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)\n"
                   "    if err := syscall.Connect(fd, &sa); err != nil {\n        panic(err)\n    }\n    return false\n"
                   + GO_END,
        "write outside /work": "    if err := os.WriteFile(\"/opt/proctor/x\", []byte(\"1\"), 0o644); err != nil {\n"
                               "        panic(err)\n    }\n    return false\n" + GO_END,
    },
    "rust": {
        "memory": "    let mut l = Vec::new();\n    loop {\n        l.push(vec![1u8; 50 << 20]);\n    }\n" + RUST_END,
        "output flood": "    let s = \"x\".repeat(1 << 20);\n    for _ in 0..100 {\n        print!(\"{}\", s);\n    }\n"
                        "    false\n" + RUST_END,
        "cpu loop": "    loop {}\n" + RUST_END,
        "fork bomb": "    for _ in 0..300 {\n"
                     "        let _ = std::process::Command::new(\"sleep\").arg(\"30\").spawn();\n"
                     "    }\n    loop {}\n" + RUST_END,
        "network": "    std::net::TcpStream::connect(\"1.1.1.1:80\").unwrap();\n    false\n" + RUST_END,
        "write outside /work": "    std::fs::write(\"/opt/proctor/x\", \"1\").unwrap();\n    false\n" + RUST_END,
    },
    "javascript": {
        "memory": "  const l = [];\n  for (;;) l.push(new Array(1e6).fill(1.5));\n}\n",
        "buffer memory": "  const l = [];\n  for (;;) l.push(Buffer.alloc(50 << 20, 1));\n}\n",
        "output flood": "  const s = 'x'.repeat(1 << 20);\n  for (let i = 0; i < 100; i++) process.stdout.write(s);\n"
                        "  return false;\n}\n",
        "cpu loop": "  for (;;) {}\n}\n",
        "fork bomb": "  const cp = require('child_process');\n"
                     "  for (let i = 0; i < 300; i++) { try { cp.spawn('sleep', ['30']); } catch (e) { } }\n"
                     "  for (;;) {}\n}\n",
        "network": "  require('child_process').execFileSync('python3', ['-c', "
                   "'import socket; socket.create_connection((\"1.1.1.1\", 80), timeout=2)']);\n  return false;\n}\n",
        "write outside /work": "  require('fs').writeFileSync('/opt/proctor/x', '1');\n  return false;\n}\n",
    },
}
EXPECTED = {"memory": ("memory",), "buffer memory": ("memory",), "output flood": ("output_limit",),
            "cpu loop": ("timeout",), "fork bomb": ("timeout", "memory"), "thread bomb": ("timeout", "memory"),
            "network": ("runtime_error",), "write outside /work": ("runtime_error",)}


@pytest.mark.parametrize("language", LANGUAGES)
def test_resource_attacks_get_their_verdict(sb, language):
    attacks = ATTACKS[language]
    results = sb.run_many([forged_job(language, body, "") for body in attacks.values()])
    wrong = [f"{name}: expected {' or '.join(EXPECTED[name])}, got " + explain(r)
             for name, r in zip(attacks, results) if r.status not in EXPECTED[name]]
    assert not wrong, "\n\n".join(wrong)
    flood = results[list(attacks).index("output flood")]
    assert flood.truncated and len(flood.stdout.encode()) <= LIM.output_bytes
    assert_benign_passes(sb, language)


# Tests that a child process of the program cannot read the program's memory (the
# nonce is in it): the runtimes start non-dumpable (execute-only java and node
# binaries; a prctl in the Go and Rust guards).
PEEK = "cat /proc/$PPID/environ > /dev/null 2>&1 && echo readable || echo refused"
NOT_DUMPABLE = {
    "java": Job(language="java", code="public class Peek {\n  public static String run() throws Exception {\n"
                "    Process p = new ProcessBuilder(\"sh\", \"-c\", \"" + PEEK + "\").start();\n"
                "    return new String(p.getInputStream().readAllBytes()).trim();\n  }\n}\n",
                tests="public class Main {\n  public static void main(String[] a) throws Exception {\n"
                      "    String got = Peek.run();\n"
                      "    if (!got.equals(\"refused\")) throw new AssertionError(got);\n  }\n}\n", limits=LIM),
    "go": Job(language="go", code='package main\n\nimport "os/exec"\n\nfunc Peek() string {\n'
              '\tout, _ := exec.Command("sh", "-c", "' + PEEK + '").Output()\n\treturn string(out)\n}\n',
              tests='package main\n\nimport "testing"\n\nfunc TestPeek(t *testing.T) {\n'
                    '\tif got := Peek(); got != "refused\\n" {\n\t\tt.Fatal(got)\n\t}\n}\n', limits=LIM),
    "rust": Job(language="rust", code="fn peek() -> String {\n    let out = std::process::Command::new(\"sh\")"
                ".arg(\"-c\").arg(\"" + PEEK.replace("$", "$") + "\").output().unwrap();\n"
                "    String::from_utf8(out.stdout).unwrap()\n}\n",
                tests="#[test]\nfn t() {\n    assert_eq!(peek(), \"refused\\n\");\n}\n", limits=LIM),
    "javascript": Job(language="javascript",
                      code="const peek = () => require('child_process').execSync('" + PEEK + "').toString();\n",
                      tests="console.assert(peek() === 'refused\\n', peek());\n", limits=LIM),
}


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_child_cannot_read_the_programs_memory(sb, language):
    r = sb.run(NOT_DUMPABLE[language])
    assert r.status == "passed", explain(r)
