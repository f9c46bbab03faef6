"""The program's process of a Python job: runs the program, then (with tests) serves the judge's calls.

Stdlib only: copied into the images beside the fork server.

Forked from the mother (mother.py), so its memory holds nothing of any job but its
own source. It never holds the tests, the expected outputs or the judge's nonce:
there is nothing in it for the program to find.

Two modes:
  "main"   the program is the whole job (stdin/stdout cases, or a program without
           tests): it runs as ``python3 main.py`` would; when its module body returns
           (or it raises SystemExit with status 0: its own end), the runner writes the
           nonce on fd 3. There are no tests here to skip: exiting is all it can do.
  "serve"  the job has tests: after the module body returns, the runner tells the judge
           which names it defined (pyrpc: data by value, the rest as handles) and
           answers the judge's calls until the judge hangs up.
"""

from __future__ import annotations

import atexit
import builtins
import io
import os
import resource
import signal
import sys
import traceback
import types

import procs
import pyrpc
from hygiene import set_dumpable, set_limit

MARKER_FD = 3
RPC_FD = 4
EXIT_AFTER_SYNTAX_ERROR = 3
SYNTAX_MARK = b"syntax:"   # + the nonce, on fd 3: the program did not parse (it never ran)
MAIN_PATH = "/work/main.py"
# Modules whose functions and classes the judge imports itself when the program
# imported them (``from math import sqrt``): tests that use such a name then get the
# real one, computed in the judge, never the program's. Nothing from unittest.mock
# and the like: an object there can compare equal to anything.
IMPORTABLE = ("typing", "collections", "collections.abc", "math", "cmath", "itertools", "functools", "operator",
              "heapq", "bisect", "string", "re", "fractions", "decimal", "statistics", "datetime", "copy", "json",
              "hashlib", "random", "numbers", "array", "textwrap", "struct", "enum", "dataclasses")


def run(request: dict, fds: dict[str, int]) -> None:
    """In a runner forked from the mother: set up, then run the program. Never returns."""
    try:
        keep = {MARKER_FD: fds["mark"]}
        if "rpc" in fds:
            keep[RPC_FD] = fds["rpc"]
        procs.child_setup(request["limits"], fds.get("stdin"), fds["out"], fds["err"], keep, request["cpu_s"],
                          report_fd=fds["report"], defaults_done=True)
        limit_address_space(request["limits"]["memory_mb"])
        source, nonce = request.pop("source"), request.pop("nonce").encode()
    except BaseException:
        procs.setup_failed()
    procs.setup_done()
    try:
        run_program(source, nonce, serve="rpc" in fds)
    except BaseException:
        procs.child_failed()
    os._exit(127)


class Start:
    """What every runner starts with, made once in the mother (mother.prepare): a runner is
    short-lived, and in a forked process each first touch of a page costs a copy."""

    vm_bytes = 0                  # the address space the forked interpreter already maps
    stdio: tuple = ()             # stdin, stdout, stderr text streams on fds 0, 1, 2

    @classmethod
    def prepare(cls) -> None:
        with open("/proc/self/statm") as f:
            cls.vm_bytes = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        cls.stdio = (
            io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding="utf-8", errors="replace"),
            io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8", errors="backslashreplace"),
            io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8", errors="backslashreplace",
                             line_buffering=True),
        )
        os.environ.clear()
        os.environ.update(procs.CHILD_ENV)


def limit_address_space(memory_mb: int) -> None:
    """Address space = what the forked interpreter already maps + the job's budget."""
    if not Start.vm_bytes:
        Start.prepare()
    set_limit(resource.RLIMIT_AS, Start.vm_bytes + (memory_mb << 20))


def python_like_start(argv0: str) -> None:
    """The process state `python3 main.py` would give a program: signals, stdio, argv, env."""
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)   # as CPython sets them at start-up
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    set_dumpable(0)
    if os.environ != procs.CHILD_ENV:
        os.environ.clear()
        os.environ.update(procs.CHILD_ENV)
    sys.argv = [argv0]
    if not Start.stdio:
        Start.prepare()
    sys.stdin, sys.stdout, sys.stderr = Start.stdio
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = Start.stdio
    atexit._clear()


