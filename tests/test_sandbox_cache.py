"""Less work per RL step: the verdict cache, stop_on_first_failure, streaming run_many/imap.

The cache's own rules (keys, bounds, disk, concurrency) need no engine; everything that
runs programs uses the real Docker engine.
"""

from __future__ import annotations

import base64
import io
import multiprocessing
import threading
from concurrent.futures import ThreadPoolExecutor

import docker
import pytest

from proctor.sandbox import Job, Limits, Result, Sandbox, SandboxError, VerdictCache
from proctor.sandbox.cache import job_key, result_from_json
from proctor.sandbox.images import base_ref
from proctor.sandbox.server.judge import step_failed
from proctor.sandbox.types import CaseResult, infra_result
from proctor.sandbox.sandbox import case_check
from proctor.sandbox.verdict import build_result, output_digest

FAST = Limits(cpu_s=1, wall_s=3)
# Prints a value no second run could repeat: equal stdout across jobs means one run.
RANDOM = "import os\nprint(os.urandom(8).hex())\n"


def result(text: str = "ok\n", status: str = "passed") -> Result:
    return Result(status=status, passed=status == "passed", stdout=text, wall_s=0.01,
                  cases=(CaseResult(status=status, passed=status == "passed", stdout=text, stderr="",
                                    exit_code=0, wall_s=0.01, expected=text),))


# ---------------------------------------------------------------- keys

def test_the_key_changes_with_everything_that_decides_the_verdict():
    base = Job("python", "print(1)", tests="assert True", cases=[("1", "1")], files={"a.txt": "x"}, limits=FAST)
    key = job_key(base, "img|runc|1")
    assert key == job_key(Job("python", "print(1)", tests="assert True", cases=[["1", "1"]],
                              files={"a.txt": b"x"}, limits=FAST), "img|runc|1")
    variants = [
        Job("python", "print(2)", tests="assert True", cases=[("1", "1")], files={"a.txt": "x"}, limits=FAST),
        Job("python", "print(1)", tests="assert 1", cases=[("1", "1")], files={"a.txt": "x"}, limits=FAST),
        Job("python", "print(1)", tests="assert True", cases=[("1", "2")], files={"a.txt": "x"}, limits=FAST),
        Job("python", "print(1)", tests="assert True", cases=[("1", "1")], files={"a.txt": "y"}, limits=FAST),
        Job("python", "print(1)", tests="assert True", cases=[("1", "1")], files={"b.txt": "x"}, limits=FAST),
        Job("python", "print(1)", tests="assert True", cases=[("1", "1")], files={"a.txt": "x"},
            limits=Limits(cpu_s=1, wall_s=4)),
        Job("python", "print(1)", tests="assert True", cases=[("1", "1")], files={"a.txt": "x"}, limits=FAST,
            stop_on_first_failure=True),
        Job("c", "print(1)", tests="assert True", cases=[("1", "1")], files={"a.txt": "x"}, limits=FAST),
    ]
    keys = {job_key(v, "img|runc|1") for v in variants}
    assert len(keys) == len(variants) and key not in keys
    # The image, the runtime, the CPU share: same job, different verdict context.
    assert len({key, job_key(base, "img2|runc|1"), job_key(base, "img|runsc|1"), job_key(base, "img|runc|2")}) == 4
    # No limits and the default limits are the same job.
    assert job_key(Job("python", "x"), "c") == job_key(Job("python", "x", limits=Limits()), "c")


# ---------------------------------------------------------------- memory, disk, infra errors

def test_memory_is_bounded_by_entries_and_bytes():
    cache = VerdictCache(max_entries=3)
    for i in range(5):
        cache.put(f"k{i}", result(f"{i}\n"))
    assert len(cache) == 3 and cache.get("k0") is None and cache.get("k4").stdout == "4\n"
    assert cache.stats().evictions == 2
    big = VerdictCache(max_bytes=10_000)
    for i in range(10):
        big.put(f"k{i}", result("x" * 3000))
    assert big.stats().bytes <= 10_000 and 1 <= len(big) <= 3
    assert big.get("k9") is not None and big.get("k0") is None


