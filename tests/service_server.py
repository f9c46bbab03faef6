"""``proctor sandbox serve`` started as a child process for the service tests, on a free
loopback port, and stopped (the whole process group) at the end."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import httpx

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServiceProcess:
    def __init__(self, tmp: Path, *args: str, token: bool = True, ready_s: float = 300.0) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.token: Optional[str] = secrets.token_urlsafe(24) if token else None
        cmd = [sys.executable, "-m", "proctor", "sandbox", "serve", "--port", str(self.port), *args]
        if self.token:
            token_file = tmp / f"token-{self.port}"
            token_file.write_text(self.token)
            token_file.chmod(0o600)
            cmd += ["--token-file", str(token_file)]
        self.log_path = tmp / f"service-{self.port}.log"
        self.log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(cmd, cwd=REPO, stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True,
                                     env={**os.environ, "OMP_NUM_THREADS": "1"})
        self._wait(ready_s)

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def client(self, **kw) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers=self.headers, timeout=120.0, **kw)

    def _wait(self, ready_s: float) -> None:
        deadline = time.monotonic() + ready_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"proctor sandbox serve exited with {self.proc.returncode}:\n{self.read_log()}")
            try:
                if httpx.get(f"{self.url}/health", headers=self.headers, timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"proctor sandbox serve did not answer within {ready_s} s:\n{self.read_log()}")

    def read_log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        self.log.close()

    def kill(self) -> None:
        """Dies as a crashed or OOM-killed service does: no graceful end for requests in flight."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def metric(self, name: str, **labels: str) -> float:
        """One sample of /metrics (0.0 when the series is absent)."""
        text = httpx.get(f"{self.url}/metrics", headers=self.headers, timeout=30).text
        want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            key, _, value = line.rpartition(" ")
            series, _, rest = key.partition("{")
            got = ",".join(sorted(rest.rstrip("}").split(","))) if rest else ""
            if series == name and got == want:
                return float(value)
        return 0.0
