"""Verdict rules, output decoding and the wire protocol: no engine needed."""

from __future__ import annotations

import base64
import json
import signal
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proctor.sandbox import BadJob, Job, Limits
from proctor.sandbox.errors import InfraError
from proctor.sandbox.protocol import FrameDecoder, encode_frame
from proctor.sandbox.verdict import (build_result, decode_output, last_python_exception,
                                     normalize_output, output_digest, outputs_match, step_status)


def step(kind="run", stdout=b"", stderr=b"", exit_code=0, sig=None, timed_out=None,
         output_limit=False, oom=False, marker_ok=True, syntax_error=False, wall_s=0.01) -> dict:
    """A step as the server reports it: a case's output also as the hash the host compares."""
    digest = output_digest(stdout.decode("utf-8", errors="replace")) if kind == "case" else None
    return {"kind": kind, "stdout": base64.b64encode(stdout).decode(), "stderr": base64.b64encode(stderr).decode(),
            "stdout_sha256": digest, "exit_code": exit_code, "signal": sig, "wall_s": wall_s, "cpu_s": wall_s,
            "timed_out": timed_out, "output_limit": output_limit, "oom": oom, "marker_ok": marker_ok,
            "syntax_error": syntax_error, "left_behind": 0}


def verdict(job: Job, *steps: dict):
    return build_result(job, {"type": "result", "id": 1, "steps": list(steps), "clean": True})


PY = Job("python", "x = 1", tests="assert x == 1")
TB = b"Traceback (most recent call last):\n  File \"/work/main.py\", line 1, in <module>\n"


# ---------------------------------------------------------------- exit code is never enough
def test_exit_zero_without_marker_is_failed():
    assert verdict(PY, step(exit_code=0, marker_ok=False)).status == "failed"


def test_exit_zero_with_marker_is_passed():
    r = verdict(PY, step(exit_code=0, marker_ok=True, stdout=b"ok\n"))
    assert (r.status, r.passed, r.stdout) == ("passed", True, "ok\n")


@pytest.mark.parametrize("stderr,expected", [
    (TB + b"AssertionError\n", "failed"),
    (TB + b"AssertionError: wrong\n", "failed"),
    (TB + b"ZeroDivisionError: division by zero\n", "runtime_error"),
    (TB + b"MemoryError\n", "memory"),
    (b"", "failed"),   # sys.exit(1): the program said it failed
])
def test_python_nonzero_exit(stderr, expected):
    assert verdict(PY, step(exit_code=1, stderr=stderr, marker_ok=False)).status == expected


def test_limits_explain_the_exit_code():
    assert verdict(PY, step(exit_code=None, sig=9, timed_out="cpu")).status == "timeout"
    assert verdict(PY, step(exit_code=None, sig=9, output_limit=True)).status == "output_limit"
    assert verdict(PY, step(exit_code=None, sig=9, oom=True)).status == "memory"
    # An output flood that also ran out of time is reported as the flood.
    assert verdict(PY, step(exit_code=None, sig=9, output_limit=True, timed_out="wall")).status == "output_limit"


def test_python_syntax_error_is_compile_error():
    r = verdict(PY, step(exit_code=3, syntax_error=True, marker_ok=False, stderr=b"SyntaxError: invalid syntax"))
    assert r.status == "compile_error"


C = Job("c", "int f(void){return 1;}", tests="int main(void){return 0;}")


def test_c_compile_error_and_compile_timeout():
    r = verdict(C, step(kind="compile", exit_code=1, stderr=b"main.c:1: error: expected ';'"))
    assert r.status == "compile_error" and "expected" in r.stderr
    r = verdict(C, step(kind="compile", exit_code=None, sig=9, timed_out="wall"))
    assert r.status == "compile_error" and "compilation exceeded" in r.stderr