def test_infra_errors_are_never_stored(tmp_path):
    cache = VerdictCache(directory=tmp_path)
    assert cache.put("k", infra_result("engine gone", attempts=3)) is False
    assert cache.get("k") is None and list(tmp_path.rglob("*.json")) == []
    assert cache.stats().not_stored == 1 and cache.stats().stores == 0


def test_a_hit_is_marked_cached_and_equal_to_the_run(tmp_path):
    cache = VerdictCache(directory=tmp_path)
    original = result("42\n")
    cache.put("k", original)
    hit = cache.get("k")
    assert hit.cached and not original.cached
    assert hit.stdout == "42\n" and hit.cases == original.cases and hit.status == "passed"
    fresh = VerdictCache(directory=tmp_path)   # another process, another run: from disk
    claim = fresh.claim("k")
    assert not claim.owner and claim.future.result().cached and claim.future.result().cases == original.cases
    assert fresh.stats().disk_hits == 1


@pytest.mark.parametrize("damage", ["truncate", "garbage", "other key", "infra status", "empty"])
def test_a_corrupt_disk_entry_is_ignored_then_rewritten(tmp_path, damage):
    VerdictCache(directory=tmp_path).put("k" * 64, result("7\n"))
    (path,) = tmp_path.rglob("*.json")
    text = path.read_text()
    path.write_text({"truncate": text[: len(text) // 2], "garbage": "\x00not json",
                     "other key": text.replace("k" * 64, "j" * 64),
                     "infra status": text.replace('"passed"', '"infra_error"'), "empty": ""}[damage])
    cache = VerdictCache(directory=tmp_path)
    claim = cache.claim("k" * 64)
    assert claim.owner and cache.stats().corrupt == 1   # not trusted: the job must run
    cache.settle(claim, result("7\n"))
    assert result_from_json(path.read_text(), "k" * 64).stdout == "7\n"
    assert VerdictCache(directory=tmp_path).get("k" * 64).stdout == "7\n"


def _writer(directory: str, worker: int) -> None:
    cache = VerdictCache(directory=directory)
    for i in range(60):
        # Every worker writes the shared keys too: the same entry from four processes at once.
        cache.put(f"{i % 20:064x}", result(f"shared {i % 20}\n"))
        cache.put(f"{worker + 1:032x}{i:032x}", result(f"own {worker} {i}\n" * 200))


def test_concurrent_writers_never_leave_a_partial_entry(tmp_path):
    stop = threading.Event()
    bad: list[str] = []

    def read_loop() -> None:
        reader = VerdictCache(directory=tmp_path)
        while not stop.is_set():
            for path in tmp_path.rglob("*.json"):
                try:
                    result_from_json(path.read_text(), path.stem)
                except FileNotFoundError:
                    continue
                except Exception as exc:  # noqa: BLE001 - any unreadable entry fails the test
                    bad.append(f"{path.name}: {exc}")
        assert reader.stats().corrupt == 0

    reader = threading.Thread(target=read_loop)
    reader.start()
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w)) for w in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    stop.set()
    reader.join()
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    assert bad == []
    assert len(list(tmp_path.rglob("*.json"))) == 20 + 4 * 60
    assert not list(tmp_path.rglob(".tmp-*"))
    cache = VerdictCache(directory=tmp_path)
    assert cache.get(f"{3:064x}").stdout == "shared 3\n"
    assert cache.get(f"{3:032x}{59:032x}").stdout.startswith("own 2 59\n")


def test_a_twin_waits_for_the_running_job_and_shares_its_result():
    cache = VerdictCache()
    first, second = cache.claim("k"), cache.claim("k")
    assert first.owner and not second.owner and not second.future.done()
    cache.settle(first, result("1\n"))
    assert second.future.result().cached and second.future.result().stdout == "1\n"
    assert not first.future.result().cached
    s = cache.stats()
    assert (s.misses, s.shared, s.stores, s.lookups, s.saved) == (1, 1, 1, 2, 1)


def test_a_failed_owner_hands_its_exception_to_twins_and_stores_nothing():
    cache = VerdictCache()
    first, second = cache.claim("k"), cache.claim("k")
    cache.abandon(first, SandboxError("image missing"))
    with pytest.raises(SandboxError, match="image missing"):
        second.future.result()
    assert cache.claim("k").owner   # nothing stored, nothing left in flight


