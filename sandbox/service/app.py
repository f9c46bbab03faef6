"""The service's ASGI app: SandboxFusion's routes, Proctor's own, health and metrics, behind
a bearer token and a body-size limit.

    app = create_app(sandbox, ServiceSettings(token=...))

Every route but ``GET /v1/ping`` (liveness, no data) needs the token, as
``Authorization: Bearer TOKEN`` or as the password of HTTP Basic auth (what ``requests``
sends for a URL ``http://user:TOKEN@host:port``, so SandboxFusion's own client and verl's
reward code reach a token-protected service unchanged). Tokens are compared in constant time.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import hmac
import os
from typing import Any, AsyncIterator, Awaitable, Callable, Optional

import anyio

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from ..errors import BadJob, InfraError, SessionClosed
from ..runner import JobRunner
from .admission import Full
from .jupyter import RunJupyterRequest, RunJupyterResponse, run_cells
from .native import router as native_router
from .run_code import (RunCodeRequest, RunCodeResponse, RunStatus, UnsupportedLanguage, request_job,
                       response_of)
from .settings import ServiceSettings
from .state import ServiceState, UnknownSession, now
from .status import status_of

OPEN_PATHS = ("/v1/ping",)
SWEEP_EVERY_S = 1.0
IMAGES_TTL_S = 30.0   # /health's image list: asking the engine takes ~0.4 s, and images change rarely
ASGIApp = Callable[[dict, Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]], Awaitable[None]]


def token_of(headers: list[tuple[bytes, bytes]]) -> Optional[str]:
    """The token a request carries: a Bearer token, or Basic auth's password."""
    for name, value in headers:
        if name.lower() != b"authorization":
            continue
        scheme, _, rest = value.decode("latin-1").partition(" ")
        if scheme.lower() == "bearer":
            return rest.strip()
        if scheme.lower() == "basic":
            try:
                return base64.b64decode(rest.strip(), validate=True).decode("utf-8").partition(":")[2]
            except (binascii.Error, UnicodeDecodeError):
                return None
    return None


class Guard:
    """ASGI middleware: the token check, then the body-size limit (413), before any route reads the body."""

    def __init__(self, app: ASGIApp, settings: ServiceSettings, on_reject: Callable[[str], None]) -> None:
        self.app, self.settings, self.on_reject = app, settings, on_reject
        self.token = settings.token.encode() if settings.token else None

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.token is not None and scope["path"] not in OPEN_PATHS:
            given = token_of(scope.get("headers") or [])
            if given is None or not hmac.compare_digest(given.encode(), self.token):
                self.on_reject("auth")
                reply = JSONResponse({"detail": "missing or wrong token: send Authorization: Bearer TOKEN"},
                                     status_code=401, headers={"WWW-Authenticate": "Bearer"})
                return await reply(scope, receive, send)
        limit = self.settings.max_body_bytes
        length = next((v for n, v in scope.get("headers") or [] if n.lower() == b"content-length"), None)
        if length is not None:
            if not length.isdigit() or int(length) > limit:
                return await self.too_large(scope, receive, send)
            return await self.app(scope, receive, send)
        # A body without a length (chunked): read it here, up to the limit, then hand it on whole.
        body, more = bytearray(), True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                return await self.app(scope, replay([message], receive), send)
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > limit:
                return await self.too_large(scope, receive, send)
        await self.app(scope, replay([{"type": "http.request", "body": bytes(body), "more_body": False}], receive),
                       send)

    async def too_large(self, scope: dict, receive: Any, send: Any) -> None:
        self.on_reject("too_large")
        reply = JSONResponse({"detail": f"the request body is larger than {self.settings.max_body_bytes} bytes; "
                                        "send fewer jobs per request"}, status_code=413)
        await reply(scope, receive, send)


def replay(messages: list[dict], receive: Any) -> Any:
    """A receive that gives ``messages`` first, then the connection's own (its disconnect)."""
    queue = list(messages)

    async def receive_next() -> dict:
        return queue.pop(0) if queue else await receive()

    return receive_next


def create_app(sandbox: JobRunner, settings: ServiceSettings) -> FastAPI:
    """The service over ``sandbox``, a `Sandbox` or the Ray fleet's `RaySandbox` (the caller closes
    it); sessions it opened close with the app."""
    state = ServiceState(sandbox, status_of(sandbox), settings)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(sweep_forever, state)   # frees the places of sessions the sandbox closed
            try:
                yield
            finally:
                tasks.cancel_scope.cancel()
                await anyio.to_thread.run_sync(state.close)

    app = FastAPI(title="Proctor sandbox service", docs_url="/docs", redoc_url=None, lifespan=lifespan)
    app.state.service = state
    app.include_router(native_router)
    add_errors(app, state)
    add_sandboxfusion_routes(app, state)
    add_status_routes(app, state)
    app.add_middleware(Guard, settings=settings, on_reject=lambda why: state.metrics.rejected.labels(why).inc())
    return app


