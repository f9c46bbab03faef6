"""A host that cannot start containers: the sandbox takes it out after a few tries, says so once,
serves from the hosts that work, and takes it back when a probe starts a container.

The broken host is a second dockerd this module starts itself (tests/second_dockerd.py), whose
OCI runtime is a script that fails every container create while a flag file exists; the
working host is the machine's engine. Nothing is mocked.
"""

from __future__ import annotations

import logging
import os
import threading
import time

import pytest

from proctor.sandbox import Job, Limits, Sandbox
from proctor.sandbox.breaker import Breaker, start_fix
from proctor.sandbox.errors import NoHostAvailable, SandboxError
from proctor.sandbox.images import image_ref

from second_dockerd import GVISOR, GVISOR_WITH_NETWORK, RUNTIME_MESSAGE, SecondEngine, can_run_dockerd

K = 3   # Sandbox's default down_after
LOGGER = "proctor.sandbox"


def jobs(n: int, **kw) -> list[Job]:
    return [Job("python", f"print({i})", **kw) for i in range(n)]


@pytest.fixture(scope="module")
def engine(docker_ready):
    problem = can_run_dockerd()
    if problem is not None:
        pytest.skip(f"no second dockerd here: {problem}")
    with SecondEngine() as eng:
        eng.load_images([image_ref("python")])
        yield eng


@pytest.fixture
def broken(engine):
    engine.set_broken(True)
    yield engine
    engine.set_broken(False)


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER and r.levelno >= logging.WARNING]


# --------------------------------------------------------------------------- one broken host

def test_a_host_that_cannot_start_fails_the_constructor_once_with_the_fix(broken, caplog):
    before = broken.start_attempts()
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        with pytest.raises(NoHostAvailable) as info:
            Sandbox(hosts=[broken.url])
    message = str(info.value)
    assert broken.url in message and RUNTIME_MESSAGE in message and "To fix:" in message
    assert broken.start_attempts() - before == 1          # one container, the start-up check
    assert warnings_of(caplog) == []                      # the error says it, once


@pytest.mark.skipif(not os.path.exists(GVISOR), reason=f"{GVISOR} is not installed (apt install runsc)")
def test_gvisor_without_network_none_fails_at_construction_with_that_fix(engine):
    # Issue 15's host: the real runsc, registered without --network=none, refuses every start.
    with pytest.raises(NoHostAvailable) as info:
        Sandbox(hosts=[engine.url], runtime=GVISOR_WITH_NETWORK)
    message = str(info.value)
    assert "network namespace" in message                  # the runtime's own words
    assert "--network=none" in message and "daemon.json" in message


def test_run_many_on_a_broken_host_returns_every_job_at_once(broken, caplog):
    with Sandbox(hosts=[broken.url], startup_check=(), slots=4, probe_after_s=60) as sb:
        before = broken.start_attempts()
        t0 = time.monotonic()
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            results = sb.run_many(jobs(100))
        elapsed = time.monotonic() - t0
        assert broken.start_attempts() - before <= K
        assert sb.stats()[broken.url]["start_failures"] <= K
    assert len(results) == 100 and all(r.status == "infra_error" and not r.passed for r in results)
    assert all(broken.url in r.error and RUNTIME_MESSAGE in r.error and "not judged" in r.error for r in results)
    logged = warnings_of(caplog)
    assert len(logged) == 1 and "DOWN" in logged[0] and broken.url in logged[0]
    assert elapsed < 2.0, f"100 jobs on a broken host took {elapsed:.2f} s"


def test_a_bad_image_reference_takes_the_host_out_too(docker_ready, caplog):
    with Sandbox(slots=2, startup_check=()) as sb:
        host = sb.pools[0].host
        # Not a public knob: the only way to point a language at an image that is not there.
        sb._image_refs[(host, "python")] = "proctor-test/no-such-image:1"
        with caplog.at_level(logging.WARNING, logger=LOGGER):
            results = sb.run_many(jobs(100))
        assert sb.stats()[host]["start_failures"] <= K and not sb.health()[host].up
    assert all(r.status == "infra_error" and "no-such-image" in r.error for r in results)
    assert len(warnings_of(caplog)) == 1


def test_warmup_on_a_broken_host_says_it_started_nothing(broken):
    with Sandbox(hosts=[broken.url], startup_check=(), slots=2) as sb:
        with pytest.raises(NoHostAvailable, match="warmup: no sandbox host started a container") as info:
            sb.warmup(["python"])
    assert RUNTIME_MESSAGE in str(info.value) and "To fix:" in str(info.value)


# --------------------------------------------------------------------------- two hosts, one broken

def test_two_hosts_one_broken_at_start_serve_every_job_from_the_other(broken, caplog):
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        # probe_after_s: no probe falls due during the batch (it would be one more start, rightly).
        with Sandbox(hosts=["unix:///var/run/docker.sock", broken.url], slots=2, probe_after_s=60) as sb:
            before = broken.start_attempts()
            results = sb.run_many(jobs(100))
            assert broken.start_attempts() == before       # a down host is not tried per job
            health = sb.health()
    assert all(r.passed for r in results) and {r.host for r in results} == {"unix:///var/run/docker.sock"}
    assert not health[broken.url].up and RUNTIME_MESSAGE in health[broken.url].cause
    logged = warnings_of(caplog)
    assert len(logged) == 1 and broken.url in logged[0] and "other 1 host" in logged[0]


