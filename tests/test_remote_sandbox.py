"""`RemoteSandbox` against ``proctor sandbox serve``: the library's verdicts, in job order, through
run, run_many and imap; sessions; a lost service is ``infra_error``, never a wrong answer; the code
env switches to a service by configuration."""

from __future__ import annotations

import threading

import pytest

from proctor.sandbox import Job, Limits, SessionClosed, SessionLimits
from proctor.sandbox.remote import RemoteSandbox
from service_server import ServiceProcess, free_port

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def service(docker_ready, tmp_path_factory):
    s = ServiceProcess(tmp_path_factory.mktemp("remote"), "--pool-size", "2", "--batch-window", "4")
    yield s
    s.stop()


@pytest.fixture
def remote(service):
    with RemoteSandbox(service.url, token=service.token, retries=1, backoff_s=0.1) as sb:
        yield sb


def mixed_jobs(n: int) -> list[Job]:
    kinds = [("def f(): return 1", "assert f() == 1"), ("def f(): return 2", "assert f() == 1"),
             ("def f(: pass", "assert f() == 1"), ("def f(): raise KeyError(1)", "f()")]
    return [Job(language="python", code=f"# {i}\n" + kinds[i % 4][0], tests=kinds[i % 4][1]) for i in range(n)]


def test_run_many_gives_the_library_verdicts_in_job_order(remote, sandbox):
    jobs = mixed_jobs(12) + [Job(language="python", code="while True: pass", limits=Limits(cpu_s=1, wall_s=5))]
    local = sandbox.run_many(jobs)
    far = remote.run_many(jobs)
    assert [r.status for r in far] == [r.status for r in local]
    assert [r.status for r in far][:4] == ["passed", "failed", "compile_error", "runtime_error"]
    assert far[-1].status == "timeout"


def test_imap_streams_and_reports_progress(remote):
    seen = []
    out = list(remote.imap(iter(mixed_jobs(9)), lambda done, total: seen.append((done, total)), max_pending=4))
    assert [r.passed for r in out] == [i % 4 == 0 for i in range(9)]
    assert seen[-1] == (9, None) and [d for d, _ in seen] == list(range(1, 10))
    assert remote.run(mixed_jobs(1)[0]).passed


def test_files_and_fetch_files_travel(remote):
    job = Job(language="python", code="open('out.bin','wb').write(open('in.bin','rb').read()[::-1])",
              files={"in.bin": b"\x00\x01\xff"}, fetch_files=("out.bin",))
    r = remote.run(job)
    assert r.passed and r.files == {"out.bin": b"\xff\x01\x00"}


def test_sessions_keep_state_and_close(remote):
    with remote.session(limits=SessionLimits(cpu_s=2, wall_s=5)) as s:
        assert s.run("import math\nx = 3").status == "ok"
        assert s.run("math.factorial(x)").value == "6"
        s.put_files({"a.txt": "hello"})
        assert s.run("open('a.txt').read().upper()").value == "'HELLO'"
        assert s.get_files(["a.txt", "b"]) == {"a.txt": b"hello", "b": None}
        err = s.run("1/0")
        assert err.status == "error" and "ZeroDivisionError" in err.error
    with pytest.raises(SessionClosed):
        s.run("x")


def test_a_service_that_cannot_be_reached_is_infra_error():
    with RemoteSandbox(f"http://127.0.0.1:{free_port()}", token="t" * 20, retries=1, backoff_s=0.05,
                       connect_timeout_s=2) as sb:
        results = sb.run_many(mixed_jobs(3))
    assert [r.status for r in results] == ["infra_error"] * 3
    assert all("failed after 2 attempts" in r.error for r in results)


def test_a_service_that_dies_mid_batch_gives_infra_error_for_the_rest(docker_ready, tmp_path):
    service = ServiceProcess(tmp_path, "--pool-size", "1", "--batch-window", "1")
    slow = [Job(language="python", code=f"# {i}\nimport time\ntime.sleep(0.7)") for i in range(8)]
    got = []
    try:
        with RemoteSandbox(service.url, token=service.token, retries=0) as sb:
            stream = sb.imap(slow)
            got.append(next(stream))
            threading.Thread(target=service.kill).start()   # the service dies mid-batch
            got.extend(stream)
    finally:
        service.stop()
    assert len(got) == 8 and got[0].passed
    statuses = {r.status for r in got[1:]}
    assert statuses <= {"passed", "infra_error"} and "infra_error" in statuses   # never a wrong answer


def test_a_wrong_token_is_a_clear_error(service):
    from proctor.sandbox import SandboxError

    with RemoteSandbox(service.url, token="w" * 32, retries=0) as sb:
        with pytest.raises(SandboxError, match="refused the token"):
            sb.session()


def test_the_code_env_judges_on_the_service_by_configuration(service):
    from proctor.envs import make_env
    from proctor.envs.registry import _humaneval_reference

    env = make_env("proctor/HumanEval-v0", sandbox={"url": service.url, "token": service.token})
    try:
        verifier = env.rubric.verifier
        assert type(verifier.sandbox).__name__ == "RemoteSandbox"
        task = env.source[0]

        right = _humaneval_reference(task)
        verdicts = verifier.verify_batch([task, task], [right, "```python\ndef nothing(): pass\n```"])
        assert [v.correct for v in verdicts] == [True, False]
    finally:
        env.close()