@pytest.mark.parametrize("sig,stderr,expected", [
    (signal.SIGABRT, b"prog: tests.c:3: main: Assertion `f() == 2' failed.\n", "failed"),
    (signal.SIGABRT, b"terminate called after throwing an instance of 'std::bad_alloc'\n", "memory"),
    (signal.SIGSEGV, b"", "runtime_error"),
])
def test_c_signals(sig, stderr, expected):
    r = verdict(C, step(kind="compile"), step(exit_code=None, sig=sig, stderr=stderr, marker_ok=False))
    assert r.status == expected


def test_c_exit_zero_from_exit_call_is_failed():
    assert verdict(C, step(kind="compile"), step(exit_code=0, marker_ok=False)).status == "failed"


GO = Job("go", "package main\n\nfunc Add(a, b int) int { return a + b }\n",
         tests='package main\n\nimport "testing"\n\nfunc TestAdd(t *testing.T) {}\n')


# What Go's runtime printed under RLIMIT_DATA at 32-46 MiB (test_humaneval_x_full.py runs it).
@pytest.mark.parametrize("stderr, expected", [
    (b"fatal error: out of memory allocating heap arena map\n\nruntime stack:\n", "memory"),
    (b"fatal error: pageAlloc: out of memory\n\nruntime stack:\n", "memory"),
    (b"fatal error: runtime: cannot allocate memory\n\nruntime stack:\n", "memory"),
    (b"runtime/cgo: pthread_create failed: Resource temporarily unavailable\nSIGABRT: abort\nPC=0x7f69a1846eec m=0\n",
     "memory"),
    (b"runtime: failed to create new OS thread (have 2 already; errno=12)\nfatal error: newosproc\n", "memory"),
    (b"--- FAIL: TestAdd (0.00s)\n    x_test.go:7: bad\nFAIL\n", "failed"),
    (b"panic: runtime error: index out of range [99] with length 3\n\ngoroutine 1 [running]:\n", "runtime_error"),
])
def test_go_statuses(stderr, expected):
    r = verdict(GO, step(kind="compile"), step(exit_code=2 if expected != "failed" else 1, stderr=stderr,
                                               marker_ok=False))
    assert r.status == expected, r.stderr


# ---------------------------------------------------------------- cases
CASES = Job("python", "print(input())", cases=[("a\n", "a\n"), ("b", "b"), ("c", "x")])


def test_cases_compared_outside_and_first_failure_reported():
    r = verdict(CASES, step("case", stdout=b"a\n"), step("case", stdout=b"b   \n\n"), step("case", stdout=b"c\n"))
    assert [c.status for c in r.cases] == ["passed", "passed", "failed"]
    assert r.status == "failed" and r.pass_fraction == pytest.approx(2 / 3)
    assert r.stdout == "c\n"   # the failing case is the one shown


def test_cases_may_exit_early_since_output_is_what_counts():
    r = verdict(CASES, *[step("case", stdout=o, marker_ok=False) for o in (b"a", b"b", b"x")])
    assert r.passed and r.pass_fraction == 1.0


def test_case_timeout_status():
    r = verdict(CASES, step("case", stdout=b"a"), step("case", exit_code=None, sig=9, timed_out="cpu"),
                step("case", stdout=b"x"))
    assert r.status == "timeout" and [c.passed for c in r.cases] == [True, False, True]


# ---------------------------------------------------------------- decoding and normalising
@given(st.binary(max_size=2000), st.integers(min_value=1, max_value=3000))
def test_decode_output_never_raises_and_respects_limit(data, limit):
    text = decode_output(data, limit)
    assert isinstance(text, str)
    assert len(text) <= limit


@given(st.text(max_size=300))
def test_decode_roundtrips_valid_utf8(text):
    data = text.encode()
    assert decode_output(data, len(data)) == text


@given(st.lists(st.text(alphabet=st.characters(blacklist_characters="\r\n"), max_size=20), max_size=10),
       st.lists(st.sampled_from([" ", "\t"]), max_size=3), st.integers(0, 3))
