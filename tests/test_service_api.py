"""``proctor sandbox serve``'s own API and its guards, against the real sandbox: the token,
malformed input, the body limit, the bounded queue (429), a client that leaves mid-batch,
sessions over HTTP, /health and /metrics."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import pytest

from service_server import REPO, ServiceProcess

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture(scope="module")
def service(docker_ready, tmp_path_factory):
    s = ServiceProcess(tmp_path_factory.mktemp("api"), "--pool-size", "2")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def small(docker_ready, tmp_path_factory):
    """A service with room for little: 1 slot, 3 pending jobs, batches of 2 at a time, 1 session, 64 KiB bodies."""
    s = ServiceProcess(tmp_path_factory.mktemp("small"), "--pool-size", "1", "--max-pending", "3",
                       "--batch-window", "2", "--max-sessions", "1", "--max-body-mb", "1")
    yield s
    s.stop()


def job(code: str, tests: str | None = None, **limits) -> dict:
    doc: dict = {"language": "python", "code": code}
    if tests is not None:
        doc["tests"] = tests
    if limits:
        doc["limits"] = limits
    return doc


def ndjson(response: httpx.Response) -> list[dict]:
    return [json.loads(line) for line in response.text.splitlines() if line.strip()]


# --------------------------------------------------------------------------- the token

def test_every_route_but_ping_needs_the_token(service):
    assert httpx.get(f"{service.url}/v1/ping").text == "pong"
    for method, path in (("GET", "/health"), ("GET", "/metrics"), ("POST", "/run_code"), ("POST", "/v1/jobs"),
                         ("POST", "/v1/sessions"), ("POST", "/run_jupyter")):
        assert httpx.request(method, f"{service.url}{path}", json={}).status_code == 401, path
        wrong = {"Authorization": "Bearer " + "x" * 32}
        assert httpx.request(method, f"{service.url}{path}", json={}, headers=wrong).status_code == 401, path
    basic = httpx.get(f"{service.url}/health", auth=("anyone", service.token))
    assert basic.status_code == 200
    assert httpx.get(f"{service.url}/health", auth=("anyone", "nope")).status_code == 401


def test_refuses_to_listen_off_loopback_without_a_token():
    proc = subprocess.run([sys.executable, "-m", "proctor", "sandbox", "serve", "--host", "0.0.0.0", "--port", "1"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "without a token" in proc.stderr and "--token-file" in proc.stderr


def test_a_token_file_others_can_read_is_refused(tmp_path):
    token = tmp_path / "token"
    token.write_text("t" * 32)
    token.chmod(0o644)
    proc = subprocess.run([sys.executable, "-m", "proctor", "sandbox", "serve", "--port", "1", "--token-file",
                           str(token)], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "chmod 600" in proc.stderr


# --------------------------------------------------------------------------- malformed input

def test_malformed_input_names_the_field(service):
    with service.client() as c:
        r = c.post("/run_code", json={"language": "python"})
        assert r.status_code == 422 and "code" in r.text
        r = c.post("/run_code", json={"language": "cobol", "code": "x"})
        assert r.status_code == 422 and "language" in r.text
        r = c.post("/run_code", json={"language": "python", "code": "x", "run_timeout": -1})
        assert r.status_code == 422 and "run_timeout" in r.text
        r = c.post("/v1/jobs", json={"jobs": [job("pass"), job("pass", cpu_s=0)]})
        assert r.status_code == 422 and "jobs[1]" in r.text and "cpu_s" in r.text
        r = c.post("/v1/jobs", json={"jobs": [job("pass"), {"language": "python", "code": "", "colour": 1}]})
        assert r.status_code == 422 and "jobs[1].colour" in r.text
        r = c.post("/v1/jobs", content=b"{not json", headers={"content-type": "application/json"})
        assert r.status_code == 422 and "not JSON" in r.text
        r = c.post("/v1/jobs", json={"jobs": []})
        assert r.status_code == 422 and "jobs" in r.text
        r = c.post("/v1/sessions", json={"language": "python", "limits": {"cpu_s": "fast"}})
        assert r.status_code == 422 and "cpu_s" in r.text


def test_a_body_past_the_limit_is_413(small):
    with small.client() as c:
        r = c.post("/run_code", json={"language": "python", "code": "#" + "x" * (2 << 20)})
        assert r.status_code == 413 and "larger than" in r.text

        def chunks():   # no Content-Length: the limit holds as the body arrives
            yield b'{"language": "python", "code": "#'
            for _ in range(40):
                yield b"y" * 65536
            yield b'"}'

        r = c.post("/run_code", content=chunks(), headers={"content-type": "application/json"})
        assert r.status_code == 413


# --------------------------------------------------------------------------- the queue

def test_a_full_queue_answers_429_with_retry_after(small):
    slow = [job("import time\nt = time.time()\nwhile time.time() - t < 1.5: pass", cpu_s=5, wall_s=10)] * 2
    with small.client() as c, httpx.Client(base_url=small.url, headers=small.headers, timeout=120) as c2:
        with c.stream("POST", "/v1/jobs", json={"jobs": slow}) as held:   # holds 2 of the 3 places
            assert held.status_code == 200
            r = c2.post("/v1/jobs", json={"jobs": slow})                   # wants 2 more
            assert r.status_code == 429 and r.headers["retry-after"] == "1"
            assert "pending" in r.json()["detail"]
            assert small.metric("proctor_sandbox_queue_depth") == 2
            ok = c2.post("/run_code", json={"language": "python", "code": "print(1)"})   # the third place
            assert ok.status_code == 200 and ok.json()["status"] == "Success"
            lines = [json.loads(x) for x in held.iter_lines() if x.strip()]
        assert [d.get("index") for d in lines] == [0, 1, None] and lines[-1] == {"done": 2}
    assert small.metric("proctor_sandbox_queue_depth") == 0
    assert small.metric("proctor_sandbox_rejected_requests_total", reason="full") >= 1


def test_sessions_are_bounded(small):
    with small.client() as c:
        first = c.post("/v1/sessions", json={})
        assert first.status_code == 201
        second = c.post("/v1/sessions", json={})
        assert second.status_code == 429 and "sessions" in second.json()["detail"]
        assert c.delete(f"/v1/sessions/{first.json()['id']}").status_code == 204
        third = c.post("/v1/sessions", json={})
        assert third.status_code == 201
        c.delete(f"/v1/sessions/{third.json()['id']}")


def test_a_client_that_leaves_mid_batch_leaves_no_work_behind(small):
    """20 jobs of 1 CPU-second each; the client reads one result and hangs up: the rest never run."""
    before = small.metric("proctor_sandbox_jobs_total", verdict="passed", api="jobs")
    spin = job("import time\nt = time.process_time()\nwhile time.process_time() - t < 1.0: pass", cpu_s=5, wall_s=20)
    with httpx.Client(base_url=small.url, headers=small.headers, timeout=120) as c:
        with c.stream("POST", "/v1/jobs", json={"jobs": [spin] * 20}) as r:
            for line in r.iter_lines():
                if line.strip():
                    break   # one result, then the connection closes
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and small.metric("proctor_sandbox_queue_depth") != 0:
        time.sleep(0.5)
    assert small.metric("proctor_sandbox_queue_depth") == 0
    time.sleep(4)   # anything still queued would have run by now (1 slot, 1 s per job)
    ran = small.metric("proctor_sandbox_jobs_total", verdict="passed", api="jobs") - before
    assert 1 <= ran <= 4, f"{ran} jobs ran after the client left a 20-job batch"
    with small.client() as c:   # and the pool is whole: a new batch runs at once
        lines = ndjson(c.post("/v1/jobs", json={"jobs": [job("print(1)")]}))
        assert lines[0]["result"]["status"] == "passed"


# --------------------------------------------------------------------------- jobs, sessions, health

def test_jobs_stream_in_job_order_with_library_verdicts(service):
    jobs = [job("def f(): return 1", "assert f() == 1"), job("def f(): return 2", "assert f() == 1"),
            job("import time\ntime.sleep(0.8)\ndef f(): return 1", "assert f() == 1"),
            job("while True: pass", cpu_s=1, wall_s=5), job("raise SystemExit(4)")]
    with service.client() as c:
        lines = ndjson(c.post("/v1/jobs", json={"jobs": jobs}))
    assert [d.get("index") for d in lines[:-1]] == list(range(5)) and lines[-1] == {"done": 5}
    assert [d["result"]["status"] for d in lines[:-1]] == ["passed", "failed", "passed", "timeout", "failed"]


def test_sessions_over_http(service):
    with service.client() as c:
        a = c.post("/v1/sessions", json={"limits": {"cpu_s": 2, "wall_s": 5}}).json()["id"]
        b = c.post("/v1/sessions", json={}).json()["id"]
        assert c.post(f"/v1/sessions/{a}/run", json={"code": "secret = 'A'; open('f', 'w').write('A')"}).json()[
            "status"] == "ok"
        # b is another interpreter in another container: a's names and files are not there
        r = c.post(f"/v1/sessions/{b}/run", json={"code": "import os\n(globals().get('secret'), os.listdir('.'))"})
        assert r.json()["value"] == "(None, [])"
        r = c.post(f"/v1/sessions/{a}/run", json={"code": "secret + open('f').read()"})
        assert r.json()["value"] == "'AA'"
        spin = c.post(f"/v1/sessions/{a}/run", json={"code": "while True: pass"}).json()
        assert spin["status"] == "timeout" and spin["reset"]
        assert c.post(f"/v1/sessions/{a}/files", json={"files": {"d/x.bin": {"base64": "AAEC"}}}).status_code == 204
        got = c.post(f"/v1/sessions/{a}/files/get", json={"paths": ["d/x.bin", "missing"]}).json()["files"]
        assert got == {"d/x.bin": "AAEC", "missing": None}
        assert c.delete(f"/v1/sessions/{a}").status_code == 204
        assert c.post(f"/v1/sessions/{a}/run", json={"code": "1"}).status_code == 404
        assert c.get(f"/v1/sessions/{'n' * 24}").status_code == 404
        c.delete(f"/v1/sessions/{b}")


def test_an_idle_session_is_reclaimed(service):
    with service.client() as c:
        sid = c.post("/v1/sessions", json={"limits": {"idle_ttl_s": 1}}).json()["id"]
        assert c.post(f"/v1/sessions/{sid}/run", json={"code": "x = 1"}).json()["status"] == "ok"
        time.sleep(2.5)
        r = c.post(f"/v1/sessions/{sid}/run", json={"code": "x"})
        assert r.status_code in (404, 410)
        assert r.status_code == 404 or "idle" in r.json()["detail"]


def test_health_and_metrics(service):
    with service.client() as c:
        health = c.get("/health").json()
        assert health["status"] == "ok" and health["slots"] == 2
        assert health["images"] and all(h["up"] for h in health["hosts"].values())
        assert {"pending", "max"} <= set(health["queue"])
        c.post("/run_code", json={"language": "python", "code": "print(1)"})
        text = c.get("/metrics").text
    assert 'proctor_sandbox_jobs_total{api="run_code",verdict="passed"}' in text
    for name in ("proctor_sandbox_queue_depth", "proctor_sandbox_job_seconds_bucket", "proctor_sandbox_pool_slots",
                 "proctor_sandbox_cache_hits", "proctor_sandbox_sessions_open"):
        assert name in text


def test_run_code_maps_richer_verdicts_faithfully(service):
    with service.client() as c:
        def post(**kw):
            return c.post("/run_code", json={"language": "python", **kw}).json()

        echo = post(code="print(input())", stdin="hi")
        assert echo["status"] == "Success" and echo["proctor"]["status"] == "passed"
        hog = post(code="x = bytearray(400 << 20)\nprint(len(x))", memory_limit_MB=128)
        assert hog["status"] == "Failed" and hog["proctor"]["status"] == "memory"
        assert hog["run_result"]["status"] == "Finished" and hog["run_result"]["return_code"] != 0
        flood = post(code="import sys\nwhile True: sys.stdout.write('x' * 65536)")
        assert flood["status"] == "Failed" and flood["proctor"]["status"] == "output_limit"
        syntax = post(code="def f(:\n  pass")
        assert syntax["status"] == "Failed" and syntax["run_result"]["return_code"] == 1
        assert syntax["proctor"]["status"] == "compile_error" and "SyntaxError" in syntax["run_result"]["stderr"]