def test_bad_cache_arguments_say_what_to_pass(tmp_path):
    with pytest.raises(SandboxError, match="max_entries"):
        VerdictCache(max_entries=0)
    (tmp_path / "file").write_text("")
    with pytest.raises(SandboxError, match="writable directory"):
        VerdictCache(directory=tmp_path / "file" / "sub")


# ---------------------------------------------------------------- stop_on_first_failure: the verdict

def _step(kind: str, out: bytes = b"", exit_code: int = 0, marker: bool = True) -> dict:
    """A step as the server reports it: a case's output also as the hash the host compares."""
    digest = output_digest(out.decode()) if kind == "case" else None
    return {"kind": kind, "stdout": base64.b64encode(out).decode(), "stderr": "", "exit_code": exit_code,
            "signal": None, "wall_s": 0.01, "cpu_s": 0.01, "timed_out": None, "output_limit": False,
            "oom": False, "marker_ok": marker, "syntax_error": False, "left_behind": 0, "stdout_sha256": digest}


def test_the_verdict_ends_the_case_list_at_the_first_failure():
    cases = [("1", "1"), ("2", "2"), ("3", "3"), ("4", "4")]
    steps = [_step("case", b"1"), _step("case", b"x"), _step("case", b"3")]
    reply = {"steps": steps, "clean": True}
    stopped = build_result(Job("python", "c", cases=cases, stop_on_first_failure=True), reply)
    assert [c.status for c in stopped.cases] == ["passed", "failed"] and stopped.cases_skipped == 2
    assert stopped.status == "failed" and stopped.pass_fraction == pytest.approx(1 / 4)
    full = build_result(Job("python", "c", cases=cases[:3]), reply)
    assert len(full.cases) == 3 and full.cases_skipped == 0 and full.pass_fraction == pytest.approx(2 / 3)


def test_failed_tests_skip_every_case_when_stopping():
    job = Job("python", "c", tests="assert False", cases=[("1", "1"), ("2", "2")], stop_on_first_failure=True)
    r = build_result(job, {"steps": [_step("run", exit_code=1, marker=False)], "clean": True})
    assert r.status == "failed" and r.cases == () and r.cases_skipped == 2 and r.pass_fraction == 0.0


def test_the_server_only_stops_where_the_verdict_must_fail():
    # Whether a case's output matched, only the host knows (the server never sees the
    # expected output): the server stops by itself only on an unclean run.
    assert not step_failed(_step("case", b"1"))
    assert step_failed(_step("case", b"1", exit_code=1))
    assert step_failed(_step("run", marker=False)) and not step_failed(_step("run"))
    assert step_failed({**_step("case"), "timed_out": "cpu"})


def test_the_host_answers_whether_a_case_matched():
    check = case_check(Job("python", "c", cases=[("1", "one\n"), ("2", "two")], stop_on_first_failure=True))
    assert check(0, output_digest("one   \n\n")) and check(1, output_digest("two\n"))
    assert not check(0, output_digest("two")) and not check(1, None)
    assert not check(2, output_digest("one")) and not check(-1, output_digest("one"))
    assert case_check(Job("python", "c")) is None


def test_stop_on_first_failure_must_be_a_bool():
    with pytest.raises(SandboxError, match="stop_on_first_failure"):
        Job("python", "x", stop_on_first_failure="yes")


# ---------------------------------------------------------------- against the engine

pytest_docker = pytest.mark.docker
ADD = "a, b = map(int, input().split())\nif a < 0:\n    import time\n    time.sleep(60)\nprint(a + b if a < 100 else a - b)"


@pytest_docker
def test_stop_on_first_failure_runs_no_case_after_the_failure(sandbox):
    # Case 3 fails; case 4 would sleep until the wall limit if it ran.
    cases = [("1 2", "3"), ("10 20", "30"), ("200 1", "201"), ("-1 0", "-1"), ("5 5", "10")]
    lim = Limits(cpu_s=1, wall_s=3)
    r = sandbox.run(Job("python", ADD, cases=cases, limits=lim, stop_on_first_failure=True))
    assert [c.status for c in r.cases] == ["passed", "passed", "failed"]
    assert r.status == "failed" and not r.passed and r.cases_skipped == 2
    assert r.pass_fraction == pytest.approx(2 / 5)
    assert r.wall_s < lim.wall_s   # the sleeping case never started: no step reached its limit
    full = sandbox.run(Job("python", ADD, cases=cases, limits=lim))
    assert [c.status for c in full.cases] == ["passed", "passed", "failed", "timeout", "passed"]
    ok = sandbox.run(Job("python", ADD, cases=[cases[0], cases[4]], limits=lim, stop_on_first_failure=True))
    assert ok.passed and len(ok.cases) == 2 and ok.cases_skipped == 0 and ok.pass_fraction == 1.0


