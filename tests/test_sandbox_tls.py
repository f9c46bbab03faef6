"""Remote engines without handing out root: TLS client certificates, ssh://, no plain TCP.

The TLS tests start a second dockerd (tests/second_dockerd.py) on a loopback port with
certificates made here, copy the python sandbox image into it (docker save | load),
and always tear it down.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import pytest

from proctor.sandbox import EngineUnavailable, Job, Limits, Sandbox, SandboxError, TLSConfig
from proctor.sandbox import hosts
from proctor.sandbox.engine import connect
from proctor.sandbox.images import require_image

from second_dockerd import SecondEngine, client_dir, make_ca

LOCAL = "unix:///var/run/docker.sock"
FAST = Limits(wall_s=10, cpu_s=5, memory_mb=128)


# ------------------------------------------------------------------ host policy (no engine needed)

def test_plain_tcp_is_refused_without_insecure_tcp(monkeypatch):
    monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)
    with pytest.raises(SandboxError, match="plain TCP") as info:
        Sandbox(hosts=["tcp://127.0.0.1:9"])
    assert not isinstance(info.value, EngineUnavailable)   # refused before any connection
    assert "insecure_tcp=True" in str(info.value) and "TLSConfig" in str(info.value)
    # DOCKER_HOST is held to the same rule.
    monkeypatch.setenv("DOCKER_HOST", "tcp://127.0.0.1:9")
    with pytest.raises(SandboxError, match="plain TCP"):
        connect()


def test_insecure_tcp_warns_once_per_host(monkeypatch, caplog):
    monkeypatch.delenv("DOCKER_TLS_VERIFY", raising=False)
    url = "tcp://127.0.0.1:7"   # nothing listens: the warning comes before the connection fails
    hosts._warned.discard(url)
    with caplog.at_level(logging.WARNING, logger="proctor.sandbox"):
        for _ in range(3):
            with pytest.raises(EngineUnavailable, match="127.0.0.1:7"):
                Sandbox(hosts=[url], insecure_tcp=True)
    warnings = [r for r in caplog.records if "plain TCP" in r.getMessage() and url in r.getMessage()]
    assert len(warnings) == 1


def test_ssh_hosts_go_through_the_ssh_client():
    target = hosts.resolve("ssh://sandbox@127.0.0.1:1")
    assert target.transport == "ssh" and target.tls is None
    # Nothing listens on port 1: the ssh client fails, and the error names the host.
    with pytest.raises(EngineUnavailable, match="ssh://sandbox@127.0.0.1:1"):
        connect("ssh://sandbox@127.0.0.1:1")


def test_unknown_schemes_and_missing_ports_say_what_to_use():
    with pytest.raises(SandboxError, match="unknown scheme 'ftp'"):
        hosts.resolve("ftp://sandbox-1:2376")
    with pytest.raises(SandboxError, match="needs a host and a port"):
        hosts.resolve("tcp://sandbox-1", insecure_tcp=True)


def test_docker_cert_path_convention_per_host(tmp_path, monkeypatch):
    ca = tmp_path / "ca"
    make_ca(ca, "convention-ca")
    shared = client_dir(ca, tmp_path / "certs")
    own = client_dir(ca, tmp_path / "certs" / "sandbox-2:2376")
    env = {"DOCKER_TLS_VERIFY": "1", "DOCKER_CERT_PATH": str(tmp_path / "certs")}
    assert hosts.resolve("tcp://sandbox-1:2376", env=env).tls == shared
    assert hosts.resolve("tcp://sandbox-2:2376", env=env).tls == own     # its own sub-directory wins
    assert hosts.resolve("tcp://sandbox-2:2376", env={}, insecure_tcp=True).tls is None
    explicit = {"sandbox-1:2376": own}
    assert hosts.resolve("tcp://sandbox-1:2376", tls=explicit, env=env).tls == own
    with pytest.raises(SandboxError, match="lacks ca.pem"):
        TLSConfig.from_dir(tmp_path)


# ------------------------------------------------------------------ a real TLS engine

@pytest.fixture(scope="module")
def tls_engine(docker_ready):
    with SecondEngine(tls=True) as engine:
        local = connect()
        engine.load_images([require_image(local, "python")], source=local)
        local.close()
        yield engine


def test_tls_engine_runs_jobs(tls_engine):
    with Sandbox(hosts=[tls_engine.url], tls=tls_engine.client_tls, slots=1) as sb:
        ok = sb.run(Job("python", "def f():\n    return 2\n", tests="assert f() == 2\n", limits=FAST))
        bad = sb.run(Job("python", "def f():\n    return 3\n", tests="assert f() == 2\n", limits=FAST))
    assert ok.status == "passed" and ok.host == tls_engine.url, ok
    assert bad.status == "failed" and bad.host == tls_engine.url, bad


def test_tls_engine_from_docker_env_convention(tls_engine, monkeypatch):
    certs = Path(tls_engine.client_tls.ca_cert).parent
    monkeypatch.setenv("DOCKER_TLS_VERIFY", "1")
    monkeypatch.setenv("DOCKER_CERT_PATH", str(certs))
    with Sandbox(hosts=[tls_engine.url], slots=1) as sb:
        assert sb.run(Job("python", "print('via env')", limits=FAST)).stdout == "via env\n"


def test_tls_engine_refuses_clients_it_did_not_certify(tls_engine, tmp_path):
    rogue_ca = tmp_path / "rogue-ca"
    make_ca(rogue_ca, "rogue-ca")
    rogue = client_dir(rogue_ca, tmp_path / "rogue-client")
    # A client certificate from another CA: the engine refuses the handshake.
    with pytest.raises(EngineUnavailable, match=str(tls_engine.port)):
        connect(tls_engine.url, tls=TLSConfig(ca_cert=tls_engine.client_tls.ca_cert,
                                              client_cert=rogue.client_cert, client_key=rogue.client_key))
    # Our certificate, but trusting another CA: we refuse the engine.
    with pytest.raises(EngineUnavailable, match="(?i)certificate"):
        connect(tls_engine.url, tls=TLSConfig(ca_cert=rogue.ca_cert, client_cert=tls_engine.client_tls.client_cert,
                                              client_key=tls_engine.client_tls.client_key))
    # No certificate at all, even when plain TCP is allowed: no answer.
    with pytest.raises(EngineUnavailable):
        connect(tls_engine.url, insecure_tcp=True)


def test_cli_reaches_the_tls_engine_with_a_cert_path(tls_engine, tmp_path):
    from typer.testing import CliRunner

    from proctor.cli.app import app

    certs = str(Path(tls_engine.client_tls.ca_cert).parent)
    runner = CliRunner()
    listed = runner.invoke(app, ["images", "list", "--host", tls_engine.url, "--cert-path", certs])
    assert listed.exit_code == 0, listed.output
    assert "python" in listed.output and "present" in listed.output
    prog = tmp_path / "prog.py"
    prog.write_text("print(6 * 7)\n")
    ran = runner.invoke(app, ["sandbox", "run", "--host", tls_engine.url, "--cert-path", certs, "--json", str(prog)])
    assert ran.exit_code == 0, ran.output
    result = json.loads(ran.output)
    assert result["stdout"] == "42\n" and result["host"] == tls_engine.url
    # Without certificates the CLI refuses the plain-TCP URL and says why.
    refused = runner.invoke(app, ["images", "list", "--host", tls_engine.url])
    assert refused.exit_code != 0 and "plain TCP" in refused.output


def test_tls_fleet_survives_an_engine_killed_mid_batch(docker_ready):
    """Local engine + TLS engine; the TLS one dies mid-batch; nothing is misscored."""
    with SecondEngine(tls=True) as engine:
        local = connect()
        engine.load_images([require_image(local, "python")], source=local)
        local.close()
        # Each job takes ~0.3 s, so both hosts have jobs in flight when one dies.
        right = "import time\ntime.sleep(0.3)\ndef f(x):\n    return x * 2\n"
        wrong = "import time\ntime.sleep(0.3)\ndef f(x):\n    return x + 2\n"
        jobs, expected = [], []
        for i in range(40):
            good = i % 3 != 0
            jobs.append(Job("python", (right if good else wrong) + f"# job {i}\n",
                            tests=f"assert f({i + 3}) == {2 * (i + 3)}\n", limits=FAST))
            expected.append("passed" if good else "failed")
        killed = threading.Event()
        served_before_kill: set[str] = set()

        with Sandbox(hosts=[LOCAL, engine.url], tls=engine.client_tls, slots=2, retries=2) as sb:
            sb.warmup(["python"], limits=FAST)

            def progress(done: int, total: int) -> None:
                if done == 10 and not killed.is_set():
                    served_before_kill.update(h for h, s in sb.stats().items() if s["started"])
                    engine.kill()
                    killed.set()

            results = sb.run_many(jobs, progress=progress)
        assert killed.is_set()
    misscored = [(i, e, r.status, r.error[-200:]) for i, (e, r) in enumerate(zip(expected, results))
                 if r.status not in (e, "infra_error")]
    assert misscored == [], misscored
    assert len(results) == len(jobs)
    hosts_used = {r.host for r in results}
    assert engine.url in hosts_used and LOCAL in hosts_used, hosts_used   # both engines served the batch
    assert engine.url in served_before_kill
    retried = [r for r in results if r.attempts > 1]
    assert retried, "no job was in flight on the engine when it died: the kill proved nothing"
    # Jobs caught on the dead engine moved to the live one and were judged there; any
    # job not judged says so (infra_error) and names the engine that failed it.
    assert any(r.host == LOCAL and r.status in ("passed", "failed") for r in retried), \
        [(r.host, r.status, r.error[-200:]) for r in retried]
    for r in results:
        if r.status == "infra_error":
            assert engine.url in r.error and not r.passed, r.error
