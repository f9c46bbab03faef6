"""The server as the judge of literal tests (sandbox/literal_tests.py): it calls the program and compares.

Stdlib only: copied into the images beside the fork server.

The program's runner serves calls as it would a judge's (pycandidate, pyrpc); the server
plays the judge from its poll loop, one call at a time: send the call, read the answer,
compare it with the expected value as data, and go on or stop at the first failing
assert, as the tests themselves would. The expected values never leave the server's
memory. What the step reports is what a judge process would have: exit status 0 and the
marker when every assert held; else exit status 1 and a traceback naming the assert.
"""

from __future__ import annotations

import json
import os
import struct

import pyrpc
import pywire

TESTS_PATH = "<tests>"


class Opaque:
    """An object of the program (not data): equal only to itself, true, as a judge's proxy is."""

    def __init__(self, type_name: str) -> None:
        self.type_name = type_name

    def __repr__(self) -> str:
        return f"<{self.type_name} object of the program>"


class _Holder:
    """What pyrpc's codec asks of its peer when decoding: handles become Opaque objects."""

    def remote(self, rid: int, type_name: str) -> object:
        return Opaque(type_name)

    def exported_object(self, rid: int) -> object:
        raise pyrpc.ProtocolError("the server handed out no object")


class Caller:
    """Drives a literal plan through the program's socket (non-blocking: the poll loop calls on_readable)."""

    def __init__(self, sock_fd: int, plan: list[dict]) -> None:
        self.fd, self.plan = sock_fd, plan
        self.codec = pyrpc.Codec(_Holder())   # type: ignore[arg-type]
        self.buffer = bytearray()
        self.names: dict[str, object] = {}
        self.started = False      # the program's "ready" (its names) has arrived
        self.index = 0
        self.done = False
        self.passed = False
        self.report = ""          # the traceback text of the failure, as a judge would print it
        self.unsupported = False  # the program bound a tested name to something only a judge can call
        self.gone = False         # the program ended (or broke the protocol) before the tests did

    # ---------------------------------------------------------------- the poll loop's side
    def on_readable(self) -> None:
        try:
            chunk = os.read(self.fd, 1 << 20)
        except OSError:
            chunk = b""
        if not chunk:
            self.fail("[proctor] the program's process ended while the tests were calling it", gone=True)
            return
        self.buffer += chunk
        while not self.done and len(self.buffer) >= 4:
            (length,) = struct.unpack(">I", self.buffer[:4])
            if length > pyrpc.MAX_MESSAGE:
                self.fail(f"[proctor] the program sent a message of {length} bytes", gone=True)
                return
            if len(self.buffer) < 4 + length:
                return
            body, self.buffer = bytes(self.buffer[4:4 + length]), self.buffer[4 + length:]
            try:
                message = json.loads(body)
            except (ValueError, RecursionError):
                self.fail("[proctor] the program sent a malformed message", gone=True)
                return
            self.handle(message if type(message) is dict else {})

    def handle(self, message: dict) -> None:
        if not self.started and message.get("op") == "ready":
            self.ready(message)
        elif "op" in message:
            self.fail("[proctor] the program made a request of the tests, which give it nothing to call", gone=True)
        else:
            self.answer(message)

    # ---------------------------------------------------------------- the plan
    def ready(self, message: dict) -> None:
        if "failed" in message:
            self.fail(f"[proctor] {message['failed']}", gone=True)
            return
        names = message.get("names")
        self.names = names if type(names) is dict else {}
        self.started = True
        self.call_next()

    def call_next(self) -> None:
        if self.index >= len(self.plan):
            self.passed, self.done = True, True
            self.send({"op": "bye"})
            return
        check = self.plan[self.index]
        if check["kind"] == "const":   # assert True: no call
            if self.codec.decode(check["expected"]):
                self.index += 1
                self.call_next()
            else:
                self.fail_check(check, assertion_line(check))
            return
        entry = self.names.get(check["name"])
        if entry is None:
            self.fail_check(check, f"NameError: name {check['name']!r} is not defined")
            return
        if not (type(entry) is list and len(entry) == 2 and entry[0] == "v" and type(entry[1]) is list
                and entry[1][:1] == ["H"]):
            self.unsupported, self.done = True, True   # data or a stdlib object: a judge's job
            return
        self.send({"op": "call", "obj": entry[1][1], "args": check["args"], "kwargs": dict(check["kwargs"])})

    def answer(self, reply: dict) -> None:
        check = self.plan[self.index]
        if "err" in reply and type(reply["err"]) is dict:
            self.fail_check(check, _error_line(reply["err"]), note=str(reply["err"].get("tb") or ""))
            return
        try:
            value = self.codec.decode(reply.get("ok"))
            expected = self.codec.decode(check["expected"])
            tolerance = self.codec.decode(check.get("tolerance"))
        except (pyrpc.ProtocolError, ValueError, TypeError, RecursionError, MemoryError) as exc:
            self.fail(f"[proctor] the program sent a malformed value: {exc}", gone=True)
            return
        if isinstance(value, Opaque) and check.get("transform"):
            self.unsupported, self.done = True, True   # tuple() of a generator: the judge iterates it
            return
        outcome = evaluate(check, value, expected, tolerance)
        if outcome is None:
            self.index += 1
            self.call_next()
        else:
            self.fail_check(check, outcome)

    # ---------------------------------------------------------------- ending
    def fail_check(self, check: dict, last_line: str, note: str = "") -> None:
        self.report = (f"Traceback (most recent call last):\n  File \"{TESTS_PATH}\", line {check['line']}, "
                       f"in <module>\n    {check['source']}\n{last_line}\n" + (note + "\n" if note else ""))
        self.done = True
        self.send({"op": "bye"})

    def fail(self, text: str, gone: bool = False) -> None:
        self.report, self.done, self.gone = text + "\n", True, gone
        if not gone:
            self.send({"op": "bye"})

    def send(self, message: dict) -> None:
        data = memoryview(pywire.frame(message))
        try:
            while data:
                data = data[os.write(self.fd, data):]
        except OSError:
            pass   # the program is gone: the next read says so