@pytest_docker
def test_stop_on_first_failure_in_c(docker_ready):
    src = ("#include <stdio.h>\n#include <unistd.h>\nint main(void){int a,b;scanf(\"%d %d\",&a,&b);"
           "if(a<0)sleep(60);printf(\"%d\\n\",a<100?a+b:a-b);return 0;}\n")
    with Sandbox(slots=1) as sb:
        r = sb.run(Job("c", src, cases=[("1 2", "3"), ("200 1", "201"), ("-1 0", "-1")],
                       limits=Limits(cpu_s=1, wall_s=3), stop_on_first_failure=True))
    assert [c.status for c in r.cases] == ["passed", "failed"] and r.cases_skipped == 1 and r.wall_s < 3


@pytest_docker
def test_identical_jobs_in_one_run_many_run_once(docker_ready):
    cache = VerdictCache()
    with Sandbox(cache=cache) as sb:
        # A GRPO-like group: 16 completions, only 4 distinct programs.
        programs = [RANDOM + f"# variant {i % 4}\n" for i in range(16)]
        results = sb.run_many([Job("python", p, limits=FAST) for p in programs])
        assert len(results) == 16 and all(r.passed for r in results)
        for i, r in enumerate(results):
            assert r.stdout == results[i % 4].stdout   # twins share the one run's output
        assert len({r.stdout for r in results}) == 4   # and distinct programs ran apart
        assert sum(not r.cached for r in results) == 4 and sum(r.cached for r in results) == 12
        assert cache.stats().misses == 4 and cache.stats().saved == 12
        again = sb.run(Job("python", programs[0], limits=FAST))
        assert again.cached and again.stdout == results[0].stdout
        assert cache.stats().hits >= 1


@pytest_docker
def test_without_a_cache_every_job_runs(sandbox):
    results = sandbox.run_many([Job("python", RANDOM, limits=FAST)] * 4)
    assert len({r.stdout for r in results}) == 4 and not any(r.cached for r in results)


@pytest_docker
def test_the_disk_cache_serves_a_second_sandbox(docker_ready, tmp_path):
    job = Job("python", RANDOM, limits=FAST)
    with Sandbox(slots=1, cache=VerdictCache(directory=tmp_path)) as sb:
        first = sb.run(job)
    assert first.passed and not first.cached
    cache = VerdictCache(directory=tmp_path)
    with Sandbox(slots=1, cache=cache) as sb:
        second = sb.run(job)
    assert second.cached and second.stdout == first.stdout and cache.stats().disk_hits == 1


@pytest.fixture(scope="module")
def broken_image(docker_ready):
    """An image whose PID 1 dies at once: every attempt is an infrastructure failure."""
    client = docker.from_env()
    dockerfile = f"FROM {base_ref()}\nENTRYPOINT [\"/bin/false\"]\n".encode()
    image, _ = client.images.build(fileobj=io.BytesIO(dockerfile), tag="proctor-test/broken-cache:1", rm=True)
    yield image.tags[0]
    client.images.remove("proctor-test/broken-cache:1", force=True)


@pytest_docker
def test_an_infra_error_is_not_cached_and_the_job_runs_again(broken_image, tmp_path):
    cache = VerdictCache(directory=tmp_path)
    job = Job("python", "print('judged')", limits=FAST)
    with Sandbox(slots=1, retries=0, spare=0, cache=cache) as sb:
        key = (sb.pools[0].host, "python")
        sb._image_refs[key] = broken_image   # the engine fails every attempt
        bad = sb.run_many([job, job, job])
        assert len(bad) == 3 and all(r.infra_error for r in bad)
        assert cache.stats().stores == 0 and list(tmp_path.rglob("*.json")) == []
        del sb._image_refs[key]              # the engine works again
        good = sb.run(job)
        assert good.passed and not good.cached and good.stdout == "judged\n"
        assert sb.run(job).cached


