"""The judge's channel to the program (sandbox/server/pyrpc.py) and the Job checks, without an engine.

What crosses from the program to the tests is data or a handle: never an object of
the program's class that the tests' ``==`` would ask, and never a value the judge
cannot decode safely (too deep, too large, malformed).
"""

from __future__ import annotations

import datetime
import decimal
import fractions
import math
import os
import socket
import threading

import sys
from pathlib import Path

import pytest

from proctor.sandbox import BadJob, Job

# The server's modules import each other by plain names (they are copied flat into the images).
sys.path.insert(0, str(Path(__import__("proctor.sandbox").sandbox.__file__).parent / "server"))
import pyrpc  # noqa: E402


def pair() -> tuple[pyrpc.Peer, pyrpc.Peer, threading.Thread]:
    """A judge peer here and a program peer serving in a thread, over a real socket pair."""
    a, b = socket.socketpair()
    judge = pyrpc.Peer(pyrpc.Channel(os.dup(a.fileno())), judge=True)
    program = pyrpc.Peer(pyrpc.Channel(os.dup(b.fileno())), judge=False)
    a.close()
    b.close()
    return judge, program


def roundtrip(value: object) -> object:
    judge, program = pair()
    return judge.codec.decode(program.codec.encode(value))


@pytest.mark.parametrize("value", [
    None, True, False, 0, -7, 2 ** 70, -(2 ** 200), 1.5, -0.0, float("inf"), "text", "\ud800 lone",
    b"\x00\xff", bytearray(b"ab"), 3 + 4j, [1, [2, (3,)]], (1, "a"), {1, 2}, frozenset({3}),
    {"k": [1, 2], (1, 2): {3: 4}}, fractions.Fraction(1, 3), decimal.Decimal("1.10"),
    datetime.date(2020, 1, 2), datetime.datetime(2020, 1, 2, 3, 4, 5), datetime.time(1, 2),
    datetime.timedelta(days=1, seconds=3),
])
def test_data_crosses_as_itself(value):
    back = roundtrip(value)
    assert back == value and type(back) is type(value)


def test_nan_crosses():
    assert math.isnan(roundtrip(float("nan")))


def test_subclasses_cross_as_their_plain_value():
    class Sneaky(list):
        def __eq__(self, other):
            return True

    class Int(int):
        pass

    back = roundtrip(Sneaky([1, 2]))
    assert type(back) is list and back == [1, 2] and back != [3]
    assert type(roundtrip(Int(5))) is int


def test_other_objects_cross_as_handles_equal_only_to_themselves():
    class AlwaysEqual:
        def __eq__(self, other):
            return True

    judge, program = pair()
    handle = judge.codec.decode(program.codec.encode(AlwaysEqual()))
    assert isinstance(handle, pyrpc.Remote)
    assert handle != 5 and not (handle == [1]) and handle == handle and bool(handle)


def test_a_value_containing_itself_or_too_deep_is_refused():
    loop: list = []
    loop.append(loop)
    _judge, program = pair()
    with pytest.raises(ValueError, match="contains itself"):
        program.codec.encode(loop)
    deep: list = []
    for _ in range(pyrpc.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(ValueError, match="nested"):
        program.codec.encode(deep)


@pytest.mark.parametrize("wire", [{"x": 1}, ["Z", 1], ["L"], ["L", 1], ["D", [[1]]], ["H", "x"], ["I", 5],
                                  ["B", "%%%"], ["Q", "1", "0"]])
def test_malformed_values_are_protocol_errors(wire):
    judge, _program = pair()
    with pytest.raises(pyrpc.ProtocolError):
        judge.codec.decode(wire)


def test_exceptions_map_to_builtins_and_exits_to_program_exit():
    judge, program = pair()
    for exc, cls in ((ValueError("v"), ValueError), (KeyError("k"), KeyError), (SystemExit(0), pyrpc.ProgramExit),
                     (KeyboardInterrupt(), pyrpc.ProgramExit)):
        raised = judge._error(pyrpc.error_message(exc, program))
        assert type(raised) is cls
    assert not issubclass(pyrpc.ProgramExit, Exception)   # no `except Exception` in the tests swallows it


def test_calls_travel_and_mutated_arguments_come_back():
    a, b = socket.socketpair()
    judge = pyrpc.Peer(pyrpc.Channel(a.fileno()), judge=True)
    program = pyrpc.Peer(pyrpc.Channel(b.fileno()), judge=False)

    def sort_in_place(xs):
        xs.sort()
        return len(xs)

    rid = program.export(sort_in_place)
    server = threading.Thread(target=program.serve_forever, daemon=True)
    server.start()
    remote = judge.remote(rid, "function")
    judge._serving = threading.get_ident()
    data = [3, 1, 2]
    assert remote(data) == 3 and data == [1, 2, 3]
    judge.channel.send({"op": "bye"})
    server.join(5)
    a.close()
    b.close()


def test_the_judge_shows_the_program_public_attributes_only():
    class TestObject:
        answer = 42

        def method(self):
            return 1

    with pytest.raises(AttributeError):
        pyrpc._judge_may_touch(TestObject(), "__class__", "getattr")
    with pytest.raises(TypeError):
        pyrpc._judge_may_touch(TestObject(), "method", "setattr")
    with pytest.raises(TypeError):
        pyrpc._judge_may_touch(TestObject, "answer", "setattr")
    pyrpc._judge_may_touch(TestObject(), "answer", "setattr")   # data on an instance: as in one process


# ---------------------------------------------------------------- Job checks

@pytest.mark.parametrize("files,match", [
    ({"a/": "x"}, "relative to the work dir and name a file"), ({".": "x"}, "be a name"), ({"a/../b": "x"}, "be a name"),
    ({"./a": "x"}, "be a name"), ({"a//b": "x"}, "be a name"), ({"/abs": "x"}, "relative"),
    ({"a": "x", "a/b": "y"}, "both 'a'"), ({"x" * 300: "y"}, "longer than 255"), ({"a\nb": "x"}, "control"),
    ({"f": "\ud800"}, "lone surrogate"), ({"big": b"x" * (2 << 20)}, "disk_mb"), ({"main.py": "x"}, "reserved"),
])
def test_bad_files_are_bad_jobs_naming_the_field(files, match):
    from proctor.sandbox import Limits

    with pytest.raises(BadJob, match=match):
        Job("python", "print(1)", files=files, limits=Limits(disk_mb=1))


@pytest.mark.parametrize("field", ["code", "tests", "stdin", "expected"])
def test_a_lone_surrogate_anywhere_is_a_bad_job(field):
    kw = {"code": "print(1)", "tests": None, "cases": None}
    if field == "code":
        kw["code"] = "x = '\ud800'"
    elif field == "tests":
        kw["tests"] = "# \ud800"
    else:
        kw["cases"] = [("\ud800", "1")] if field == "stdin" else [("1", "\ud800")]
    with pytest.raises(BadJob, match="surrogate"):
        Job("c", **kw)


def test_python_tests_that_do_not_parse_are_the_tasks_fault():
    with pytest.raises(BadJob, match="Job.tests is not valid Python"):
        Job("python", "x = 1", tests="assert (x ==")
    Job("python", "def f(:", tests="assert f()")   # the program not parsing is its own verdict
