"""`Sandbox`: run untrusted programs in warm, locked-down Docker containers."""

from __future__ import annotations

import base64
import functools
import logging
import os
import secrets
import threading
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict
from typing import Callable, Iterable, Iterator, Optional, Sequence, Sized


from . import images
from .cache import Claim, VerdictCache, job_key
from .container import ContainerSpec
from .engine import check_runtime, connect
from .breaker import Breaker, HostHealth, down_warning, refusal, startup_failure, up_warning
from .errors import HostDown, InfraError, NoHostAvailable, SandboxError
from .literal_tests import encode_plan, literal_plan
from .hosts import TLSArg
from .pool import HostPool
from .session import Session, SessionLimits, Sessions, session_args
from .server.budgets import compile_mb, resident_mb, resident_pids
from .types import LANGUAGES, Job, Limits, Result, infra_result
from .verdict import build_result, output_digest

log = logging.getLogger("proctor.sandbox")
Progress = Callable[[int, int], None]


def default_slots() -> int:
    """Jobs at once on the local engine: one per CPU this process may use.

    Verification is CPU-bound; more would only make time limits fire under load.
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


class Sandbox:
    """A pool of warm sandbox containers on one or more Docker engines.

    >>> with Sandbox() as sb:
    ...     r = sb.run(Job(language="python", code="print(1)"))

    ``hosts``: Docker engine URLs (``unix://…``, ``ssh://user@host``, ``tcp://host:2376``
    with TLS); default: the local engine (``DOCKER_HOST`` or the default socket).
    ``tls``: a `TLSConfig` for every TCP host, or a mapping host -> `TLSConfig`
    (default: ``DOCKER_TLS_VERIFY``/``DOCKER_CERT_PATH``). A plain-TCP host is root for
    anyone who reaches it: refused unless ``insecure_tcp=True``. ``slots``: jobs at once per
    host (default: the local CPU count; for remote hosts, the engine's CPU count).
    ``warm_kinds``: container kinds (a language at one memory/pids/disk budget) kept warm
    side by side, ``slots`` of each, plus ``spare`` (see `HostPool`): a batch that mixes
    languages does not swap containers at each change of language.
    ``retries``: extra attempts, each on a fresh container, after an infrastructure
    error; only then is ``infra_error`` reported. ``auto_build``: build missing
    images instead of raising. ``runtime``: an OCI runtime other than the engine's
    default (``runsc`` for gVisor) for code that is hostile, not merely wrong.
    ``cache``: a `VerdictCache`; identical jobs then run once (``Result.cached`` marks
    the others), including identical jobs in one ``run_many``.
    ``startup_check``: languages whose container is started on every host before the
    constructor returns (``()``: none); a host that cannot start one is down from the
    start, and if no host can, `NoHostAvailable` says why and how to fix it. After
    ``down_after`` container starts in a row fail on a host, it is down: jobs go to the
    other hosts, or return ``infra_error`` at once when none is up; it is probed after
    ``probe_after_s`` (doubling while it fails) or on `reset_host`. One warning per change.
    """

    def __init__(self, hosts: Optional[Sequence[str]] = None, *, slots: Optional[int] = None,
                 retries: int = 2, cpus_per_job: float = 1.0, spare: int = 1, warm_kinds: int = 4,
                 max_jobs_per_container: int = 1000, auto_build: bool = False,
                 runtime: Optional[str] = None, cache: Optional[VerdictCache] = None,
                 tls: TLSArg = None, insecure_tcp: bool = False,
                 startup_check: Sequence[str] = ("python",), down_after: int = 3,
                 probe_after_s: float = 5.0) -> None:
        if not isinstance(warm_kinds, int) or warm_kinds < 1:
            raise SandboxError(f"Sandbox(warm_kinds={warm_kinds!r}): give a whole number >= 1, the container "
                               "kinds (language x budget) kept warm side by side; 4 is the default")
        self.retries = retries
        self.cpus_per_job = cpus_per_job
        self.auto_build = auto_build
        self.runtime = runtime
        if cache is not None and not isinstance(cache, VerdictCache):
            raise SandboxError(f"Sandbox(cache=) takes a VerdictCache or None, got {type(cache).__name__}")
        self.cache = cache
        self._key_refs: dict[str, str] = {}
        self.pool_id = secrets.token_hex(4)
        self._cond = threading.Condition()
        self._image_refs: dict[tuple[str, str], str] = {}
        self._ids = iter(range(1, 1 << 62))
        self.pools: list[HostPool] = []
        self._sessions = Sessions()
        self._checking = True        # the start-up check reports once, at its end
        self._waiting = 0            # jobs waiting for a slot (guarded by _cond)
        self._probe_language = startup_check[0] if startup_check else "python"
        self._gvisor: dict[str, bool] = {}   # host -> whether `runtime` is gVisor there
        targets: list[Optional[str]] = list(hosts) if hosts else [None]
        try:
            for host in targets:
                client = connect(host, tls=tls, insecure_tcp=insecure_tcp)
                name = host or client.api.base_url
                self._gvisor[name] = check_runtime(client, runtime, name)
                n = slots or (default_slots() if host is None else int(client.info().get("NCPU", 1)))
                breaker = Breaker(name, self._cond, down_after=down_after, probe_after_s=probe_after_s,
                                  runtime=runtime, on_change=self._host_changed)
                self.pools.append(HostPool(client, name, n, self.pool_id, breaker, spare=spare,
                                           warm_kinds=warm_kinds, max_jobs_per_container=max_jobs_per_container))
            self._check_hosts(startup_check)
        except BaseException:
            self.close()
            raise
        self.slots = sum(p.slots for p in self.pools)

    # ------------------------------------------------------------------ context
    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._sessions.close()
        for pool in self.pools:
            pool.close()

    # ------------------------------------------------------------------ public API
    def run(self, job: Job) -> Result:
        """Run one job; never raises for anything the program does."""
        if not isinstance(job, Job):
            raise SandboxError(f"Sandbox.run takes a Job, got {type(job).__name__}")
        if self.cache is None:
            return self._run_with_retries(job)
        claim = self.cache.claim(self._cache_key(job))
        if claim.owner:
            self._run_claimed(claim, job)
        return claim.future.result()

    def run_many(self, jobs: Iterable[Job], progress: Optional[Progress] = None, *,
                 max_pending: Optional[int] = None) -> list[Result]:
        """Run jobs concurrently (one per slot); one result per job, in job order.

        ``jobs``: any iterable, a generator included. ``max_pending``: at most this many
        jobs read but not yet finished (default: no bound). ``progress(done, total)``
        after each job; ``total`` is ``len(jobs)``, or for a generator the jobs read so far.
        """
        if isinstance(jobs, Sequence):   # a list: refuse a bad job before any runs
            for i, job in enumerate(jobs):
                _check_job(job, i)
        bound = None if max_pending is None else _check_pending(max_pending)
        return list(self._stream(jobs, progress, bound))

    def imap(self, jobs: Iterable[Job], progress: Optional[Progress] = None, *,
             max_pending: Optional[int] = None) -> Iterator[Result]:
        """Like `run_many`, but yields each result, in job order, as soon as it is ready.

        ``jobs`` is read lazily, at most ``max_pending`` (default: 4 per slot) ahead of
        the result last yielded, so a trainer streaming completions holds only those.
        A slow job holds back the results after it (order is kept), not the work on them.
        """
        bound = 4 * self.slots if max_pending is None else _check_pending(max_pending)
        return self._stream(jobs, progress, bound)

    def session(self, language: str = "python", *, limits: Optional[SessionLimits] = None) -> Session:
        """A stateful interpreter in a container of its own (session.py); close it, or use it in a ``with``.

        Raises BadJob for bad arguments, InfraError when no container could be started.
        """
        lim = session_args(language, limits)
        up = [p for p in self.pools if p.breaker.up]
        if not up:
            raise NoHostAvailable(refusal(self.health_down(), []))
        pool = min(up, key=lambda p: p.busy / p.slots)
        spec = self._spec(pool, Job(language=language, code="", limits=Limits(memory_mb=lim.memory_mb)))  # type: ignore[arg-type]
        return self._sessions.open(spec, pool.client, pool.host, pool.pool_id, lim, language)

    def warmup(self, languages: Sequence[str] = ("python",), per_host: Optional[int] = None,
               limits: Optional[Limits] = None) -> None:
        """Start containers now so the first jobs do not wait for them (~0.3 s each).

        A container serves jobs of one memory/pids/disk budget: pass the ``limits``
        your jobs will use. Raises NoHostAvailable when no host could start them.
        """
        for pool in self.pools:
            if not pool.breaker.up:
                continue   # a probe brings it back; warming it would only fail again
            for language in languages:
                spec = self._spec(pool, Job(language=language, code="", limits=limits))  # type: ignore[arg-type]
                pool.warm(spec, per_host or pool.slots)
        # A host is warm if it is up and its last start worked; fewer failures than
        # down_after leave a host up, but a warmup that started nothing must say so.
        if not any(p.breaker.up and p.breaker.failures == 0 for p in self.pools):
            raise NoHostAvailable("warmup: no sandbox host started a container. " + " ".join(
                f"{p.host}: {p.breaker.cause}. To fix: {p.breaker.fix}." for p in self.pools))

    def reset_host(self, host: Optional[str] = None) -> list[HostHealth]:
        """Probe ``host`` (default: every down host) now: start one container; up if it starts.

        Returns the health of those hosts after the probe. Hosts that are up are left alone.
        """
        pools = [p for p in self.pools if host is None or p.host == host]
        if not pools:
            raise SandboxError(f"reset_host: no host {host!r} here; hosts: {', '.join(p.host for p in self.pools)}")
        for pool in pools:
            if pool.breaker.begin_probe(force=True):
                pool.probe(self._spec_for, self._probe_language)
        with self._cond:   # a probe already running in the background: wait for its answer
            while any(p.breaker.probing for p in pools):
                self._cond.wait()
        return [p.breaker.health() for p in pools]

    def health(self) -> dict[str, HostHealth]:
        """Each host's state: up, or down with the cause, the fix and when it is probed next."""
        return {p.host: p.breaker.health() for p in self.pools}

    def health_down(self) -> list[HostHealth]:
        return [h for h in self.health().values() if not h.up]

    def stats(self) -> dict[str, object]:
        return {p.host: {"slots": p.slots, "started": p.started, "recycled": p.recycled,
                         "idle": p.idle_count, "up": p.breaker.up, "start_failures": p.start_failures}
                for p in self.pools}

    # ------------------------------------------------------------------ internals
    def _stream(self, jobs: Iterable[Job], progress: Optional[Progress],
                bound: Optional[int]) -> Iterator[Result]:
        """The engine of run_many/imap: a window of futures, refilled from ``jobs``, read in order."""
        source = iter(jobs)
        counter = _Counter(progress, len(jobs) if isinstance(jobs, Sized) else None)
        window: deque[Future[Result]] = deque()
        exhausted = False
        with ThreadPoolExecutor(max_workers=self.slots, thread_name_prefix="proctor-job") as ex:
            try:
                while True:
                    while not exhausted and (bound is None or len(window) < bound):
                        job = next(source, _END)
                        if job is _END:
                            exhausted = True
                            break
                        _check_job(job, counter.taken)
                        counter.took()
                        window.append(self._submit(ex, job, counter))
                    if not window:
                        return
                    result = window.popleft().result()
                    if not isinstance(result, Result):
                        # Never skip it: one missing result would pair every later reward with the wrong rollout.
                        raise SandboxError(f"internal error: job {counter.given} produced {type(result).__name__}, "
                                           "not a Result; stopping rather than return fewer results than jobs")
                    counter.given += 1
                    yield result
            finally:
                # Closed early (an imap consumer that stopped reading, a service client that left): jobs
                # not yet started are dropped; running ones end within their limits. A cached job's
                # future is shared with its twins in other batches, so it always runs.
                if self.cache is None:
                    for future in window:
                        future.cancel()

    def _submit(self, ex: ThreadPoolExecutor, job: Job, counter: "_Counter") -> "Future[Result]":
        if self.cache is None:
            future = ex.submit(self._run_with_retries, job)
        else:
            claim = self.cache.claim(self._cache_key(job))
            if claim.owner:
                ex.submit(self._run_claimed, claim, job)
            future = claim.future
        future.add_done_callback(counter.finished)
        return future

    def _run_claimed(self, claim: Claim, job: Job) -> None:
        """Run the job this caller owns in the cache; its twins wait on the claim."""
        assert self.cache is not None
        try:
            result = self._run_with_retries(job)
        except BaseException as exc:
            self.cache.abandon(claim, exc)
            raise
        self.cache.settle(claim, result)

    def _cache_key(self, job: Job) -> str:
        """The job's key: its fields plus what decides its verdict here (image, runtime, CPU share)."""
        name = images.LANGUAGE_IMAGE[job.language]
        ref = self._key_refs.get(name)
        if ref is None:
            ref = self._key_refs[name] = images.image_ref(name)
        return job_key(job, f"{ref}|{self.runtime or 'default'}|{self.cpus_per_job:g}")

    def _spec(self, pool: HostPool, job: Job) -> ContainerSpec:
        name = images.LANGUAGE_IMAGE[job.language]
        key = (pool.host, name)
        ref = self._image_refs.get(key)
        if ref is None:
            try:
                ref = images.require_image(pool.client, name)
            except InfraError:
                if not self.auto_build:
                    raise SandboxError(f"the sandbox image for {job.language!r} is not built on {pool.host}: "
                                       f"run `proctor images build --name {name}`") from None
                images.build_images(pool.client, [name], progress=lambda line: log.info("%s", line))
                ref = images.require_image(pool.client, name)
            self._image_refs[key] = ref
        lim = job.effective_limits
        return ContainerSpec(image=ref, memory_mb=lim.memory_mb, pids=lim.pids, disk_mb=lim.disk_mb,
                             cpus=self.cpus_per_job, runtime=self.runtime,
                             gvisor=self._gvisor.get(pool.host, False),
                             compile_mb=compile_mb(job.language, lim.memory_mb),
                             resident_mb=resident_mb(job.language), resident_pids=resident_pids(job.language))

    def _take_slot(self, avoid: Optional[HostPool]) -> Optional[HostPool]:
        """A slot on a host that is up; None at once when none is up and none is being probed."""
        with self._cond:
            self._waiting += 1
            try:
                while True:
                    self._start_due_probes()
                    up = [p for p in self.pools if p.breaker.up]
                    free = [p for p in up if p.busy < p.slots]
                    if free:
                        # Prefer hosts that are not failing, then the least loaded one.
                        free.sort(key=lambda p: (p is avoid and len(up) > 1, p.failures > 0, p.busy / p.slots))
                        free[0].busy += 1
                        for other in self.pools:
                            other.breaker.jobs_elsewhere += not other.breaker.up
                        return free[0]
                    if not up and not any(p.breaker.probing for p in self.pools):
                        for pool in self.pools:
                            pool.breaker.jobs_refused += 1
                        return None
                    # Woken by a freed slot or a host's change; the timeout, for a probe falling due.
                    waits = [s for s in (p.breaker.seconds_to_probe() for p in self.pools) if s is not None]
                    self._cond.wait(min(waits) + 0.01 if waits else None)
            finally:
                self._waiting -= 1

    def _give_slot(self, pool: HostPool) -> None:
        with self._cond:
            pool.busy -= 1
            self._cond.notify_all()   # slot waiters and start-permit waiters share this condition

    def _start_due_probes(self) -> None:
        for pool in self.pools:
            if pool.breaker.begin_probe() and not pool.submit(
                    lambda p=pool: p.probe(self._spec_for, self._probe_language)):
                pool.breaker.end_probe(False, "the sandbox is closing")

    def _spec_for(self, pool: HostPool, language: str) -> ContainerSpec:
        return self._spec(pool, Job(language=language, code=""))  # type: ignore[arg-type]

    def _check_hosts(self, languages: Sequence[str]) -> None:
        """Start-up check, all hosts at once; NoHostAvailable if none passes, a warning per host that fails."""
        if isinstance(languages, str) or any(lang not in LANGUAGES for lang in languages):
            raise SandboxError(f"Sandbox(startup_check=) takes a sequence of languages ({', '.join(LANGUAGES)}), "
                               f"got {languages!r}")
        if languages:
            with ThreadPoolExecutor(max_workers=len(self.pools), thread_name_prefix="proctor-check") as ex:
                list(ex.map(lambda p: p.check(self._spec_for, languages), self.pools))
        self._checking = False
        down = self.health_down()
        if len(down) == len(self.pools):
            raise NoHostAvailable(startup_failure(down))
        for health in down:
            log.warning("%s", down_warning(health, 0, len(self.pools) - len(down)))

    def _host_changed(self, breaker: Breaker, now_up: bool) -> None:
        """The breaker's one report of a state change (called under _cond)."""
        if self._checking:
            return
        if now_up:
            log.warning("%s", up_warning(breaker))
            return
        pool = next(p for p in self.pools if p.breaker is breaker)
        others = sum(p.breaker.up for p in self.pools)
        log.warning("%s", down_warning(breaker.health(), pool.busy + (0 if others else self._waiting), others))

    def _run_with_retries(self, job: Job) -> Result:
        attempts, errors, avoid = 0, [], None
        t0 = time.monotonic()
        while attempts <= self.retries:
            pool = self._take_slot(avoid)
            if pool is None:
                return infra_result(refusal(self.health_down(), errors), attempts,
                                    wall_s=time.monotonic() - t0, host=avoid.host if avoid else "")
            try:
                result = self._attempt(pool, job, attempts + 1)
                pool.failures = 0
                return result
            except HostDown:
                continue   # taken out between our slot and our start: not an attempt; the next slot is elsewhere
            except InfraError as exc:
                attempts += 1
                pool.failures += 1
                errors.append(f"attempt {attempts} on {pool.host}: {exc}")
                # Per attempt only at debug level: a host going down is reported once, by its breaker.
                log.debug("sandbox infra error (attempt %d/%d): %s", attempts, self.retries + 1, exc)
                avoid = pool
            finally:
                self._give_slot(pool)
        return infra_result("; ".join(errors) + ". The program was not judged: drop this sample, "
                            "check `proctor doctor`.", attempts, wall_s=time.monotonic() - t0,
                            host=avoid.host if avoid else "")

    def _attempt(self, pool: HostPool, job: Job, attempt: int) -> Result:
        spec = self._spec(pool, job)
        request = encode_job(job, next(self._ids))
        container = pool.acquire(spec)
        healthy = False
        t0 = time.monotonic()
        try:
            reply = container.execute(request, timeout_s=reply_timeout(job), case_passed=case_check(job))
            # The server swept and scrubbed; if that left anything, the container goes. So
            # does one where the OOM killer struck: Docker's OOMKilled flag, which tells a
            # job that took the server down with it, must only ever speak of one job.
            healthy = bool(reply.get("clean")) and not any(s.get("oom") for s in reply.get("steps", ()))
            return build_result(job, reply, attempts=attempt, host=pool.host)
        except InfraError:
            # Only a job fills a sandbox's memory: if the OOM killer took the server
            # down, that is the job's verdict, not an infrastructure failure.
            if container.oom_killed():
                return Result(status="memory", passed=False, attempts=attempt, host=pool.host,
                              wall_s=round(time.monotonic() - t0, 6),
                              stderr="[proctor] the program exhausted the sandbox's memory; the kernel's "
                                     "OOM killer stopped the sandbox itself\n")
            raise
        finally:
            pool.release(container, healthy)


_END = object()


class _Counter:
    """Jobs read and results handed out by one _stream; calls ``progress`` as jobs finish."""

    def __init__(self, progress: Optional[Progress], total: Optional[int]) -> None:
        self.progress, self.total = progress, total
        self.taken = self.given = self.done = 0
        self.lock = threading.Lock()

    def took(self) -> None:
        with self.lock:
            self.taken += 1

    def finished(self, _future: "Future[Result]") -> None:
        if self.progress is None:
            return
        with self.lock:
            self.done += 1
            self.progress(self.done, self.total if self.total is not None else self.taken)


def _check_job(job: object, index: int) -> None:
    if not isinstance(job, Job):
        raise SandboxError(f"run_many: jobs[{index}] is a {type(job).__name__}, not a Job")


def _check_pending(max_pending: object) -> int:
    if not isinstance(max_pending, int) or isinstance(max_pending, bool) or max_pending < 1:
        raise SandboxError(f"max_pending must be an integer >= 1, got {max_pending!r}")
    return max_pending


def encode_job(job: Job, job_id: int) -> dict:
    """The job as the server gets it. A case's expected output is not in it: only the host compares.

    Python tests made only of literal assertions also travel as a plan the server judges
    itself (literal_tests.py), so no judge process is needed for them. ``fetch_files``
    travels only when the job set it: the server then reads them back (server/fetch.py).
    """
    files = {path: base64.b64encode(c.encode() if isinstance(c, str) else c).decode()
             for path, c in (job.files or {}).items()}
    request = {
        "type": "job", "id": job_id, "language": job.language, "code": job.code, "tests": job.tests,
        "cases": [stdin for stdin, _expected in (job.cases or ())], "files": files,
        "limits": asdict(job.effective_limits), "nonce": secrets.token_hex(16),
        "stop_on_first_failure": job.stop_on_first_failure,
    }
    if job.fetch_files is not None:
        request["fetch_files"] = list(job.fetch_files)
    if job.language == "python" and job.tests:
        plan = _plan(job.tests)
        if plan is not None:
            request["plan"] = plan
    return request


@functools.lru_cache(maxsize=1024)
def _plan(tests: str) -> Optional[list[dict]]:
    """The encoded literal plan of ``tests`` (None: a judge runs them); the G samples of a prompt share it."""
    checks = literal_plan(tests)
    return encode_plan(checks) if checks is not None else None


def case_check(job: Job) -> Optional[Callable[[int, Optional[str]], bool]]:
    """Whether case i's output (its normalized sha256, from the server) matches the expected one."""
    if not job.cases:
        return None
    cases = job.cases

    def passed(index: int, digest: Optional[str]) -> bool:
        return 0 <= index < len(cases) and digest is not None and digest == output_digest(cases[index][1])

    return passed


def reply_timeout(job: Job) -> float:
    """How long the server may take before we call it hung: every limit, plus slack."""
    lim = job.effective_limits
    runs = (1 if (job.tests or not job.cases) else 0) + len(job.cases or ())
    compile_s = lim.compile_s if job.language != "python" else 0.0
    return compile_s + runs * (lim.wall_s + 3.0) + 15.0


__all__ = ["Sandbox", "case_check", "default_slots", "encode_job", "reply_timeout"]
