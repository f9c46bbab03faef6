"""Job.fetch_files -> Result.files, against the real sandbox (Docker engine, no mocks).

A job can ask for files its program wrote into the work dir. They come back whole
and exact, or as None where no regular file is (missing, a directory, a symlink, a
fifo): never the content of what a link points to. A file over Limits.output_bytes is
None with a note in Result.error, never cut. Also: Result.wall_s/cpu_s count every
build step, not only the last.
"""

from __future__ import annotations

import pytest

from proctor.sandbox import BadJob, Job, Limits, Sandbox, VerdictCache
from proctor.sandbox.cache import job_key, result_from_json, result_to_json
from proctor.sandbox.types import Result

LIM = Limits(cpu_s=5, wall_s=15)
BINARY = bytes(range(256)) * 5 + b"\x00\r\n\xff"
TEXT = "first line\nz\u00fcrich \u2603\n"


@pytest.fixture(scope="module")
def sb(docker_ready):
    with Sandbox(slots=1) as sandbox:
        yield sandbox


# ---------------------------------------------------------------- the Job field (no engine)

def test_fetch_files_is_kept_as_a_tuple_and_checked_like_file_names():
    job = Job("python", "pass", fetch_files=["out.txt", "sub/dir/data.bin"])
    assert job.fetch_files == ("out.txt", "sub/dir/data.bin")
    assert Job("python", "pass").fetch_files is None
    for bad, words in ((["ok.txt", "../x"], r"Job.fetch_files\[1\].*'\.\.'"),
                       (["a/../../etc/passwd"], r"Job.fetch_files\[0\].*'\.\.'"),
                       (["/etc/passwd"], r"Job.fetch_files\[0\].*relative"),
                       (["dir/"], r"Job.fetch_files\[0\].*relative"),
                       ([""], r"Job.fetch_files\[0\] must be a non-empty relative path"),
                       ([7], r"Job.fetch_files\[0\] must be a non-empty relative path"),
                       (["a\nb"], r"Job.fetch_files\[0\].*control characters"),
                       (["x" * 300], r"Job.fetch_files\[0\].*longer than 255 bytes"),
                       ([f"f{i}" for i in range(65)], r"65 paths; at most 64"),
                       ("out.txt", r"Job.fetch_files must be a list or tuple")):
        with pytest.raises(BadJob, match=words):
            Job("python", "pass", fetch_files=bad)
    assert len(Job("python", "pass", fetch_files=[f"f{i}" for i in range(64)]).fetch_files) == 64


def test_the_cache_keys_fetch_files_and_round_trips_the_files():
    base = Job("python", "pass")
    keys = {job_key(j, "ctx") for j in (base, Job("python", "pass", fetch_files=["a"]),
                                         Job("python", "pass", fetch_files=["b"]),
                                         Job("python", "pass", fetch_files=["a", "b"]))}
    assert len(keys) == 4
    assert job_key(Job("python", "pass", fetch_files=["a"]), "ctx") == \
        job_key(Job("python", "pass", fetch_files=("a",)), "ctx")
    stored = Result(status="passed", passed=True, files={"bin": BINARY, "text": TEXT.encode(), "gone": None},
                    error="Job.fetch_files: 'big' (9 bytes) was not returned")
    back = result_from_json(result_to_json(stored, "k" * 64), "k" * 64)
    assert back == stored and back.files["bin"] == BINARY and back.files["gone"] is None
    plain = Result(status="failed", passed=False)
    assert result_from_json(result_to_json(plain, "k" * 64), "k" * 64).files is None


# ---------------------------------------------------------------- real runs

def test_text_and_binary_files_come_back_exactly_and_absent_ones_as_none(sb):
    code = ("import os\n"
            f"open('out.txt', 'w', encoding='utf-8').write({TEXT!r})\n"
            "os.makedirs('sub/deep')\n"
            f"open('sub/deep/data.bin', 'wb').write({BINARY!r})\n"
            "open('empty', 'wb').close()\n"
            "os.mkdir('adir')\n")
    job = Job("python", code, files={"given.txt": "from the caller"}, limits=LIM,
              fetch_files=["out.txt", "sub/deep/data.bin", "empty", "missing.txt", "adir", "sub", "given.txt"])
    r = sb.run(job)
    assert r.passed, r
    assert r.files == {"out.txt": TEXT.encode(), "sub/deep/data.bin": BINARY, "empty": b"",
                       "missing.txt": None, "adir": None, "sub": None, "given.txt": b"from the caller"}
    assert r.error == ""
    assert sb.run(Job("python", code, limits=LIM)).files is None   # not asked: not set


def test_links_and_fifos_never_lead_to_their_target(sb):
    code = ("import os\n"
            "os.symlink('/etc/passwd', 'passwd')\n"
            "os.symlink('/opt/proctor/forkserver.py', 'server.py')\n"
            "os.symlink('/proc/1/environ', 'env')\n"
            "os.symlink('/opt/proctor', 'srv')\n"
            "open('real.txt', 'w').write('real')\n"
            "os.symlink('real.txt', 'alias.txt')\n"
            "os.mkfifo('fifo')\n"
            "assert open('passwd').read().startswith('root:')\n")   # the job itself could read it
    r = sb.run(Job("python", code, limits=LIM,
                   fetch_files=["passwd", "server.py", "env", "srv/forkserver.py", "alias.txt", "fifo", "real.txt"]))
    assert r.passed, r
    assert r.files == {"passwd": None, "server.py": None, "env": None, "srv/forkserver.py": None,
                       "alias.txt": None, "fifo": None, "real.txt": b"real"}