def run_program(source: str, nonce: bytes, serve: bool) -> None:
    python_like_start(MAIN_PATH)
    sys.path[0] = "/work"
    module = types.ModuleType("__main__")
    module.__file__ = MAIN_PATH
    module.__builtins__ = builtins
    sys.modules["__main__"] = module
    try:
        code = compile(source, MAIN_PATH, "exec")
    except (SyntaxError, ValueError, MemoryError, RecursionError):
        traceback.print_exc(limit=0)
        if nonce:   # "main" mode: say so with the nonce, so a program's own exit(3) is not a syntax error
            os.write(MARKER_FD, SYNTAX_MARK + nonce)
        finish(EXIT_AFTER_SYNTAX_ERROR)
    del source
    peer = pyrpc.Peer(pyrpc.Channel(RPC_FD), judge=False) if serve else None
    try:
        exec(code, module.__dict__)
    except SystemExit as exc:
        status = pyrpc.exit_code(exc)
        if exc.code is not None and not isinstance(exc.code, int):
            print(exc.code, file=sys.stderr)
        if peer is not None:
            tell_judge(peer, f"the program exited (status {status}) before the tests could call it")
        elif status == 0:
            os.write(MARKER_FD, nonce)   # a program without tests may end with sys.exit(0)
            run_atexit()
        finish(status)
    except BaseException as exc:
        report_uncaught(exc)
        if peer is not None:
            tell_judge(peer, f"the program raised {type(exc).__name__} before the tests could call it")
        finish(1)
    if peer is None:
        wait_for_threads()
        os.write(MARKER_FD, nonce)   # the module body returned: the program ran to its end
        run_atexit()
        finish(0)
    del nonce
    peer.channel.send({"op": "ready", "names": manifest(module.__dict__, peer)})
    peer.serve_forever()
    finish(0)


def report_uncaught(exc: BaseException) -> None:
    """As the interpreter prints an uncaught exception, without this runner's frame."""
    try:
        tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        sys.excepthook(type(exc), exc.with_traceback(tb), tb)
    except BaseException:
        pass


def tell_judge(peer: pyrpc.Peer, why: str) -> None:
    try:
        peer.channel.send({"op": "ready", "failed": why})
    except pyrpc.PeerGone:
        pass


def manifest(namespace: dict, peer: pyrpc.Peer) -> dict:
    """Each global the program defined, as the judge should see it.

    ``["v", value]``: data (or a handle); ``["m", module]`` a module the judge
    imports itself (a stdlib one only); ``["i", module, name, value]`` a function,
    class or typing form of an IMPORTABLE module (``from math import sqrt``), which
    the judge imports itself (else it uses ``value``); ``["e", handle, builtin base,
    name]`` an exception class of the program's.
    """
    out = {}
    for name, value in list(namespace.items()):
        if name.startswith("__") and name.endswith("__"):
            continue
        try:
            out[name] = describe(value, peer, name)
        except Exception:   # noqa: BLE001 - a value that cannot be sent: the judge gets nothing for it
            continue
    return out


def describe(value: object, peer: pyrpc.Peer, name: str) -> list:
    if isinstance(value, types.ModuleType):
        return ["m", value.__name__]
    if isinstance(value, type) and issubclass(value, BaseException) and \
            getattr(builtins, value.__name__, None) is not value:
        return ["e", peer.export(value), pyrpc.builtin_base(value), value.__name__]
    source = stdlib_source(value, name)
    if source is not None:
        return ["i", *source, peer.codec.encode(value)]
    return ["v", peer.codec.encode(value)]


def stdlib_source(value: object, name: str) -> tuple[str, str] | None:
    """(module, attribute) of an IMPORTABLE module that holds exactly this object, if any."""
    if not callable(value) and type(value).__module__ != "typing":
        return None
    for attr in {name, getattr(value, "__name__", None)} - {None}:
        for module in IMPORTABLE:
            mod = sys.modules.get(module)
            if mod is not None and getattr(mod, attr, None) is value:   # type: ignore[arg-type]
                return module, attr   # type: ignore[return-value]
    return None


def wait_for_threads() -> None:
    """As the interpreter does at exit: wait for the program's non-daemon threads."""
    threading = sys.modules.get("threading")   # imported only if the program started threads
    if threading is not None:
        try:
            threading._shutdown()
        except BaseException:
            pass


def run_atexit() -> None:
    try:
        atexit._run_exitfuncs()
    except BaseException:
        pass


def finish(code: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(code)


__all__ = ["run", "EXIT_AFTER_SYNTAX_ERROR", "SYNTAX_MARK", "IMPORTABLE", "MAIN_PATH"]