async def sweep_forever(state: ServiceState) -> None:
    while True:
        await anyio.sleep(SWEEP_EVERY_S)
        state.sweep_sessions()


def add_errors(app: FastAPI, state: ServiceState) -> None:
    def reply(status: int, detail: str, headers: Optional[dict] = None) -> JSONResponse:
        return JSONResponse({"detail": detail}, status_code=status, headers=headers)

    @app.exception_handler(BadJob)
    async def bad_job(_request: Request, exc: BadJob) -> JSONResponse:
        state.metrics.rejected.labels("bad_input").inc()
        return reply(422, str(exc))

    @app.exception_handler(Full)
    async def full(_request: Request, exc: Full) -> JSONResponse:
        state.metrics.rejected.labels("full").inc()
        return reply(429, f"{exc.what}; retry after {state.settings.retry_after_s} s",
                     {"Retry-After": str(state.settings.retry_after_s)})

    @app.exception_handler(UnknownSession)
    async def unknown(_request: Request, exc: UnknownSession) -> JSONResponse:
        return reply(404, str(exc))

    @app.exception_handler(SessionClosed)
    async def closed(_request: Request, exc: SessionClosed) -> JSONResponse:
        return reply(410, str(exc))

    @app.exception_handler(InfraError)
    async def infra(_request: Request, exc: InfraError) -> JSONResponse:
        return reply(503, f"{type(exc).__name__}: {exc}", {"Retry-After": str(state.settings.retry_after_s)})


def add_sandboxfusion_routes(app: FastAPI, state: ServiceState) -> None:
    settings = state.settings

    @app.post("/run_code", response_model=RunCodeResponse, response_model_exclude_none=False)
    async def run_code(req: RunCodeRequest) -> Any:
        try:
            job = request_job(req, settings.run_code_memory_mb, settings.wall_slack_s)
        except UnsupportedLanguage as exc:
            raise BadJob(f"language: {exc}") from None
        except (ValueError, binascii.Error) as exc:
            raise BadJob(f"files: {exc}") from None
        with state.admission.jobs(1):
            t0 = now()
            try:
                result = await state.blocking(state.sandbox.run, job)
            except InfraError as exc:
                return RunCodeResponse(status=RunStatus.SandboxError, message=f"{type(exc).__name__}: {exc}")
        state.metrics.jobs.labels(result.status, "run_code").inc()
        state.metrics.latency.labels("run_code").observe(now() - t0)
        return response_of(job, result).model_copy(update={"executor_pod_name": os.environ.get("MY_POD_NAME")})

    @app.post("/run_jupyter", response_model=RunJupyterResponse)
    async def run_jupyter(req: RunJupyterRequest) -> Any:
        if req.kernel != "python3":
            raise BadJob(f"kernel: {req.kernel!r} is not run here; use python3")
        state.sweep_sessions()

        def open_session(limits: Any) -> Any:
            return state.open_session("python", limits)

        def run() -> RunJupyterResponse:
            answer = run_cells(req, open_session, settings.session_limits, settings.run_code_memory_mb)
            state.sweep_sessions()
            return answer

        return await state.blocking(run)


def add_status_routes(app: FastAPI, state: ServiceState) -> None:
    @app.get("/v1/ping")
    async def ping() -> Response:
        return Response("pong", media_type="text/plain")

    @app.get("/health")
    async def health() -> Any:
        return await state.blocking(health_doc, state)

    @app.get("/metrics")
    async def metrics() -> Response:
        await state.blocking(state.refresh_gauges)
        return Response(state.metrics.render(), media_type="text/plain; version=0.0.4")


def health_doc(state: ServiceState) -> dict:
    state.sweep_sessions()
    summary = state.status.summary()
    images = state.cached("images", IMAGES_TTL_S, state.status.images)
    up = any(h["up"] for h in summary["hosts"].values())
    return {"status": "ok" if up else "down", **summary, "images": images,
            "queue": {"pending": state.admission.pending, "max": state.settings.max_pending},
            "sessions": {"open": state.admission.sessions, "max": state.settings.max_sessions}}


__all__ = ["create_app", "token_of"]