TRANSFORMS = {"tuple": tuple, "list": list, "set": set, "frozenset": frozenset, "sorted": sorted, "len": len}


def evaluate(check: dict, value: object, expected: object, tolerance: object) -> str | None:
    """The assert's test on data, as the tests would run it: None when it holds, else the
    traceback's last line (AssertionError, or the exception the test itself raised)."""
    try:
        transform = check.get("transform")
        if transform:
            value = TRANSFORMS[transform](value)
        kind = check["kind"]
        if kind == "close":
            diff = abs(value - expected)   # type: ignore[operator]
            ok = diff <= tolerance if check.get("inclusive") else diff < tolerance   # type: ignore[operator]
        elif kind == "eq":
            ok = value == expected
        elif kind == "ne":
            ok = value != expected
        elif kind == "is":
            ok = value is expected
        elif kind == "is_not":
            ok = value is not expected
        elif kind == "true":
            ok = value
        else:
            ok = not value
        return None if ok else assertion_line(check)
    except (TypeError, ValueError, ArithmeticError, RecursionError, MemoryError, KeyError) as exc:
        return f"{type(exc).__name__}: {exc}"


def assertion_line(check: dict) -> str:
    message = check.get("message")
    return "AssertionError" + (f": {message}" if message is not None else "")


def _error_line(err: dict) -> str:
    """The last line of the traceback a judge would print for the program's exception."""
    cls = pyrpc.exception_class(err, {})
    name = cls.__name__ if cls is not pyrpc.RemoteError else str(err.get("type") or "RemoteError")
    message = str(err.get("msg") or "")
    return f"{name}: {message}" if message else name
