"""``proctor serve``: a vLLM engine in its own process, behind a small HTTP API.

    GET  /health                       model, weight version, LoRA, what the engine is doing
    POST /generate                     token ids in, token ids + sampler log-probs + weight version out
    POST /weights/begin                open a transfer: kind (full | lora), bucket count, target version
    POST /weights/bucket?session&index one bucket: a safetensors blob of many tensors
    POST /weights/commit               apply all buckets at once, reset the prefix cache, bump the version
    POST /sleep, /wake_up              free / restore the engine's GPU memory

Buckets are staged and applied only at commit, so a transfer that dies half way never
leaves the engine with half-new weights. Every engine call runs on one engine thread
under ``op_timeout``: if it does not return, the reply says which call hung and since
when, and the server reports itself wedged to every later call instead of hanging them.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import threading
import time
import uuid
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import asdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Optional
from urllib.parse import parse_qs, urlparse

MAX_BODY = 8 << 30


class HTTPFail(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class EngineService:
    """The engine plus transfer sessions; every engine call goes through ``run``."""

    def __init__(self, engine: Any, *, op_timeout: float = 600.0, model_name: str = "") -> None:
        self.engine = engine
        self.op_timeout = op_timeout
        self.model_name = model_name or getattr(engine, "model_path", "")
        self.lora_enabled = bool(getattr(engine, "lora_enabled", False))
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine")   # vLLM is single-threaded
        self._busy: Optional[tuple[str, float]] = None
        self.wedged: Optional[str] = None
        self.sessions: dict[str, dict[str, Any]] = {}
        self.updates = 0   # weight transfers applied
        self._sessions_lock = threading.Lock()
        self._adapter_dir = tempfile.mkdtemp(prefix="proctor-serve-lora-")
        weakref.finalize(self, shutil.rmtree, self._adapter_dir, True)

    def run(self, op: str, fn: Callable[[], Any], timeout: Optional[float] = None, wedge: bool = True) -> Any:
        """``fn`` on the engine thread within the time limit. A weight or memory call that
        overruns marks the server wedged (its state is unknown); a long generation only
        fails its caller, and later calls queue behind it with a message saying so."""
        if self.wedged:
            raise HTTPFail(503, f"the engine is wedged: {self.wedged}; restart `proctor serve`")
        limit = self.op_timeout if timeout is None else timeout

        def call() -> Any:
            self._busy = (op, time.monotonic())
            try:
                return fn()
            finally:
                self._busy = None

        future: Future = self._thread.submit(call)
        try:
            return future.result(timeout=limit)
        except FutureTimeout:
            busy = self._busy
            if busy is not None and busy[0] == op:
                if not wedge:
                    raise HTTPFail(504, f"{op} did not finish within {limit:.0f} s on the server (the engine is "
                                        "still running it; raise --op-timeout for longer generations)") from None
                self.wedged = f"{op} started {time.monotonic() - busy[1]:.0f} s ago and has not returned"
                raise HTTPFail(504, f"{op} did not finish within {limit:.0f} s on the server; the engine thread is "
                                    "still inside it and the server is now marked wedged") from None
            queued = f"{busy[0]} (running {time.monotonic() - busy[1]:.0f} s)" if busy else "earlier calls"
            future.cancel()
            raise HTTPFail(504, f"{op} waited {limit:.0f} s behind {queued} without starting") from None
        except HTTPFail:
            raise
        except Exception as exc:   # noqa: BLE001 - the engine's own error goes back to the caller
            raise HTTPFail(500, f"{op} failed in the engine: {type(exc).__name__}: {exc}") from None

    # ------------------------------------------------------------------ endpoints
    def health(self) -> dict[str, Any]:
        busy = self._busy
        return {"status": "wedged" if self.wedged else "ok", "wedged": self.wedged, "model": self.model_name,
                "weight_version": self.engine.weight_version, "updates": self.updates, "lora": self.lora_enabled,
                "asleep": bool(getattr(self.engine, "asleep", False)),
                "logprobs_mode": self.engine.logprobs_mode,
                "busy": None if busy is None else {"op": busy[0], "seconds": time.monotonic() - busy[1]}}

    def generate(self, req: dict[str, Any]) -> dict[str, Any]:
        prompts = req.get("prompts")
        if not isinstance(prompts, list) or not all(isinstance(p, list) and p for p in prompts):
            raise HTTPFail(400, "generate: 'prompts' must be a list of non-empty token-id lists")
        kwargs = {k: req[k] for k in ("n", "temperature", "top_p", "top_k", "max_new_tokens", "stop_ids", "min_p",
                                      "repetition_penalty", "stop") if k in req}

        def call() -> tuple[int, Any]:
            groups = self.engine.generate(prompts, **kwargs)
            return self.engine.weight_version, groups   # read on the engine thread: the version that sampled

        version, groups = self.run(f"generate ({len(prompts)} prompts × n={kwargs.get('n', 1)})", call, wedge=False)
        return {"weight_version": version, "groups": [[asdict(s) for s in g] for g in groups]}

    def begin(self, req: dict[str, Any]) -> dict[str, Any]:
        kind = req.get("kind", "full")
        if kind not in ("full", "lora"):
            raise HTTPFail(400, f"weights/begin: kind must be 'full' or 'lora', got {kind!r}")
        if kind == "lora" and not self.lora_enabled:
            raise HTTPFail(400, "this server was started without LoRA: restart it with `proctor serve MODEL "
                                "--enable-lora --max-lora-rank R` (R >= the adapter's rank), or push merged "
                                "weights (vllm_lora_sync: merged)")
        n = req.get("buckets")
        if not isinstance(n, int) or n < 1:
            raise HTTPFail(400, f"weights/begin: 'buckets' must be a positive integer, got {n!r}")
        session = uuid.uuid4().hex[:12]
        with self._sessions_lock:
            # One transfer at a time per trainer: an abandoned one is dropped, not applied.
            self.sessions = {session: {"kind": kind, "n": n, "version": req.get("version"),
                                       "config": req.get("config"), "buckets": {}, "bytes": 0}}
        return {"session": session}

    def bucket(self, session: str, index: int, body: bytes) -> dict[str, Any]:
        from safetensors.torch import load

        s = self._session(session)
        if not 0 <= index < s["n"]:
            raise HTTPFail(400, f"weights/bucket: index {index} is outside 0..{s['n'] - 1}")
        try:
            tensors = load(body)
        except Exception as exc:   # noqa: BLE001 - any parse failure is the sender's
            raise HTTPFail(400, f"weights/bucket {index}: not a safetensors blob ({exc})") from None
        s["buckets"][index] = tensors
        s["bytes"] += len(body)
        return {"index": index, "tensors": len(tensors)}

    def commit(self, req: dict[str, Any]) -> dict[str, Any]:
        s = self._session(str(req.get("session")))
        missing = [i for i in range(s["n"]) if i not in s["buckets"]]
        if missing:
            raise HTTPFail(400, f"weights/commit: bucket(s) {missing} of {s['n']} never arrived; nothing was applied")
        named = [item for i in range(s["n"]) for item in s["buckets"][i].items()]
        version = s["version"]
        t0 = time.perf_counter()
        if s["kind"] == "lora":
            from ..rollout.weights import write_adapter

            write_adapter(self._adapter_dir, dict(named), s["config"] or {})
            what = f"load_lora ({len(named)} tensors, {s['bytes'] / 2**20:.1f} MiB)"
            new = self.run(what, lambda: self.engine.load_lora(self._adapter_dir, version=version))
        else:
            what = f"reload_weights ({len(named)} tensors, {s['bytes'] / 2**20:.1f} MiB)"
            try:
                new = self.run(what, lambda: self.engine.load_weights(named, version=version))
            except HTTPFail as exc:
                if exc.code == 500:
                    raise HTTPFail(400, f"{exc} — do the weights fit the served model {self.model_name}? "
                                        "Start `proctor serve` with the trainer's model") from None
                raise
        with self._sessions_lock:
            self.sessions.pop(str(req.get("session")), None)
            self.updates += 1
        return {"weight_version": new, "tensors": len(named), "bytes": s["bytes"],
                "seconds": time.perf_counter() - t0}

    def _session(self, session: str) -> dict[str, Any]:
        with self._sessions_lock:
            s = self.sessions.get(session)
        if s is None:
            raise HTTPFail(404, f"no open weight transfer {session!r} (a newer one replaced it, or it was committed)")
        return s


def _handler(service: EngineService, io_timeout: float) -> type:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        timeout = io_timeout   # a client that stops sending mid-body frees its thread

        def log_message(self, fmt: str, *args: Any) -> None:   # quiet: the trainer logs what matters
            pass

        def _reply(self, code: int, payload: dict[str, Any]) -> None:
            body = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            if not 0 <= length <= MAX_BODY:
                raise HTTPFail(413, f"body of {length} bytes is over the {MAX_BODY} byte limit: use smaller buckets")
            return self.rfile.read(length)

        def _json(self) -> dict[str, Any]:
            try:
                data = json.loads(self._body() or b"{}")
            except json.JSONDecodeError as exc:
                raise HTTPFail(400, f"{self.path}: body is not JSON ({exc.msg})") from None
            if not isinstance(data, dict):
                raise HTTPFail(400, f"{self.path}: body must be a JSON object")
            return data

        def _dispatch(self) -> None:
            url = urlparse(self.path)
            query = parse_qs(url.query)
            try:
                if self.command == "GET" and url.path == "/health":
                    out = service.health()
                elif self.command != "POST":
                    raise HTTPFail(405, f"{self.command} {url.path}: use POST")
                elif url.path == "/generate":
                    out = service.generate(self._json())
                elif url.path == "/weights/begin":
                    out = service.begin(self._json())
                elif url.path == "/weights/bucket":
                    out = service.bucket(query.get("session", [""])[0], int(query.get("index", ["-1"])[0]),
                                         self._body())
                elif url.path == "/weights/commit":
                    out = service.commit(self._json())
                elif url.path == "/sleep":
                    level = int(self._json().get("level", 1))
                    service.run("sleep", lambda: service.engine.sleep(level=level))
                    out = service.health()
                elif url.path == "/wake_up":
                    tags = self._json().get("tags")
                    service.run("wake_up", lambda: service.engine.wake_up(tags))
                    out = service.health()
                else:
                    raise HTTPFail(404, f"no endpoint {url.path}")
                self._reply(200, out)
            except HTTPFail as exc:
                self._reply(exc.code, {"error": str(exc)})
            except ValueError as exc:
                self._reply(400, {"error": f"{url.path}: {exc}"})

        do_GET = do_POST = _dispatch

    return Handler


def serve(engine: Any, host: str = "127.0.0.1", port: int = 8765, *, op_timeout: float = 600.0,
          io_timeout: float = 120.0, ready_file: Optional[str] = None, model_name: str = "") -> None:
    """Serve until interrupted; writes the URL to ``ready_file`` once it accepts calls."""
    service = EngineService(engine, op_timeout=op_timeout, model_name=model_name)
    httpd = ThreadingHTTPServer((host, port), _handler(service, io_timeout))
    httpd.daemon_threads = True
    url = f"http://{host}:{httpd.server_address[1]}"
    print(f"proctor serve: {service.model_name} ready on {url}", flush=True)
    if ready_file:
        tmp = Path(ready_file + ".tmp")
        tmp.write_text(url)
        tmp.replace(ready_file)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        httpd.server_close()


__all__ = ["EngineService", "serve"]
