"""A second, private dockerd for tests: a host that cannot start containers, or a TLS engine.

The daemon runs under its own temp dir (data root, exec root, pid file, config file) and
cgroup parent, on a bridge of its own and without iptables, so it touches nothing of the
machine's engine (with ``--bridge=none`` dockerd deletes the machine's ``docker0``, and
every ``docker run`` on the default network fails until the machine's dockerd restarts:
measured). `stop()` leaves nothing behind: the engine, its containerd and shims, every
process in its containers (found by its cgroup parent and its unique directory, never
by a process name), its mounts, cgroups, bridge and directory.

* ``SecondEngine()`` listens on a unix socket in that dir. Its default runtime is a shell
  script that runs ``real`` (``runc``; or ``/usr/bin/runsc``), except that while the file
  ``broken`` exists in that dir it fails every ``create`` the way a misconfigured runtime
  does: the container is created in the engine, the runtime refuses to start it. Each
  ``create`` it sees is appended to ``attempts``, so a test can count the container
  starts a host really received. Where the machine has runsc, it is also registered under
  the name `GVISOR_WITH_NETWORK`, without ``--network=none`` (issue 15's host).
* ``SecondEngine(tls=True)`` listens on 127.0.0.1:<free port> with ``--tlsverify``: a CA, a
  server certificate (for 127.0.0.1) and a client certificate (``client_tls``) are made
  with the openssl CLI (``cryptography`` is not a declared dependency).

Used by tests/test_sandbox_breaker.py, tests/test_sandbox_tls.py and bench/sandbox_breaker.py.
Needs root (dockerd does).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterable, Optional

import docker

from proctor.sandbox import TLSConfig
from proctor.sandbox.engine import connect

PREFIX = "proctor-dockerd-"
BRIDGE_PREFIX = "pxd"   # + 8 hex digits: within a link name's 15 characters
RUNTIME_MESSAGE = "proctor test runtime: this host cannot start containers"
GVISOR = "/usr/bin/runsc"
GVISOR_WITH_NETWORK = "runsc-with-network"   # registered when the machine has runsc

_RUNTIME = """#!/bin/sh
# A stand-in OCI runtime: {real}, except that `create` fails while {dir}/broken exists.
for a in "$@"; do
  case "$a" in create|run) echo "$a" >> {dir}/attempts; verb="$a";; esac
done
if [ -n "$verb" ] && [ -e {dir}/broken ]; then
  log=""; prev=""
  for a in "$@"; do [ "$prev" = "--log" ] && log="$a"; prev="$a"; done
  # containerd reads the reason from the --log file, where runc writes its own errors.
  [ -n "$log" ] && printf '{{"level":"error","msg":"{message}"}}\\n' >> "$log"
  echo "{message}" >&2
  exit 1
