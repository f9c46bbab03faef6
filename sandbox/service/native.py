"""Proctor's own API: ``POST /v1/jobs`` (a batch, streamed back) and ``/v1/sessions``.

``POST /v1/jobs`` takes ``{"jobs": [Job, ...]}`` (sandbox/wire.py: the library's fields,
checked as the library checks them; a bad job is 422 naming ``jobs[i].field`` and nothing
runs). It answers NDJSON, one line per job in job order as soon as it and every job
before it are done: ``{"index": i, "result": {...}}``; then ``{"done": n}``. If the
service itself fails mid-batch the line is ``{"index": i, "error": "..."}`` and the stream
ends: the client reports the rest as infra errors (never as verdicts). Back-pressure: at
most ``batch_window`` jobs of a batch are queued or running ahead of the line the client
has read. A client that disconnects stops its batch: queued jobs are dropped, running
ones end within their limits and their containers go back to the pool.

Sessions: ``POST /v1/sessions`` ``{"language": "python", "limits": {SessionLimits}}`` ->
``{"id", ...}``; ``POST /v1/sessions/{id}/run`` ``{"code", "limits"?}`` -> a CellResult;
``POST /v1/sessions/{id}/files`` ``{"files": {path: text | {"base64"}}}``;
``POST /v1/sessions/{id}/files/get`` ``{"paths": [...]}`` -> ``{"files": {path: base64 | null}}``;
``GET /v1/sessions/{id}``; ``DELETE /v1/sessions/{id}``. An unknown id is 404; a session
the sandbox closed (idle TTL, budget, crash) is 410 with the reason.
"""

from __future__ import annotations

import base64
import json
from typing import Any, AsyncIterator, Iterator, Optional

import anyio
from fastapi import APIRouter, Request, Response
from fastapi.responses import StreamingResponse

from ..errors import BadJob, InfraError, SessionClosed
from .status import ServedSession
from ..types import Job, Limits, Result
from ..wire import (cell_to_dict, job_from_dict, limits_from_dict, optional_str, result_to_dict,
                    session_limits_from_dict, _files)
from .state import ServiceState, now

router = APIRouter()
MAX_BATCH = 100_000


async def json_body(request: Request) -> dict:
    try:
        body = json.loads(await request.body())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadJob(f"the request body is not JSON ({exc}); send a JSON object") from None
    if not isinstance(body, dict):
        raise BadJob(f"the request body must be a JSON object, got {type(body).__name__}")
    return body


def state_of(request: Request) -> ServiceState:
    return request.app.state.service


# --------------------------------------------------------------------------- jobs

def parse_jobs(body: dict) -> list[Job]:
    jobs = body.get("jobs")
    if not isinstance(jobs, list) or not jobs:
        raise BadJob("jobs must be a non-empty list of Job objects")
    if len(jobs) > MAX_BATCH:
        raise BadJob(f"jobs holds {len(jobs)} jobs; send at most {MAX_BATCH} per request")
    unknown = sorted(set(body) - {"jobs"})
    if unknown:
        raise BadJob(f"{unknown[0]} is not a field of a /v1/jobs request; it takes jobs only")
    return [job_from_dict(j, f"jobs[{i}]") for i, j in enumerate(jobs)]


@router.post("/v1/jobs")
async def post_jobs(request: Request) -> Response:
    state = state_of(request)
    jobs = parse_jobs(await json_body(request))
    if len(jobs) == 1:   # one job (RemoteSandbox.run): no stream to keep, no thread pool to start
        return await run_one(state, jobs[0])
    window = min(len(jobs), state.settings.batch_window)
    hold = state.admission.jobs(window)
    hold.__enter__()          # Full -> 429 before the stream starts
    return ClosingStream(stream_results(state, jobs, window), hold, media_type="application/x-ndjson")


async def run_one(state: ServiceState, job: Job) -> Response:
    with state.admission.jobs(1):
        started = now()
        try:
            result = await state.blocking(state.sandbox.run, job)
        except InfraError as exc:
            return Response(line({"index": 0, "error": f"{type(exc).__name__}: {exc}"}),
                            media_type="application/x-ndjson")
    state.metrics.jobs.labels(result.status, "jobs").inc()
    state.metrics.latency.labels("jobs").observe(now() - started)
    return Response(line({"index": 0, "result": result_to_dict(result)}) + line({"done": 1}),
                    media_type="application/x-ndjson")


class ClosingStream(StreamingResponse):
    """A stream that always ends its iterator and gives its queue places back, however the response ends
    (finished, the client gone, an error in sending): Starlette leaves an unfinished iterator to the GC."""

    def __init__(self, body: AsyncIterator[bytes], hold: Any, **kw: Any) -> None:
        super().__init__(body, **kw)
        self._body, self._hold = body, hold

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            try:
                with anyio.CancelScope(shield=True):
                    await self._body.aclose()   # type: ignore[attr-defined]
            finally:
                self._hold.__exit__(None, None, None)


