"""A second Docker engine for tests: TLS on a loopback port, certificates made here.

`SecondEngine.start()` makes a CA, a server certificate (for 127.0.0.1) and a client
certificate with the openssl CLI (``cryptography`` is not a declared dependency),
then starts ``dockerd --tlsverify`` on 127.0.0.1 with its own data root, exec root,
pid file, config file and cgroup parent, so nothing of it touches the machine's
engine. `stop()` always leaves nothing behind: the engine, its containerd, its
shims, every process in its containers (found by its cgroup parent and its unique
directory, never by a process name), its mounts and its directory.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Optional

from proctor.sandbox import TLSConfig
from proctor.sandbox.engine import connect
from proctor.sandbox.errors import EngineUnavailable

OPENSSL_DAYS = "2"


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(d: Path, name: str) -> None:
    d.mkdir(parents=True, exist_ok=True)
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca-key.pem", "-out", "ca.pem",
             "-days", OPENSSL_DAYS, "-subj", f"/CN={name}", cwd=d)


def sign(ca_dir: Path, out_dir: Path, prefix: str, cn: str, ext: str) -> None:
    """Key + certificate ``{prefix}key.pem``/``{prefix}cert.pem`` in out_dir, signed by ca_dir's CA."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"{prefix}ext.cnf").write_text(ext)
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{prefix}key.pem", "-out", f"{prefix}req.csr",
             "-subj", f"/CN={cn}", cwd=out_dir)
    _openssl("x509", "-req", "-in", f"{prefix}req.csr", "-CA", str(ca_dir / "ca.pem"),
             "-CAkey", str(ca_dir / "ca-key.pem"), "-CAcreateserial", "-out", f"{prefix}cert.pem",
             "-days", OPENSSL_DAYS, "-extfile", f"{prefix}ext.cnf", cwd=out_dir)
    shutil.copy(ca_dir / "ca.pem", out_dir / "ca.pem")


SERVER_EXT = "subjectAltName = IP:127.0.0.1\nextendedKeyUsage = serverAuth\n"
CLIENT_EXT = "extendedKeyUsage = clientAuth\n"


def client_dir(ca_dir: Path, out_dir: Path) -> TLSConfig:
    """A DOCKER_CERT_PATH-style directory (ca.pem, cert.pem, key.pem) for a client of ca_dir's CA."""
    sign(ca_dir, out_dir, "", "proctor-test-client", CLIENT_EXT)
    return TLSConfig.from_dir(out_dir)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SecondEngine:
    """dockerd with TLS on 127.0.0.1:<free port>; a context manager that always cleans up."""

    def __init__(self) -> None:
        # Short: containerd's socket path under the exec root must fit a sockaddr_un.
        self.dir = Path(tempfile.mkdtemp(prefix="ptls-", dir="/tmp"))
        self.port = free_port()
        self.url = f"tcp://127.0.0.1:{self.port}"
        self.cgroup_parent = f"proctor-tls-{secrets.token_hex(4)}"
        self.ca = self.dir / "ca"
        self.server = self.dir / "server"
        self.client_tls: Optional[TLSConfig] = None
        self.proc: Optional[subprocess.Popen] = None
        self.log = self.dir / "dockerd.log"

    # ------------------------------------------------------------------ start
    def start(self, timeout_s: float = 90.0) -> "SecondEngine":
        make_ca(self.ca, "proctor-test-ca")
        sign(self.ca, self.server, "server-", "127.0.0.1", SERVER_EXT)
        self.client_tls = client_dir(self.ca, self.dir / "client")
        (self.dir / "daemon.json").write_text("{}")
        argv = ["dockerd", "--data-root", str(self.dir / "data"), "--exec-root", str(self.dir / "exec"),
                "--pidfile", str(self.dir / "docker.pid"), "--config-file", str(self.dir / "daemon.json"),
                "-H", self.url, "--tlsverify", "--tlscacert", str(self.server / "ca.pem"),
                "--tlscert", str(self.server / "server-cert.pem"), "--tlskey", str(self.server / "server-key.pem"),
                "--bridge=none", "--iptables=false", "--ip-masq=false", "--ip-forward=false",
                "--userland-proxy=false", "--cgroup-parent", self.cgroup_parent]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                connect(self.url, tls=self.client_tls).close()
                return self
            except EngineUnavailable:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the test's dockerd did not answer on {self.url}; its log:\n"
                                       + self.log.read_text()[-3000:]) from None
                time.sleep(0.3)

    def __enter__(self) -> "SecondEngine":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ images
    def copy_images_from(self, source, refs: list[str]) -> None:
        """docker save | docker load, engine to engine: no rebuild, the same tags and ids."""
        client = connect(self.url, tls=self.client_tls)
        try:
            for ref in refs:
                client.api.load_image(source.api.get_image(ref, chunk_size=1 << 20), quiet=True)
                client.images.get(ref)   # raises if the tag did not arrive
        finally:
            client.close()

    # ------------------------------------------------------------------ stop
    def kill(self) -> None:
        """The engine dies at once, as a crashed or unplugged host would (its containers stay)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        try:
            if self.proc is not None and self.proc.poll() is None:
                self._remove_containers()
                self.proc.terminate()
                try:
                    self.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    self.kill()
            self._kill_leftovers()
            self._unmount()
            self._remove_cgroups()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def _remove_containers(self) -> None:
        try:
            client = connect(self.url, tls=self.client_tls)
            for c in client.containers.list(all=True):
                c.remove(force=True)
            client.close()
        except Exception:   # noqa: BLE001 - the engine may be half-dead; _kill_leftovers follows
            pass

    def _our_pids(self) -> set[int]:
        """Processes of this engine: in its cgroup parent, or naming its unique directory."""
        pids: set[int] = set()
        for root in Path("/sys/fs/cgroup").glob(f"*/{self.cgroup_parent}"):
            for procs in root.rglob("cgroup.procs"):
                try:
                    pids.update(int(p) for p in procs.read_text().split())
                except OSError:
                    pass
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if str(self.dir).encode() in (entry / "cmdline").read_bytes():
                        pids.add(int(entry.name))
                except OSError:
                    pass
        pids.discard(os.getpid())
        return pids

    def _kill_leftovers(self, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        while (pids := self._our_pids()) and time.monotonic() < deadline:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)
            if self.proc is not None:
                self.proc.poll()

    def _unmount(self) -> None:
        prefix = str(self.dir) + "/"
        with open("/proc/self/mountinfo") as f:
            points = [line.split()[4] for line in f]
        for point in sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True, timeout=30)

    def _remove_cgroups(self) -> None:
        for root in Path("/sys/fs/cgroup").glob(f"*/{self.cgroup_parent}"):
            for d in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
                try:
                    d.rmdir()
                except OSError:
                    pass
            try:
                root.rmdir()
            except OSError:
                pass
