"""The servers bench/sandbox_service.py talks to: SandboxFusion's (from the tree that
bench/sandboxfusion_setup.sh prepared) and ``proctor sandbox serve``, each started on a free
loopback port unless the bench was given a URL, and stopped (by the process id it started) at
the end."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import httpx

REPO = Path(__file__).resolve().parent.parent
READY_TIMEOUT_S = 180.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """A child process serving HTTP; its log goes to a file (a pipe nobody reads could fill and stall it)."""

    def __init__(self, name: str, cmd: list[str], cwd: Path, log_path: Path, ready_url: str,
                 headers: Optional[dict] = None, env: Optional[dict] = None) -> None:
        self.name, self.log_path = name, log_path
        self.log = open(log_path, "wb")
        # A session of its own, so that stopping it also reaches the job processes it started.
        self.proc = subprocess.Popen(cmd, cwd=cwd, stdout=self.log, stderr=subprocess.STDOUT,
                                     start_new_session=True, env={**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})
        self.wait_ready(ready_url, headers or {})

    def wait_ready(self, url: str, headers: dict) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"{self.name} exited with {self.proc.returncode} before it answered; "
                                 f"its log:\n{self.log_path.read_text()[-3000:]}")
            try:
                if httpx.get(url, headers=headers, timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise SystemExit(f"{self.name} did not answer {url} within {READY_TIMEOUT_S:.0f} s; log: {self.log_path}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)   # the group this bench started, by its id
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.log.close()


class Servers:
    """Starts what the chosen arms need: ``sf_url``, ``service_url`` and ``token`` after entry."""

    def __init__(self, args) -> None:
        self.args = args
        self.started: list[Server] = []
        self.sf_url: str = (args.sf_url or "").rstrip("/")
        self.service_url: str = (args.service_url or "").rstrip("/")
        self.token: Optional[str] = Path(args.token_file).read_text().strip() if args.token_file else None
        self.sf_description = ""
        self.workdir = Path(tempfile.mkdtemp(prefix="sandbox_service_bench."))

    def __enter__(self) -> "Servers":
        try:
            names = set(self.args.arm_names)
            if "sf_run_code" in names and not self.sf_url:
                self.start_sandboxfusion(Path(self.args.sf_home))
            if names & {"px_run_code", "px_jobs_batch", "px_jobs_run"} and not self.service_url:
                self.start_service(self.args.concurrency)
        except BaseException:
            self.__exit__()
            raise
        if self.sf_url:
            self.sf_description = self.sf_description or f"running at {self.sf_url}"
        return self

    def __exit__(self, *exc) -> None:
        for server in reversed(self.started):
            server.stop()
        self.started.clear()

    def start_sandboxfusion(self, home: Path) -> None:
        uvicorn, src = home / ".venv/bin/uvicorn", home / "src"
        if not uvicorn.exists() or not (src / "sandbox/server/server.py").exists():
            raise SystemExit(f"no SandboxFusion set up under {home}: run `bash bench/sandboxfusion_setup.sh` "
                             "(or pass --sf-url of a running one)")
        port = free_port()
        self.sf_url = f"http://127.0.0.1:{port}"
        # SHLVL=1, as its image's start (bash scripts/run.sh, then make) leaves it. Each job is a
        # `bash -c` whose stdin is a socket (uvloop's pipes), and Debian's bash then reads
        # ~/.bashrc when SHLVL is below 2: started from a shell at SHLVL 0, every job would run
        # this machine's ~/.bashrc (here `pyenv init`, ~0.25 s), which its deployment never does.
        self.started.append(Server("SandboxFusion", [str(uvicorn), "sandbox.server.server:app", "--host",
                                                     "127.0.0.1", "--port", str(port)],
                                   src, self.workdir / "sandboxfusion.log", f"{self.sf_url}/v1/ping",
                                   env={"SHLVL": "1"}))
        commit = (src / ".source_commit").read_text().strip()[:10] if (src / ".source_commit").exists() else "?"
        self.sf_description = f"SandboxFusion {commit} from {src}, config local.yaml (isolation: none), one uvicorn"

    def start_service(self, pool: int) -> None:
        port = free_port()
        self.token = secrets.token_urlsafe(24)
        token_file = self.workdir / "token"
        token_file.write_text(self.token + "\n")
        token_file.chmod(0o600)
        self.service_url = f"http://127.0.0.1:{port}"
        cmd = [sys.executable, "-m", "proctor", "sandbox", "serve", "--host", "127.0.0.1", "--port", str(port),
               "--token-file", str(token_file), "--pool-size", str(pool)]
        self.started.append(Server("proctor sandbox serve", cmd, REPO, self.workdir / "service.log",
                                   f"{self.service_url}/health", {"Authorization": f"Bearer {self.token}"}))


__all__ = ["Servers"]