async def stream_results(state: ServiceState, jobs: list[Job], window: int) -> AsyncIterator[bytes]:
    started = now()
    results: Optional[Iterator[Result]] = None
    index = 0
    try:
        results = state.sandbox.imap(jobs, max_pending=window)
        while True:
            try:
                result = await state.blocking(next, results, None)
            except InfraError as exc:
                yield line({"index": index, "error": f"{type(exc).__name__}: {exc}"})
                return
            if result is None:
                break
            state.metrics.jobs.labels(result.status, "jobs").inc()
            state.metrics.latency.labels("jobs").observe(now() - started)
            yield line({"index": index, "result": result_to_dict(result)})
            index += 1
        yield line({"done": index})
    finally:
        if results is not None:
            # Drops the jobs not yet started (the client left, or the batch ended); shielded, so a
            # cancelled stream still does it.
            with anyio.CancelScope(shield=True):
                await state.blocking(results.close)   # type: ignore[attr-defined]


def line(doc: dict) -> bytes:
    return (json.dumps(doc, ensure_ascii=False) + "\n").encode("utf-8", "surrogatepass")


@router.post("/v1/warmup")
async def warmup(request: Request) -> Response:
    """``{"languages": [...], "limits": {Limits}?}``: start containers now (`Sandbox.warmup`)."""
    state = state_of(request)
    body = await json_body(request)
    languages = body.get("languages", ["python"])
    if not isinstance(languages, list) or not all(isinstance(x, str) for x in languages):
        raise BadJob("languages must be a list of language names")
    limits: Optional[Limits] = limits_from_dict(body["limits"], "limits") if body.get("limits") else None
    await state.blocking(state.sandbox.warmup, languages, None, limits)
    return Response(status_code=204)


# --------------------------------------------------------------------------- sessions

def session_doc(session: ServedSession) -> dict:
    return {"id": session.id, "language": session.language, "closed": session.closed,
            "close_reason": session.close_reason, "calls": session.calls, "cpu_spent_s": round(session.cpu_spent_s, 6),
            "limits": {k: getattr(session.limits, k) for k in session.limits.__dataclass_fields__}}


@router.post("/v1/sessions", status_code=201)
async def open_session(request: Request) -> dict:
    state = state_of(request)
    body = await json_body(request)
    language = body.get("language", "python")
    limits = session_limits_from_dict(body["limits"], "limits") if body.get("limits") is not None else \
        state.settings.session_limits
    session = await state.blocking(state.open_session, language, limits)
    return session_doc(session)


def find(request: Request, session_id: str) -> ServedSession:
    return state_of(request).session(session_id)


@router.get("/v1/sessions/{session_id}")
async def get_session(request: Request, session_id: str) -> dict:
    return session_doc(find(request, session_id))


@router.post("/v1/sessions/{session_id}/run")
async def run_cell(request: Request, session_id: str) -> dict:
    state = state_of(request)
    session = find(request, session_id)
    body = await json_body(request)
    code = optional_str(body.get("code"), "code")
    if code is None:
        raise BadJob("code is missing: send the cell's Python source")
    limits = None
    if body.get("limits") is not None:
        own = {k: getattr(session.limits, k) for k in session.limits.__dataclass_fields__}
        limits = session_limits_from_dict({**own, **body["limits"]}, "limits")
    cell = await state.blocking(lambda: session.run(code, limits=limits))
    state.metrics.cells.labels(cell.status).inc()
    if session.closed:
        state.forget(session)
    return cell_to_dict(cell)


@router.post("/v1/sessions/{session_id}/files", status_code=204)
async def put_files(request: Request, session_id: str) -> Response:
    state = state_of(request)
    session = find(request, session_id)
    files = _files((await json_body(request)).get("files"), "files")
    await state.blocking(session.put_files, files)
    return Response(status_code=204)


@router.post("/v1/sessions/{session_id}/files/get")
async def get_files(request: Request, session_id: str) -> dict:
    state = state_of(request)
    session = find(request, session_id)
    paths = (await json_body(request)).get("paths")
    if not isinstance(paths, list):
        raise BadJob("paths must be a list of relative paths")
    got = await state.blocking(session.get_files, paths)
    return {"files": {p: None if c is None else base64.b64encode(c).decode() for p, c in got.items()}}


@router.delete("/v1/sessions/{session_id}", status_code=204)
async def delete_session(request: Request, session_id: str) -> Response:
    state = state_of(request)
    try:
        session = find(request, session_id)
    except SessionClosed:
        return Response(status_code=204)   # already over: nothing left to close
    await state.blocking(state.close_session, session)
    return Response(status_code=204)


__all__ = ["router", "json_body"]
