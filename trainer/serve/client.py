"""The trainer's side of ``proctor serve``: every call has a timeout, and every failure is
an exception naming the server, the call and what it carried."""

from __future__ import annotations

import http.client
import json
import socket
import time
from typing import Any, Optional, Sequence
from urllib.parse import urlparse

import torch

from .errors import EngineServerError, ServerTimeout, ServerUnreachable


class EngineClient:
    def __init__(self, url: str, *, timeout_s: float = 600.0, sync_timeout_s: float = 120.0,
                 connect_timeout_s: float = 10.0) -> None:
        parsed = urlparse(url if "://" in url else f"http://{url}")
        if parsed.scheme != "http" or not parsed.hostname:
            raise ValueError(f"engine server URL {url!r}: expected http://HOST:PORT")
        self.url = f"http://{parsed.hostname}:{parsed.port or 80}"
        self.host, self.port = parsed.hostname, parsed.port or 80
        self.timeout_s = timeout_s
        self.sync_timeout_s = sync_timeout_s
        self.connect_timeout_s = connect_timeout_s

    # ------------------------------------------------------------------ transport
    def _call(self, method: str, path: str, what: str, *, body: Optional[bytes] = None,
              payload: Optional[dict[str, Any]] = None, timeout: Optional[float] = None) -> dict[str, Any]:
        limit = self.timeout_s if timeout is None else timeout
        if payload is not None:
            body = json.dumps(payload).encode()
        conn = http.client.HTTPConnection(self.host, self.port, timeout=self.connect_timeout_s)
        t0 = time.monotonic()
        try:
            try:
                conn.connect()
            except (ConnectionRefusedError, socket.timeout, OSError) as exc:
                raise ServerUnreachable(
                    f"no engine server answers at {self.url} ({what}: {exc}). Start one with "
                    f"`proctor serve MODEL --port {self.port}`, or check that it is still running") from None
            conn.sock.settimeout(limit)
            try:
                conn.request(method, path, body=body, headers={"Content-Type": "application/octet-stream"
                                                               if payload is None else "application/json"})
                resp = conn.getresponse()
                data = resp.read()
            except (socket.timeout, TimeoutError):
                raise ServerTimeout(
                    f"{what} at {self.url}: no reply within {limit:.0f} s (waited {time.monotonic() - t0:.0f} s). "
                    f"The server's /health says what its engine is doing; raise the timeout if the call "
                    f"is legitimately slow") from None
            except (ConnectionError, http.client.HTTPException, OSError) as exc:
                raise ServerUnreachable(f"{what} at {self.url}: the connection broke ({type(exc).__name__}: {exc}); "
                                        "the server may have crashed (see its log)") from None
        finally:
            conn.close()
        try:
            out = json.loads(data or b"{}")
        except json.JSONDecodeError:
            raise EngineServerError(f"{what} at {self.url}: HTTP {resp.status} with a non-JSON body "
                                    f"{data[:200]!r}: is this a proctor server?") from None
        if resp.status != 200:
            raise EngineServerError(f"{what} at {self.url}: {out.get('error', data[:300])}")
        return out

    # ------------------------------------------------------------------ calls
    def health(self, timeout: float = 10.0) -> dict[str, Any]:
        return self._call("GET", "/health", "health check", timeout=timeout)

    def wait_ready(self, timeout: float = 300.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.health()
            except ServerUnreachable:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def generate(self, prompts: Sequence[Sequence[int]], **sampling: Any) -> dict[str, Any]:
        return self._call("POST", "/generate", f"generate ({len(prompts)} prompts)",
                          payload={"prompts": [list(p) for p in prompts], **sampling})

    def push(self, blobs: Sequence[tuple[bytes, int]], *, kind: str = "full", version: Optional[int] = None,
             config: Optional[dict[str, Any]] = None) -> dict[str, Any]:
        """Send serialized buckets (blob, tensor count) and commit them as one update."""
        n = len(blobs)
        t = self.sync_timeout_s
        session = self._call("POST", "/weights/begin", f"weight sync ({kind}, {n} buckets): begin",
                             payload={"kind": kind, "buckets": n, "version": version, "config": config},
                             timeout=t)["session"]
        for i, (blob, count) in enumerate(blobs):
            self._call("POST", f"/weights/bucket?session={session}&index={i}",
                       f"weight sync: bucket {i + 1}/{n} ({len(blob) / 2**20:.1f} MiB, {count} tensors)",
                       body=blob, timeout=t)
        total = sum(len(b) for b, _ in blobs)
        return self._call("POST", "/weights/commit",
                          f"weight sync: commit of {n} buckets ({total / 2**20:.1f} MiB) into the engine",
                          payload={"session": session}, timeout=t)

    def sleep(self, level: int = 1) -> dict[str, Any]:
        return self._call("POST", "/sleep", "sleep", payload={"level": level}, timeout=self.sync_timeout_s)

    def wake_up(self, tags: Optional[list[str]] = None) -> dict[str, Any]:
        return self._call("POST", "/wake_up", "wake_up", payload={"tags": tags}, timeout=self.sync_timeout_s)


def serialize_buckets(named: Sequence[tuple[str, torch.Tensor]], bucket_bytes: int) -> list[tuple[bytes, int]]:
    """Buckets as safetensors blobs (contiguous CPU copies; shared storage is not allowed)."""
    from safetensors.torch import save

    from ..rollout.weights import buckets

    return [(save({name: t.detach().to("cpu").contiguous().clone() for name, t in bucket}), len(bucket))
            for bucket in buckets(named, bucket_bytes)]


__all__ = ["EngineClient", "serialize_buckets"]