def test_a_file_over_output_bytes_is_none_and_named_in_error_never_cut(sb):
    code = ("open('big.bin', 'wb').write(b'x' * 1025)\n"
            "open('fits.bin', 'wb').write(b'y' * 1024)\n")
    r = sb.run(Job("python", code, limits=Limits(cpu_s=5, wall_s=15, output_bytes=1024),
                   fetch_files=["big.bin", "fits.bin"]))
    assert r.passed, r
    assert r.files == {"big.bin": None, "fits.bin": b"y" * 1024}
    assert "'big.bin' (1025 bytes) was not returned" in r.error and "Limits.output_bytes = 1024" in r.error
    assert "fits.bin" not in r.error


def test_a_cpp_program_can_write_files_for_the_caller(sb):
    code = ('#include <cstdio>\n'
            'int main() {\n'
            '  FILE *f = std::fopen("answer.txt", "w");\n'
            '  std::fputs("42\\n", f);\n'
            '  std::fclose(f);\n'
            '  f = std::fopen("raw.bin", "wb");\n'
            '  unsigned char b[4] = {0, 1, 254, 255};\n'
            '  std::fwrite(b, 1, 4, f);\n'
            '  std::fclose(f);\n'
            '  return 0;\n'
            '}\n')
    r = sb.run(Job("cpp", code, limits=LIM, fetch_files=["answer.txt", "raw.bin", "main.cpp"]))
    assert r.passed, r
    # The sources are compiled elsewhere: the work dir holds only what the program wrote.
    assert r.files == {"answer.txt": b"42\n", "raw.bin": b"\x00\x01\xfe\xff", "main.cpp": None}


def test_with_cases_the_files_are_as_the_last_case_that_ran_left_them(sb):
    code = ("import sys\n"
            "line = sys.stdin.read().strip()\n"
            "open('last.txt', 'w').write(line)\n"
            "open('seen.txt', 'a').write(line + ',')\n"
            "print(line)\n")
    cases = [("a", "a"), ("b", "b"), ("c", "c")]
    r = sb.run(Job("python", code, cases=cases, limits=LIM, fetch_files=["last.txt", "seen.txt"]))
    assert r.passed, r
    assert r.files == {"last.txt": b"c", "seen.txt": b"a,b,c,"}   # the runs share the work dir
    stopped = sb.run(Job("python", code, cases=[("a", "a"), ("b", "wrong"), ("c", "c")], limits=LIM,
                         stop_on_first_failure=True, fetch_files=["last.txt"]))
    assert stopped.status == "failed" and stopped.cases_skipped == 1
    assert stopped.files == {"last.txt": b"b"}


def test_a_cached_verdict_keeps_its_files(tmp_path):
    job = Job("python", "import os\nopen('r.bin', 'wb').write(os.urandom(64))\n", limits=LIM,
              fetch_files=["r.bin", "none"])
    with Sandbox(slots=1, cache=VerdictCache(directory=tmp_path)) as first:
        ran = first.run(job)
    assert ran.passed and len(ran.files["r.bin"]) == 64 and ran.files["none"] is None and not ran.cached
    with Sandbox(slots=1, cache=VerdictCache(directory=tmp_path)) as second:
        again = second.run(job)
    assert again.cached and again.files == ran.files   # os.urandom: equal only if it did not run again


# ---------------------------------------------------------------- timings of builds

# g++ evaluates work() while compiling main.o (about 1.4 s of CPU on a 2-core VM at load 2;
# its default -fconstexpr-ops-limit allows about this much); the program itself only prints.
HEAVY_CONSTEXPR = """#include <cstdio>
constexpr long long work() {
  long long s = 0;
  for (long long i = 0; i < 1000; ++i)
    for (long long j = 0; j < 1000; ++j) s += (i * j) % 7;
  return s;
}
constexpr long long V = work();
int main() { std::printf("%lld\\n", V); return 0; }
"""
LIGHT = HEAVY_CONSTEXPR.replace("i < 1000", "i < 2").replace("j < 1000", "j < 2")


def test_cpu_and_wall_time_count_every_build_step(sb):
    lim = Limits(cpu_s=5, wall_s=15, compile_s=60)
    heavy, light = (sb.run(Job("cpp", code, limits=lim)) for code in (HEAVY_CONSTEXPR, LIGHT))
    assert heavy.passed and light.passed, (heavy, light)
    assert heavy.stdout == "2570569\n" and light.stdout == "1\n"
    # Only the compile of main.o differs; the link after it (the last build step, all that
    # was counted before) and the run cost the same in both.
    assert heavy.cpu_s - light.cpu_s > 0.3, (heavy.cpu_s, light.cpu_s)
    assert heavy.wall_s - light.wall_s > 0.3, (heavy.wall_s, light.wall_s)