fi
exec {real} "$@"
"""


class SecondEngine:
    """Start with `start()`, always `stop()` (a context manager does both)."""

    def __init__(self, real: str = "runc", tls: bool = False) -> None:
        _reap_stale()
        self.dir = Path(tempfile.mkdtemp(prefix=PREFIX, dir="/tmp"))
        self.tls = tls
        self.port = free_port() if tls else None
        self.url = f"tcp://127.0.0.1:{self.port}" if tls else f"unix://{self.dir}/docker.sock"
        self.client_tls: Optional[TLSConfig] = None
        token = secrets.token_hex(4)
        self.cgroup_parent = f"proctor-dockerd-{token}"
        self.bridge = f"{BRIDGE_PREFIX}{token}"   # made by start(), deleted by stop()
        self.proc: subprocess.Popen | None = None
        self.log = self.dir / "dockerd.log"
        (self.dir / "owner").write_text(str(os.getpid()))
        runtimes = {"fake": {"path": str(self._script("fake-runtime", real))}}
        if Path(GVISOR).exists():
            # Named, not default: the machine's gVisor without --network=none, behind a wrapper
            # (so the engine does not see it is runsc and the sandbox meets the failure itself).
            runtimes[GVISOR_WITH_NETWORK] = {"path": str(self._script("gvisor-runtime", GVISOR))}
        (self.dir / "daemon.json").write_text(json.dumps({"runtimes": runtimes, "default-runtime": "fake"}))

    def _script(self, name: str, real: str) -> Path:
        path = self.dir / name
        path.write_text(_RUNTIME.format(dir=self.dir, message=RUNTIME_MESSAGE, real=real))
        path.chmod(0o755)
        return path

    def __enter__(self) -> "SecondEngine":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout_s: float = 90.0) -> "SecondEngine":
        d = self.dir
        _make_bridge(self.bridge, d)
        argv = ["dockerd", "--data-root", f"{d}/data", "--exec-root", f"{d}/exec", "--pidfile", f"{d}/dockerd.pid",
                "-H", self.url, "--config-file", f"{d}/daemon.json", f"--bridge={self.bridge}", "--iptables=false",
                "--ip-masq=false", "--ip-forward=false", "--userland-proxy=false", "--cgroup-parent", self.cgroup_parent]
        if self.tls:
            argv += self._make_certificates()
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                self.client().close()
                return self
            except Exception:  # noqa: BLE001 - not listening yet
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the test's dockerd did not answer on {self.url}; its log:\n"
                                       + self.log.read_text(errors="replace")[-3000:]) from None
                time.sleep(0.2)

    def _make_certificates(self) -> list[str]:
        ca, server = self.dir / "ca", self.dir / "server"
        make_ca(ca, "proctor-test-ca")
        sign(ca, server, "server-", "127.0.0.1", SERVER_EXT)
        self.client_tls = client_dir(ca, self.dir / "client")
        return ["--tlsverify", "--tlscacert", str(server / "ca.pem"), "--tlscert", str(server / "server-cert.pem"),
                "--tlskey", str(server / "server-key.pem")]

    def client(self) -> docker.DockerClient:
        """A client that answered a ping (raises EngineUnavailable otherwise)."""
        return connect(self.url, tls=self.client_tls)

    def load_images(self, refs: Iterable[str], source: docker.DockerClient | None = None) -> None:
        """Copy images from `source` (default: the machine's engine): docker save | docker load."""
        main = source or docker.from_env()
        client = self.client()
        try:
            for ref in refs:
                main.images.get(ref)   # ImageNotFound here, not a silent empty load below
                client.api.load_image(main.api.get_image(ref, chunk_size=1 << 20), quiet=True)
                client.images.get(ref)   # raises if the tag did not arrive
        finally:
            client.close()

    def set_broken(self, broken: bool) -> None:
        flag = self.dir / "broken"
        if broken:
            flag.touch()
        else:
            flag.unlink(missing_ok=True)

    def start_attempts(self) -> int:
        path = self.dir / "attempts"
        return len(path.read_text().split()) if path.exists() else 0

    def kill(self) -> None:
        """The engine dies at once, as a crashed or unplugged host would (its containers stay)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                client = self.client()
                for c in client.containers.list(all=True):
                    c.remove(force=True)
                client.close()
            except Exception:  # noqa: BLE001 - a wedged daemon is killed below anyway
                pass
            _stop_process(self.proc.pid, self.proc)
        _kill_leftovers(self.dir, self.cgroup_parent)
        _delete_bridge(self.dir)
        _cleanup_dir(self.dir)
        _remove_cgroups(self.cgroup_parent)


def _make_bridge(name: str, d: Path) -> None:
    """A bridge for the engine's default network, named in ``d``/bridge first (so a clean-up finds it),
    on an address of 198.18.0.0/15 (reserved for benchmarks: no real network uses it)."""
    (d / "bridge").write_text(name)
    subprocess.run(["ip", "link", "add", name, "type", "bridge"], check=True, capture_output=True, timeout=30)
    subprocess.run(["ip", "addr", "add", f"198.18.{secrets.randbelow(256)}.1/24", "dev", name], check=True,
                   capture_output=True, timeout=30)


def _delete_bridge(d: Path) -> None:
    """Delete the bridge ``d``/bridge names, if there is one (it may never have been made)."""
    try:
        name = (d / "bridge").read_text().strip()
    except OSError:
        return
    if name.startswith(BRIDGE_PREFIX):
        subprocess.run(["ip", "link", "del", name], capture_output=True, timeout=30)


# ------------------------------------------------------------------ certificates (TLS)

OPENSSL_DAYS = "2"
SERVER_EXT = "subjectAltName = IP:127.0.0.1\nextendedKeyUsage = serverAuth\n"
CLIENT_EXT = "extendedKeyUsage = clientAuth\n"


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


def client_dir(ca_dir: Path, out_dir: Path) -> TLSConfig:
    """A DOCKER_CERT_PATH-style directory (ca.pem, cert.pem, key.pem) for a client of ca_dir's CA."""
    sign(ca_dir, out_dir, "", "proctor-test-client", CLIENT_EXT)
    return TLSConfig.from_dir(out_dir)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ leaving nothing behind

def _stop_process(pid: int, proc: subprocess.Popen | None = None, grace_s: float = 20.0) -> None:
    """SIGTERM dockerd (it stops its containerd), then SIGKILL its whole session if it lingers."""
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if proc is not None:
            if proc.poll() is not None:
                return
        elif not Path(f"/proc/{pid}").exists():
            return
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)   # started with start_new_session: its group is its own
    except ProcessLookupError:
        pass
    if proc is not None:
        proc.wait(timeout=10)