def test_trailing_space_and_blank_lines_do_not_matter(lines, pad, blank):
    text = "\n".join(lines)
    noisy = "\n".join(line + "".join(pad) for line in lines) + "\n" * blank
    assert outputs_match(noisy, text)
    assert normalize_output(normalize_output(text)) == normalize_output(text)


def test_outputs_differ_on_content_and_leading_space():
    assert not outputs_match("1 2", "1  2")
    assert not outputs_match(" 3", "3")
    assert outputs_match("3\r\n", "3")


@given(st.sampled_from(["ValueError", "AssertionError", "MemoryError", "pkg.mod.CustomError"]),
       st.text(alphabet=st.characters(blacklist_characters="\r\n"), max_size=30))
def test_last_python_exception(name, message):
    stderr = f"Traceback (most recent call last):\n  File \"x\", line 1\n    raise E\n{name}: {message}\n"
    assert last_python_exception(stderr) == name.rsplit(".", 1)[-1]


def test_no_traceback_no_exception():
    assert last_python_exception("AssertionError\n") is None


# ---------------------------------------------------------------- wire protocol
def mux(stream: int, payload: bytes) -> bytes:
    return bytes([stream, 0, 0, 0]) + struct.pack(">I", len(payload)) + payload


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                           lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=5), c, max_size=4),
                           max_leaves=10)


@settings(max_examples=150)
@given(st.lists(st.dictionaries(st.text(max_size=8), json_values, max_size=4), min_size=1, max_size=5),
       st.lists(st.integers(1, 64), min_size=1, max_size=50), st.data())
def test_frames_survive_any_chunking_and_interleaved_stderr(messages, cuts, data):
    messages = [{**m, "type": "result"} for m in messages]
    payload = b"".join(encode_frame(m) for m in messages)
    # Docker splits the server's stdout into chunks of its own choosing, with stderr between them.
    wire = b""
    pos = 0
    for cut in cuts:
        if pos >= len(payload):
            break
        wire += mux(1, payload[pos:pos + cut])
        if data.draw(st.booleans()):
            wire += mux(2, b"log line\n")
        pos += cut
    wire += mux(1, payload[pos:])
    decoder, got, i = FrameDecoder(), [], 0
    while i < len(wire):
        n = data.draw(st.integers(1, 97))
        got += decoder.feed(wire[i:i + n])
        i += n
    assert got == json.loads(json.dumps(messages))


def test_corrupt_stream_is_an_infra_error():
    with pytest.raises(InfraError):
        FrameDecoder().feed(b"\x07\x01\x00\x00\x00\x00\x00\x01x")
    with pytest.raises(InfraError):
        FrameDecoder().feed(mux(1, struct.pack(">I", 4) + b"{no}"))


# ---------------------------------------------------------------- bad input names the field
@pytest.mark.parametrize("kwargs,field", [
    (dict(language="cobol", code=""), "language"),
    (dict(language="python", code=b"x"), "code"),
    (dict(language="python", code="", cases=[("in",)]), "cases[0]"),
    (dict(language="python", code="", files={"../x": "y"}), "files"),
    (dict(language="python", code="", files={"main.py": "y"}), "reserved"),
    (dict(language="python", code="", limits={"wall_s": 1}), "limits"),
])
def test_bad_jobs_name_the_field(kwargs, field):
    with pytest.raises(BadJob, match=field.replace("[", r"\[").replace("]", r"\]")):
        Job(**kwargs)


@pytest.mark.parametrize("kwargs,field", [
    (dict(wall_s=0), "wall_s"), (dict(cpu_s=-1), "cpu_s"), (dict(memory_mb=1), "memory_mb"),
    (dict(pids=1), "pids"), (dict(output_bytes=10), "output_bytes"),
])
def test_bad_limits_name_the_field(kwargs, field):
    with pytest.raises(BadJob, match=field):
        Limits(**kwargs)
