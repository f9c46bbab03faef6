"""The judge of a Python job: runs the tests in a process of its own, calling the program through pyrpc.

Stdlib only: copied into the images beside the fork server.

The judge runs as JUDGE_UID (not the program's uid), non-dumpable: the program can
neither read its memory (where the tests and the nonce are) nor signal it. The tests
reach it on its request, never as a file. Every name the program defined is bound in
the tests' globals as the program's value (data), as a proxy (functions, classes,
objects: calls go to the program's process), as a judge-side copy of a stdlib object
the program imported, or as a local class standing in for an exception class of the
program's. A name of a builtin is never rebound: the tests' ``abs`` or ``sorted`` is
Python's, whatever the program defined.

Only when the tests' module body returned (or raised SystemExit with status 0, as
``unittest.main()`` does on success) does the judge write the nonce on fd 3: that,
and nothing the program can write, is the pass.
"""

from __future__ import annotations

import builtins
import importlib
import linecache
import os
import sys
import types

import procs
import pyrpc
from hygiene import set_dumpable
from pycandidate import IMPORTABLE, limit_address_space, python_like_start

MARKER_FD = 3
RPC_FD = 4
TESTS_PATH = "<tests>"
EXIT_PROGRAM_GONE = 1
_BUILTIN_NAMES = frozenset(dir(builtins))
_HARNESS = (os.path.abspath(__file__),)
# Stdlib modules whose import does something visible (opens a browser, prints).
_NOT_IMPORTED = frozenset({"antigravity", "this", "__hello__", "__phello__", "idlelib", "turtledemo", "turtle"})


def run(request: dict, fds: dict[str, int]) -> None:
    """In a runner forked from the mother: become the judge and run the tests. Never returns."""
    try:
        procs.child_setup(request["limits"], None, fds["out"], fds["err"],
                          {MARKER_FD: fds["mark"], RPC_FD: fds["rpc"]}, request["cpu_s"], report_fd=fds["report"],
                          judge=True, defaults_done=True)
        set_dumpable(0)
        limit_address_space(request["limits"]["memory_mb"])
        tests, nonce = request.pop("tests"), request.pop("nonce").encode()
    except BaseException:
        procs.setup_failed()
    procs.setup_done()
    try:
        judge(tests, nonce)
    except BaseException:
        procs.child_failed()
    os._exit(127)


def judge(tests: str, nonce: bytes) -> None:
    python_like_start(TESTS_PATH)
    os.environ.update(procs.JUDGE_ENV)
    # Nothing the program wrote may be imported here: the stdlib and the server only.
    sys.path[:] = [p for p in sys.path if p and not p.startswith(("/work", "/job", "/tmp"))]
    peer = pyrpc.Peer(pyrpc.Channel(RPC_FD), judge=True)
    try:
        namespace = program_names(peer)
    except pyrpc.PeerGone as exc:
        finish(EXIT_PROGRAM_GONE, f"[proctor] the program never reached the tests: {exc}\n")
    if isinstance(namespace, str):
        finish(EXIT_PROGRAM_GONE, f"[proctor] {namespace}\n")
    code = compile(tests, TESTS_PATH, "exec")
    lines = tests.splitlines(keepends=True)
    linecache.cache[TESTS_PATH] = (len(tests), None, lines, TESTS_PATH)   # tracebacks quote the tests
    del tests
    # The tests are __main__ (unittest.main() looks for its TestCases there).
    module = types.ModuleType("__main__")
    module.__dict__.update(namespace)
    sys.modules["__main__"] = module
    try:
        exec(code, module.__dict__)
    except SystemExit as exc:
        if pyrpc.exit_code(exc) != 0:
            finish(pyrpc.exit_code(exc), "")
    except pyrpc.PeerGone as exc:
        finish(EXIT_PROGRAM_GONE, f"[proctor] the program's process ended while the tests were calling it: {exc}\n")
    except BaseException as exc:
        finish(1, pyrpc.clean_traceback(exc, _HARNESS))
    # Reached only when the tests' module body returned: they ran to their end.
    os.write(MARKER_FD, nonce)
    try:
        peer.channel.send({"op": "bye"})
    except pyrpc.PeerGone:
        pass
    finish(0, "")


def program_names(peer: pyrpc.Peer) -> dict | str:
    """The tests' globals: the program's names as the judge sees them, or why there are none."""
    ready = peer.channel.recv()
    if ready.get("op") != "ready":
        raise pyrpc.PeerGone("the program's first message was not 'ready'")
    if "failed" in ready:
        return str(ready["failed"])
    names = ready.get("names")
    if type(names) is not dict:
        raise pyrpc.PeerGone("the program sent no names")
    namespace: dict = {"__name__": "__main__", "__builtins__": builtins, "__file__": TESTS_PATH}
    for name, entry in names.items():
        if type(name) is not str or name in _BUILTIN_NAMES or name.startswith("__"):
            continue
        try:
            value = bind(entry, peer)
        except (pyrpc.ProtocolError, ValueError, TypeError, LookupError, ImportError, RecursionError):
            continue   # a name the judge cannot bind: the tests see it undefined
        if value is not _UNBOUND:
            namespace[name] = value
    return namespace


_UNBOUND = object()


def bind(entry: object, peer: pyrpc.Peer) -> object:
    if type(entry) is not list or not entry:
        raise pyrpc.ProtocolError("malformed name")
    kind = entry[0]
    if kind == "v":
        return peer.codec.decode(entry[1])
    if kind == "m":
        return stdlib_module(entry[1])
    if kind == "i":
        found = stdlib_object(entry[1], entry[2])
        return found if found is not _UNBOUND else peer.codec.decode(entry[3])
    if kind == "e":
        rid, base, name = entry[1], entry[2], entry[3]
        parent = getattr(builtins, base, None) if type(base) is str else None
        if not (isinstance(parent, type) and issubclass(parent, Exception)):
            parent = Exception
        local = type(str(name), (parent,), {"__module__": "__main__"})
        peer.exception_classes[int(rid)] = local
        return local
    raise pyrpc.ProtocolError(f"unknown kind of name {kind!r}")


def stdlib_module(name: object) -> object:
    if type(name) is not str or name.split(".")[0] not in sys.stdlib_module_names or name in _NOT_IMPORTED:
        return _UNBOUND
    return importlib.import_module(name)


def stdlib_object(module: object, attr: object) -> object:
    """``module.attr`` when the module is IMPORTABLE and the attribute a function, class or typing form."""
    if type(module) is not str or module not in IMPORTABLE or type(attr) is not str or attr.startswith("_"):
        return _UNBOUND
    value = getattr(importlib.import_module(module), attr, _UNBOUND)
    if value is _UNBOUND:
        return _UNBOUND
    plain = isinstance(value, (type, types.FunctionType, types.BuiltinFunctionType)) or module == "typing"
    return value if plain else _UNBOUND


def finish(code: int, message: str) -> None:
    try:
        if message:
            sys.stderr.write(message if message.endswith("\n") else message + "\n")
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)