def _our_pids(d: Path, cgroup_parent: str) -> set[int]:
    """Processes of one engine: in its cgroup parent, or naming its unique directory."""
    pids: set[int] = set()
    for root in Path("/sys/fs/cgroup").glob(f"*/{cgroup_parent}"):
        for procs in root.rglob("cgroup.procs"):
            try:
                pids.update(int(p) for p in procs.read_text().split())
            except OSError:
                pass
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(d).encode() in (entry / "cmdline").read_bytes():
                    pids.add(int(entry.name))
            except OSError:
                pass
    pids.discard(os.getpid())
    return pids


def _kill_leftovers(d: Path, cgroup_parent: str, timeout_s: float = 20.0) -> None:
    """containerd, shims and container processes a stopped (or killed) engine left running."""
    deadline = time.monotonic() + timeout_s
    while (pids := _our_pids(d, cgroup_parent)) and time.monotonic() < deadline:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.2)


def _remove_cgroups(cgroup_parent: str) -> None:
    for root in Path("/sys/fs/cgroup").glob(f"*/{cgroup_parent}"):
        for d in sorted((p for p in root.rglob("*") if p.is_dir()), key=lambda p: len(p.parts), reverse=True):
            try:
                d.rmdir()
            except OSError:
                pass
        try:
            root.rmdir()
        except OSError:
            pass


def _cleanup_dir(d: Path) -> None:
    # Whatever dockerd left mounted under its roots (overlay layers, netns files) goes first.
    with open("/proc/self/mounts") as fh:
        mounts = [line.split()[1] for line in fh if line.split()[1].startswith(str(d))]
    for mount in sorted(mounts, key=len, reverse=True):
        subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
    # Deleting the image layers takes ~25 s on a busy disk: move them aside at once, delete in the background.
    trash = d.with_name(d.name + ".trash")
    try:
        d.rename(trash)
    except OSError:
        trash = d
    subprocess.Popen(["rm", "-rf", str(trash)], start_new_session=True,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _reap_stale() -> None:
    """Stop daemons an earlier, killed test run of ours left behind (found by our own temp-dir prefix).

    Only where the process that made the dir is gone: another test run's engine is left alone.
    """
    for d in Path("/tmp").glob(PREFIX + "*"):
        if d.name.endswith(".trash"):
            continue   # being deleted already
        try:
            owner = int((d / "owner").read_text().strip())
        except (OSError, ValueError):
            continue   # being set up right now, or not ours
        if Path(f"/proc/{owner}").exists():
            continue
        pidfile = d / "dockerd.pid"
        try:
            pid = int(pidfile.read_text().strip())
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except (OSError, ValueError):
            cmdline, pid = "", 0
        if pid and str(d) in cmdline:
            _stop_process(pid)
        _delete_bridge(d)
        _cleanup_dir(d)


def can_run_dockerd() -> str | None:
    """Why a second dockerd cannot run here, or None."""
    if os.geteuid() != 0:
        return "starting a second dockerd needs root"
    for tool in ("dockerd", "runc", "ip"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (bash scripts/setup.sh installs it)"
    return None
