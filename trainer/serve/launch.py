"""Start a local ``proctor serve`` for a run that names no server: its own process (own
engine, own memory), on a free port, logging to the run directory, stopped with the run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Sequence

from .client import EngineClient
from .errors import ServerUnreachable


class ManagedServer:
    def __init__(self, model_path: str, log_path: "str | Path", *, extra_args: Sequence[str] = (),
                 start_timeout_s: float = 300.0) -> None:
        self.log_path = Path(log_path)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        ready = Path(tempfile.mkdtemp(prefix="proctor-serve-")) / "url"
        cmd = [sys.executable, "-m", "proctor.cli.app", "serve", str(model_path), "--port", "0",
               "--ready-file", str(ready), "--exit-with", str(os.getpid()), *extra_args]
        self._ready_dir = ready.parent
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        deadline = time.monotonic() + start_timeout_s
        while not ready.exists():
            if self.proc.poll() is not None:
                self._log.close()
                raise ServerUnreachable(f"`proctor serve {model_path}` exited with code {self.proc.returncode} "
                                        f"before it was ready; its log ({self.log_path}) ends with:\n{self.tail()}")
            if time.monotonic() > deadline:
                self.close()
                raise ServerUnreachable(f"`proctor serve {model_path}` was not ready within {start_timeout_s:.0f} s; "
                                        f"its log ({self.log_path}) ends with:\n{self.tail()}")
            time.sleep(0.2)
        self.url = ready.read_text().strip()
        EngineClient(self.url).wait_ready(timeout=30)

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def close(self, timeout: float = 20.0) -> Optional[int]:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if not self._log.closed:
            self._log.close()
        shutil.rmtree(self._ready_dir, ignore_errors=True)
        return self.proc.returncode


__all__ = ["ManagedServer"]