def test_a_host_that_breaks_mid_run_is_taken_out_and_its_jobs_move(engine, caplog):
    engine.set_broken(False)
    with Sandbox(hosts=["unix:///var/run/docker.sock", engine.url], slots=2, spare=0, probe_after_s=60) as sb:
        engine.set_broken(True)
        try:
            before = engine.start_attempts()
            # A new memory budget needs new containers: every start on the second host now fails.
            with caplog.at_level(logging.WARNING, logger=LOGGER):
                results = sb.run_many(jobs(60, limits=Limits(memory_mb=300)))
            assert engine.start_attempts() - before <= K
        finally:
            engine.set_broken(False)
        assert not sb.health()[engine.url].up
    assert all(r.passed for r in results), {r.status for r in results}
    logged = warnings_of(caplog)
    assert len(logged) == 1 and "DOWN" in logged[0] and engine.url in logged[0]


# --------------------------------------------------------------------------- coming back

def test_reset_host_probes_now_and_brings_a_fixed_host_back(broken, caplog):
    caplog.set_level(logging.WARNING, logger=LOGGER)
    with Sandbox(hosts=[broken.url], startup_check=(), slots=2) as sb:
        assert all(r.infra_error for r in sb.run_many(jobs(10)))
        before = broken.start_attempts()
        [still] = sb.reset_host()                           # not fixed yet: one probe, still down
        assert not still.up and broken.start_attempts() - before == 1
        broken.set_broken(False)
        [health] = sb.reset_host(broken.url)
        assert health.up
        assert all(r.passed for r in sb.run_many(jobs(10)))
    # One warning per change of state (down, back up); the failed probe changed nothing.
    down, up = warnings_of(caplog)
    assert "DOWN" in down and "back UP" in up and "10 job(s) returned infra_error" in up


def test_a_down_host_is_probed_by_itself_after_its_back_off(broken):
    with Sandbox(hosts=[broken.url], startup_check=(), slots=2, probe_after_s=0.5) as sb:
        assert all(r.infra_error for r in sb.run_many(jobs(5)))
        broken.set_broken(False)
        assert all(r.infra_error for r in sb.run_many(jobs(5)))   # back-off not over: no start tried
        time.sleep(0.6)
        # The first job after the back-off starts the probe; the others wait for its answer.
        results = sb.run_many(jobs(5))
    assert all(r.passed for r in results), [r.error for r in results]


def test_reset_host_names_an_unknown_host(docker_ready):
    with Sandbox(slots=1) as sb:
        with pytest.raises(Exception, match="no host 'tcp://nowhere:1'"):
            sb.reset_host("tcp://nowhere:1")
        assert [h.up for h in sb.reset_host()] == [True]     # an up host is left alone


@pytest.mark.parametrize("options,match", [
    ({"startup_check": "python"}, "sequence of languages"),
    ({"startup_check": ("cobol",)}, "sequence of languages"),
    ({"down_after": 0}, "down_after"),
    ({"probe_after_s": -1}, "probe_after_s"),
])
def test_bad_breaker_options_are_refused_by_name(docker_ready, options, match):
    with pytest.raises(SandboxError, match=match):
        Sandbox(slots=1, **options)


# --------------------------------------------------------------------------- the breaker itself

class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_breaker_lets_at_most_k_starts_through_on_an_unproven_host():
    cond, changes = threading.Condition(), []
    b = Breaker("h", cond, down_after=3, on_change=lambda br, up: changes.append(up))
    assert [b.admit_start(wait=False) for _ in range(4)] == [True, True, True, False]
    b.start_failed("boom")
    assert b.up and not b.admit_start(wait=False)          # 2 in flight + 1 failure = K
    b.start_failed("boom")
    b.start_failed("boom")
    assert not b.up and changes == [False] and b.failures == 3
    assert not b.admit_start()                              # down: no permit, no waiting


def test_breaker_on_a_proven_host_does_not_limit_starts_until_one_fails():
    b = Breaker("h", threading.Condition(), down_after=2)
    b.checked(True)
    assert all(b.admit_start(wait=False) for _ in range(10))
    b.start_failed("boom")
    assert not b.admit_start(wait=False)                    # 9 still in flight, gate is 2 - 1


def test_breaker_backs_off_doubling_and_a_probe_brings_it_back():
    clock, changes = Clock(), []
    b = Breaker("h", threading.Condition(), down_after=1, probe_after_s=5.0, clock=clock,
                on_change=lambda br, up: changes.append(up))
    b.trip("no runtime")
    assert not b.probe_due() and b.seconds_to_probe() == 5.0
    clock.now += 5.0
    assert b.begin_probe() and not b.begin_probe()          # one probe at a time
    b.end_probe(False, "still no runtime")
    assert b.seconds_to_probe() == 10.0 and b.health().cause == "still no runtime"
    clock.now += 3.0
    assert not b.begin_probe() and b.begin_probe(force=True)
    b.jobs_refused = 7
    b.end_probe(True)
    assert b.up and changes == [False, True] and b.last_down_for_s == 8.0
    assert b.health().cause == "" and b.jobs_refused == 0


def test_fixes_name_what_to_do():
    gvisor = start_fix("OCI runtime start failed: cannot run with network enabled in root network namespace", "runsc")
    assert "--network=none" in gvisor and "daemon.json" in gvisor
    assert "proctor images build" in start_fix("sandbox image proctor/python:x is not built", None)
    assert "--add-runtime" in start_fix("Unknown runtime specified kata", "kata")
