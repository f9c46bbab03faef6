"""The interpreter of a session: runs its cells one after another in one namespace.

Stdlib only: copied into the images beside the fork server.

Runs as the job's user, confined like every Python job's process (session_server.py
sets it up with procs.child_setup). Cells arrive on the control socket (fd 3) as
{"code", "cap", "cell"}; each is parsed with `ast`, its last expression (if it ends in one)
split off and evaluated, and the answer goes back on the same socket:
{"status": "ok" | "error" | "memory", "value", "error", "traceback", "cell"}. The program's
stdout and stderr are plain pipes that the server reads: nothing printed there can
pose as an answer.
"""

from __future__ import annotations

import ast
import builtins
import linecache
import os
import socket
import sys
import traceback
import types

import procs
from pycandidate import python_like_start

CTL_FD = 3
WORK = "/work"


def main(ctl_fd: int = CTL_FD) -> None:
    """Serve cells until the server hangs up. Never returns."""
    python_like_start("")   # argv, stdio, signals as `python3` gives an interactive session
    sys.path[0] = WORK
    module = types.ModuleType("__main__")
    module.__builtins__ = builtins   # type: ignore[attr-defined]
    sys.modules["__main__"] = module
    namespace = module.__dict__
    ctl = socket.socket(fileno=ctl_fd)
    kernel_pid = os.getpid()
    count = 0
    while True:
        try:
            request, _ = procs.recv_msg(ctl)
        except (EOFError, OSError, ValueError):
            os._exit(0)
        count += 1
        cap = int(request.get("cap", 1 << 20))
        reply = run_cell(str(request.get("code", "")), namespace, f"<cell {count}>", cap)
        if os.getpid() != kernel_pid:
            child_fell_through(reply)
        reply["cell"] = request.get("cell")   # which request this answers (session_server.Cell)
        flush()
        procs.send_msg(ctl, reply)
        del request, reply


def run_cell(code: str, namespace: dict, name: str, cap: int) -> dict:
    """Run one cell; its answer (the last expression's repr, or the error that ended it)."""
    try:
        tree = ast.parse(code, name, "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        body = compile(tree, name, "exec")
        tail = compile(last, name, "eval") if last is not None else None
    except BaseException as exc:   # SyntaxError, and what a pathological source raises (RecursionError…)
        return failure(exc, cap, frames=False)
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)   # tracebacks quote the cell
    try:
        exec(body, namespace)
        if tail is None:
            return {"status": "ok", "value": None}
        value = eval(tail, namespace)
        return {"status": "ok", "value": cut(repr(value), cap)}
    except BaseException as exc:   # SystemExit and KeyboardInterrupt too: the session goes on
        return failure(exc, cap)


def child_fell_through(reply: dict) -> None:
    """A process the cell forked came to the end of the cell (it did not exit): it is not the
    kernel, so it must not answer; it ends as a forked child of a script would."""
    if reply.get("traceback"):
        sys.stderr.write(reply["traceback"])
    flush()
    os._exit(1 if reply.get("status") != "ok" else 0)


def failure(exc: BaseException, cap: int, frames: bool = True) -> dict:
    """The answer for an exception: "Type: message" and the traceback without this module's frame."""
    try:
        message = str(exc)
    except BaseException:
        message = "<the exception's str() failed>"
    error = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    try:
        tb = exc.__traceback__.tb_next if (frames and exc.__traceback__ is not None) else None
        lines = traceback.format_exception(type(exc), exc, tb) if frames else \
            traceback.format_exception_only(type(exc), exc)
        text = "".join(lines)
    except BaseException:
        text = error + "\n"
    status = "memory" if isinstance(exc, MemoryError) else "error"
    return {"status": status, "value": None, "error": cut(error, cap), "traceback": cut(text, cap)}


def cut(text: str, cap: int) -> str:
    return text if len(text) <= cap else text[:cap] + f"... [{len(text) - cap} more characters]"


def flush() -> None:
    for stream in {id(s): s for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)}.values():
        try:
            stream.flush()
        except BaseException:
            pass


__all__ = ["main", "run_cell", "CTL_FD"]
