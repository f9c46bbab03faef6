"""`RemoteSandbox`: the library's `Sandbox` API (run, run_many, imap, session, warmup) over
`proctor sandbox serve`, so a code env or a trainer switches to a shared service by
configuration (``sandbox: {url: ..., token_file: ...}``).

    with RemoteSandbox("http://sandbox:8080", token=TOKEN) as sb:
        results = sb.run_many(jobs)            # POST /v1/jobs, results streamed in job order

Jobs are checked here as the library checks them (they are `Job`s) and again by the
service. A lost connection, a timeout, a 5xx or a 429 is retried (``retries`` more
attempts, backing off; Retry-After is honoured) for the jobs whose results have not
arrived; after that each of them is an ``infra_error`` `Result` saying what failed:
never a wrong answer. A 4xx other than 429 is the caller's mistake: `BadJob` with the
service's words.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from typing import Any, Iterable, Iterator, Optional, Sequence

import httpx

from .errors import BadJob, InfraError, SandboxError, SessionClosed
from .runner import Progress
from .session import CellResult, SessionLimits
from .types import Job, Limits, Result, infra_result
from .wire import cell_from_dict, job_to_dict, result_from_dict

RETRY_STATUSES = (429, 502, 503, 504)
BATCH = 256            # jobs per /v1/jobs request: bounds a request body and what a lost stream re-sends


class RemoteSandbox:
    """A client of ``proctor sandbox serve``; thread-safe; a context manager.

    ``url``: the service's base URL. ``token``: its bearer token (or ``token_file``).
    ``timeout_s``: the longest wait for any one read (a streamed batch may take longer in
    all; each result line must arrive within it). ``retries``: extra attempts after a
    failure of the service or the network. ``slots``: how many jobs the service runs at
    once (read from its /health unless given), for callers that size work to it.
    """

    def __init__(self, url: str, token: Optional[str] = None, *, token_file: Optional[str] = None,
                 timeout_s: float = 300.0, connect_timeout_s: float = 10.0, retries: int = 2,
                 backoff_s: float = 0.5, slots: Optional[int] = None) -> None:
        if token is None and token_file is not None:
            from pathlib import Path

            token = Path(token_file).read_text().strip()
        self.url = url.rstrip("/")
        self.retries = retries
        self.backoff_s = backoff_s
        self.cache = None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers,
                                  timeout=httpx.Timeout(timeout_s, connect=connect_timeout_s),
                                  limits=httpx.Limits(max_connections=64, max_keepalive_connections=16))
        self._slots = slots
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ context
    def __enter__(self) -> "RemoteSandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    @property
    def slots(self) -> int:
        with self._lock:
            if self._slots is None:
                self._slots = int(self.health().get("slots", 1))
            return self._slots

    # ------------------------------------------------------------------ jobs
    def run(self, job: Job) -> Result:
        """Run one job on the service; never raises for anything the program does or the network does."""
        return self.run_many([job])[0]

    def run_many(self, jobs: Iterable[Job], progress: Optional[Progress] = None, *,
                 max_pending: Optional[int] = None) -> list[Result]:
        """Results in job order, one per job (``max_pending`` bounds jobs sent ahead of results read)."""
        jobs = list(jobs)
        for i, job in enumerate(jobs):
            check_job(job, i)
        return list(self.imap(jobs, progress, max_pending=max_pending))

    def imap(self, jobs: Iterable[Job], progress: Optional[Progress] = None, *,
             max_pending: Optional[int] = None) -> Iterator[Result]:
        """Yields each result, in job order, as the service streams it; jobs are read a batch at a time."""
        size = BATCH if max_pending is None else max(1, min(BATCH, int(max_pending)))
        total = len(jobs) if isinstance(jobs, Sequence) else None
        done = 0
        source = iter(jobs)
        while True:
            batch = list(itertools.islice(source, size))
            if not batch:
                return
            for i, job in enumerate(batch):
                check_job(job, done + i)
            for result in self._batch(batch):
                done += 1
                if progress is not None:
                    progress(done, total)
                yield result

    def _batch(self, jobs: list[Job]) -> Iterator[Result]:
        """One /v1/jobs request per attempt, for the jobs whose results have not arrived."""
        left = list(jobs)
        failure = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self._delay(attempt, failure))
            got = 0
            try:
                for result in self._stream(left):
                    got += 1
                    yield result
                return
            except RetryableError as exc:
                failure = str(exc)
                left = left[got:]
        for _ in left:
            yield infra_result(f"the sandbox service at {self.url} failed after {self.retries + 1} attempts: "
                               f"{failure}", self.retries + 1, host=self.url)

    def _delay(self, attempt: int, failure: str) -> float:
        wait = self.backoff_s * 2 ** (attempt - 1)
        if failure.startswith("HTTP 429") or failure.startswith("HTTP 503"):
            digits = failure.partition("retry-after=")[2].split(" ")[0]
            if digits.replace(".", "", 1).isdigit():
                wait = max(wait, float(digits))
        return min(wait, 30.0)

    def _stream(self, jobs: list[Job]) -> Iterator[Result]:
        body = {"jobs": [job_to_dict(j) for j in jobs]}
        expected = 0
        try:
            with self._http.stream("POST", "/v1/jobs", json=body) as response:
                check_response(response)
                for raw in response.iter_lines():
                    if not raw.strip():
                        continue
                    doc = json.loads(raw)
                    if "done" in doc:
                        if doc["done"] != expected or expected != len(jobs):
                            raise RetryableError(f"the stream ended after {expected} of {len(jobs)} results")
                        return
                    if doc.get("index") != expected:
                        raise RetryableError(f"result {doc.get('index')} arrived where {expected} was due")
                    if "error" in doc:
                        raise RetryableError(f"the service failed at job {expected}: {doc['error']}")
                    expected += 1
                    yield result_from_dict(doc["result"])
        except httpx.HTTPError as exc:
            raise RetryableError(f"{type(exc).__name__}: {exc}") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise RetryableError(f"a malformed answer ({type(exc).__name__}: {exc})") from None
        raise RetryableError(f"the stream ended after {expected} of {len(jobs)} results without its last line")

    # ------------------------------------------------------------------ the rest of the Sandbox API
    def session(self, language: str = "python", *, limits: Optional[SessionLimits] = None) -> "RemoteSession":
        """A stateful interpreter on the service (``POST /v1/sessions``). Raises InfraError when none opened."""
        body: dict[str, Any] = {"language": language}
        if limits is not None:
            body["limits"] = {k: getattr(limits, k) for k in limits.__dataclass_fields__}
        doc = self._call("POST", "/v1/sessions", body)
        return RemoteSession(self, doc["id"], language, SessionLimits(**doc["limits"]))

    def warmup(self, languages: Sequence[str] = ("python",), per_host: Optional[int] = None,
               limits: Optional[Limits] = None) -> None:
        """Ask the service to start containers for these languages now (``POST /v1/warmup``)."""
        body: dict[str, Any] = {"languages": list(languages)}
        if limits is not None:
            body["limits"] = {k: getattr(limits, k) for k in limits.__dataclass_fields__}
        self._call("POST", "/v1/warmup", body)

    def health(self) -> dict:
        return self._call("GET", "/health", None)

    def stats(self) -> dict:
        return self.health().get("pool", {})

    def _call(self, method: str, path: str, body: Optional[dict]) -> Any:
        """One JSON request with retries; InfraError when the service cannot answer, BadJob for a 4xx."""
        failure = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self._delay(attempt, failure))
            try:
                response = self._http.request(method, path, json=body)
                check_response(response)
            except RetryableError as exc:
                failure = str(exc)
                continue
            except httpx.HTTPError as exc:
                failure = f"{type(exc).__name__}: {exc}"
                continue
            return response.json() if response.status_code != 204 else None
        raise InfraError(f"the sandbox service at {self.url} did not answer {method} {path} after "
                         f"{self.retries + 1} attempts: {failure}")


class RetryableError(Exception):
    """The service or the network failed; the request may be sent again."""


class RemoteSession:
    """A session on the service: the same calls as `Session`; a context manager.

    A lost connection during a call is that call's ``infra_error`` `CellResult` and closes
    the session here (its state on the service can no longer be trusted to be what the
    caller thinks), as a crashed container does in the library; later calls raise
    `SessionClosed`.
    """

    def __init__(self, owner: RemoteSandbox, session_id: str, language: str, limits: SessionLimits) -> None:
        self._owner, self.id, self.language, self.limits = owner, session_id, language, limits
        self._reason: Optional[str] = None

    def __enter__(self) -> "RemoteSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._reason is not None

    def run(self, code: str, *, limits: Optional[SessionLimits] = None) -> CellResult:
        body: dict[str, Any] = {"code": code}
        if limits is not None:
            body["limits"] = {k: getattr(limits, k) for k in ("cpu_s", "wall_s", "output_bytes")}
        t0 = time.monotonic()
        try:
            doc = self._request("POST", f"/v1/sessions/{self.id}/run", body, timeout=(limits or self.limits).wall_s + 60)
        except InfraError as exc:
            self._reason = "crashed"
            self._delete_quietly()
            return CellResult(status="infra_error", stdout="", stderr="", value=None, error=str(exc),
                              traceback=None, wall_s=round(time.monotonic() - t0, 6), cpu_s=0.0)
        return cell_from_dict(doc)

    def put_files(self, files: dict) -> None:
        import base64

        encoded = {p: c if isinstance(c, str) else {"base64": base64.b64encode(c).decode()} for p, c in files.items()}
        self._request("POST", f"/v1/sessions/{self.id}/files", {"files": encoded})

    def get_files(self, paths: Sequence[str]) -> dict[str, Optional[bytes]]:
        import base64

        doc = self._request("POST", f"/v1/sessions/{self.id}/files/get", {"paths": list(paths)})
        return {p: None if c is None else base64.b64decode(c) for p, c in doc["files"].items()}

    def close(self) -> None:
        if self._reason is None:
            self._reason = "closed"
            self._delete_quietly()

    def _delete_quietly(self) -> None:
        try:
            self._owner._http.delete(f"/v1/sessions/{self.id}", timeout=30)
        except httpx.HTTPError:
            pass   # the service's idle TTL reclaims it

    def _request(self, method: str, path: str, body: dict, timeout: Optional[float] = None) -> Any:
        """One call, never retried (a cell is not idempotent); the service's 4xx as exceptions."""
        if self._reason is not None:
            raise SessionClosed(f"session {self.id} is closed ({self._reason}); open a new one")
        try:
            response = self._owner._http.request(method, path, json=body, timeout=timeout)
        except httpx.HTTPError as exc:
            raise InfraError(f"the sandbox service at {self._owner.url}: {type(exc).__name__}: {exc}") from None
        if response.status_code in (404, 410):
            self._reason = "closed"
            raise SessionClosed(detail(response))
        try:
            check_response(response)
        except RetryableError as exc:
            raise InfraError(str(exc)) from None
        return response.json() if response.status_code != 204 else None


def check_job(job: object, index: int) -> None:
    if not isinstance(job, Job):
        raise SandboxError(f"run_many: jobs[{index}] is a {type(job).__name__}, not a Job")


def detail(response: httpx.Response) -> str:
    try:
        return str(response.json().get("detail"))
    except ValueError:
        return response.text[:500]


def check_response(response: httpx.Response) -> None:
    """RetryableError for 429/5xx, BadJob for another 4xx (the caller's mistake: the service says which field)."""
    code = response.status_code
    if code < 400:
        return
    if isinstance(response.stream, httpx.SyncByteStream) or not response.is_closed:
        response.read()
    if code in RETRY_STATUSES or code >= 500:
        after = response.headers.get("retry-after", "")
        raise RetryableError(f"HTTP {code} retry-after={after} {detail(response)}")
    if code == 401:
        raise SandboxError(f"the sandbox service at {response.url} refused the token: {detail(response)}; "
                           "pass RemoteSandbox(token=...) or token_file with the service's token")
    raise BadJob(f"the sandbox service refused the request (HTTP {code}): {detail(response)}")



__all__ = ["RemoteSandbox", "RemoteSession"]
