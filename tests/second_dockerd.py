"""A second, private dockerd whose OCI runtime can be made to fail: a host that cannot start containers.

The daemon runs under its own temp dir (data root, exec root, pid file, unix socket) with
no bridge and no iptables, so it touches nothing of the machine's engine. Its default
runtime is a shell script that runs ``real`` (``runc``; or ``/usr/bin/runsc``, gVisor
registered without ``--network=none``, which cannot start any sandbox: issue 15's host),
except that while the file ``broken`` exists in that dir it fails every ``create`` the way
a misconfigured runtime does: the container is created in the engine, the runtime
refuses to start it. Each ``create`` it sees is appended to ``attempts``, so a test can
count the container starts a host really received. Where the machine has runsc, it is
also registered under the name `GVISOR_WITH_NETWORK`, without ``--network=none``.

Used by tests/test_sandbox_breaker.py and bench/sandbox_breaker.py. Needs root (dockerd does).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Iterable

import docker

PREFIX = "proctor-dockerd-"
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

    def __init__(self, real: str = "runc") -> None:
        _reap_stale()
        self.dir = Path(tempfile.mkdtemp(prefix=PREFIX, dir="/tmp"))
        self.url = f"unix://{self.dir}/docker.sock"
        self.proc: subprocess.Popen | None = None
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
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self, timeout_s: float = 30.0) -> "SecondEngine":
        d = self.dir
        argv = ["dockerd", "--data-root", f"{d}/data", "--exec-root", f"{d}/exec", "--pidfile", f"{d}/dockerd.pid",
                "-H", self.url, "--config-file", f"{d}/daemon.json", "--bridge=none", "--iptables=false",
                "--ip-masq=false"]
        with open(d / "dockerd.log", "wb") as log:
            self.proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                docker.DockerClient(base_url=self.url).ping()
                return self
            except Exception:  # noqa: BLE001 - not listening yet
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    tail = (d / "dockerd.log").read_text(errors="replace")[-1500:]
                    self.stop()
                    raise RuntimeError(f"second dockerd did not come up: {tail}") from None
                time.sleep(0.1)

    def client(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.url)

    def load_images(self, refs: Iterable[str]) -> None:
        """Copy images from the machine's engine (docker save | docker load)."""
        main = docker.from_env()
        for ref in refs:
            main.images.get(ref)   # ImageNotFound here, not a silent empty load below
            self.client().api.load_image(main.api.get_image(ref))
            self.client().images.get(ref)

    def set_broken(self, broken: bool) -> None:
        flag = self.dir / "broken"
        if broken:
            flag.touch()
        else:
            flag.unlink(missing_ok=True)

    def start_attempts(self) -> int:
        path = self.dir / "attempts"
        return len(path.read_text().split()) if path.exists() else 0

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                for c in self.client().containers.list(all=True):
                    c.remove(force=True)
            except Exception:  # noqa: BLE001 - a wedged daemon is killed below anyway
                pass
            _stop_process(self.proc.pid, self.proc)
        _cleanup_dir(self.dir)


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
        _cleanup_dir(d)


def can_run_dockerd() -> str | None:
    """Why a second dockerd cannot run here, or None."""
    if os.geteuid() != 0:
        return "starting a second dockerd needs root"
    for tool in ("dockerd", "runc"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None