@pytest_docker
def test_run_many_reads_a_generator_within_the_bound(sandbox):
    read, high = [], [0]
    results_seen = []

    def jobs():
        for i in range(30):
            read.append(i)
            high[0] = max(high[0], len(read) - len(results_seen))
            yield Job("python", f"print({i})", limits=FAST)

    for r in sandbox.imap(jobs(), max_pending=4):
        results_seen.append(r)
        assert r.stdout == f"{len(results_seen) - 1}\n"   # in job order
    assert len(results_seen) == 30 and high[0] <= 4
    out = sandbox.run_many((Job("python", f"print({i})", limits=FAST) for i in range(25)), max_pending=3)
    assert [r.stdout for r in out] == [f"{i}\n" for i in range(25)]


@pytest_docker
def test_imap_stops_reading_when_the_consumer_stops(sandbox):
    read = []

    def jobs():
        for i in range(1000):
            read.append(i)
            yield Job("python", f"print({i})", limits=FAST)

    stream = sandbox.imap(jobs(), max_pending=5)
    first = [next(stream) for _ in range(3)]
    stream.close()
    assert [r.stdout for r in first] == ["0\n", "1\n", "2\n"] and len(read) <= 8


@pytest_docker
def test_generator_progress_counts_every_job(sandbox):
    seen = []
    sandbox.run_many((Job("python", "pass") for _ in range(5)), progress=lambda d, t: seen.append((d, t)))
    assert sorted(d for d, _ in seen) == [1, 2, 3, 4, 5] and max(t for _, t in seen) == 5


@pytest_docker
def test_bad_max_pending_and_bad_jobs_are_refused(sandbox):
    with pytest.raises(SandboxError, match="max_pending"):
        sandbox.run_many([], max_pending=0)
    with pytest.raises(SandboxError, match=r"jobs\[1\] is a str"):
        sandbox.run_many([Job("python", "pass"), "print(1)"])
    with pytest.raises(SandboxError, match=r"jobs\[2\] is a NoneType"):
        list(sandbox.imap(iter([Job("python", "pass"), Job("python", "pass"), None])))


# ---------------------------------------------------------------- a short list never shifts rewards

@pytest_docker
def test_every_job_gets_exactly_one_result_whatever_happens(broken_image):
    jobs = [Job("python", f"print({i % 3})", limits=FAST) for i in range(9)]
    with Sandbox(slots=2, retries=0, cache=VerdictCache()) as sb:
        ok = sb.run_many(jobs)
        assert len(ok) == 9 and [r.stdout for r in ok] == [f"{i % 3}\n" for i in range(9)]
        sb._image_refs[(sb.pools[0].host, "python")] = broken_image
        failed = sb.run_many(Job("python", f"print({i + 100})", limits=FAST) for i in range(5))
        assert len(failed) == 5 and all(r.infra_error for r in failed)   # reported, never dropped


@pytest_docker
def test_a_missing_result_raises_instead_of_returning_a_short_list(sandbox, monkeypatch):
    real = sandbox._run_with_retries

    def loses_one(job):
        return None if job.code == "print('lost')" else real(job)

    monkeypatch.setattr(sandbox, "_run_with_retries", loses_one)
    jobs = [Job("python", "print(1)"), Job("python", "print('lost')"), Job("python", "print(3)")]
    with pytest.raises(SandboxError, match="job 1 produced NoneType"):
        sandbox.run_many(jobs)


@pytest_docker
def test_the_fan_out_keeps_up_under_threads(docker_ready):
    # Several trainers' threads sending the same programs at once: each program runs once.
    cache = VerdictCache()
    with Sandbox(cache=cache) as sb:
        batches = [[Job("python", RANDOM + f"# {i % 3}\n", limits=FAST) for i in range(6)] for _ in range(4)]
        with ThreadPoolExecutor(4) as ex:
            outs = list(ex.map(sb.run_many, batches))
    assert all(len(o) == 6 for o in outs)
    assert len({r.stdout for o in outs for r in o}) == 3 and cache.stats().misses == 3
