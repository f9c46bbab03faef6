"""A sandbox on an engine reached over ssh://: a real sshd on a loopback port, keys made here.

The sshd runs with a config, host key, client key and known_hosts in a temp dir; the
ssh client finds them through a wrapper named ``ssh`` first on PATH (the Docker SDK
runs ``ssh -l USER -p PORT -- HOST docker system dial-stdio``), so nothing in ~/.ssh or
/etc/ssh is read or changed. The engine at the far end is this machine's own. Skips,
naming what is missing, without openssh-server (``scripts/setup.sh`` installs it).
"""

from __future__ import annotations

import getpass
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Iterator

import pytest

from proctor.sandbox import EngineUnavailable, Job, Limits, Sandbox
from proctor.sandbox.engine import connect

pytestmark = pytest.mark.docker

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
SSH = shutil.which("ssh")
KEYGEN = shutil.which("ssh-keygen")
FAST = Limits(wall_s=10, cpu_s=5, memory_mb=128)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _keygen(path: Path) -> str:
    subprocess.run([KEYGEN, "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)
    return path.with_suffix(".pub").read_text().strip()


class SSHServer:
    """An sshd on 127.0.0.1 that lets one key in as the current user; stopped by close()."""

    def __init__(self, root: Path) -> None:
        self.root, self.port, self.user = root, _free_port(), getpass.getuser()
        self.host_pub = _keygen(root / "host_key")
        self.client_pub = _keygen(root / "client_key")
        (root / "authorized_keys").write_text(self.client_pub + "\n")
        config = root / "sshd_config"
        config.write_text("\n".join([
            f"Port {self.port}", "ListenAddress 127.0.0.1", f"HostKey {root / 'host_key'}",
            f"PidFile {root / 'sshd.pid'}", f"AuthorizedKeysFile {root / 'authorized_keys'}",
            "PubkeyAuthentication yes", "PasswordAuthentication no", "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password", "UsePAM no", "StrictModes no", f"AllowUsers {self.user}",
        ]) + "\n")
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)   # sshd's privilege-separation directory
        self.log = root / "sshd.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=log, stderr=log)
        self._wait_listening()

    def _wait_listening(self, timeout_s: float = 15.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"sshd exited with {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return
            except OSError:
                time.sleep(0.1)
        self.close()
        raise RuntimeError(f"sshd did not listen on 127.0.0.1:{self.port}: {self.log.read_text()[-2000:]}")

    @property
    def url(self) -> str:
        return f"ssh://{self.user}@127.0.0.1:{self.port}"

    def client_wrapper(self, name: str, known_host_key: str) -> Path:
        """A directory holding an ``ssh`` that uses our key and trusts only ``known_host_key``."""
        d = self.root / name
        d.mkdir()
        (d / "known_hosts").write_text(f"[127.0.0.1]:{self.port} {known_host_key}\n")
        (d / "config").write_text("\n".join([
            "Host 127.0.0.1", f"  IdentityFile {self.root / 'client_key'}", "  IdentitiesOnly yes",
            f"  UserKnownHostsFile {d / 'known_hosts'}", "  GlobalKnownHostsFile /dev/null",
            "  StrictHostKeyChecking yes", "  BatchMode yes", "  ConnectTimeout 10",
        ]) + "\n")
        wrapper = d / "ssh"
        wrapper.write_text(f'#!/bin/sh\nexec {SSH} -F {d / "config"} "$@"\n')
        wrapper.chmod(0o755)
        return d

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def sshd(docker_ready, tmp_path_factory) -> Iterator[SSHServer]:
    missing = [what for what, path in (("openssh-server (sshd)", SSHD), ("ssh", SSH), ("ssh-keygen", KEYGEN))
               if not path or not os.access(path, os.X_OK)]
    if missing:
        pytest.skip(f"{', '.join(missing)} not installed: `bash scripts/setup.sh` installs openssh-server")
    server = SSHServer(tmp_path_factory.mktemp("sshd"))
    yield server
    server.close()


def _on_path(monkeypatch, directory: Path) -> None:
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ['PATH']}")


def test_a_job_runs_on_an_engine_reached_over_ssh(sshd, monkeypatch):
    _on_path(monkeypatch, sshd.client_wrapper("trusting", sshd.host_pub))
    with Sandbox(hosts=[sshd.url], slots=1, spare=0) as sb:
        results = sb.run_many([Job("python", "print(6 * 7)", limits=FAST),
                               Job("python", "def f():\n    return 1\n", tests="assert f() == 2\n", limits=FAST)])
    assert [r.status for r in results] == ["passed", "failed"], [(r.status, r.error, r.stderr) for r in results]
    assert results[0].stdout.strip() == "42"
    # The engine answered through our sshd, with our key.
    assert f"Accepted publickey for {sshd.user}" in sshd.log.read_text()


def test_an_engine_whose_host_key_we_do_not_know_is_refused(sshd, monkeypatch):
    stranger = _keygen(sshd.root / "stranger_key")
    _on_path(monkeypatch, sshd.client_wrapper("suspicious", stranger))
    with pytest.raises(EngineUnavailable, match=f"127.0.0.1:{sshd.port}"):
        connect(sshd.url)
