"""`Sandbox`: run untrusted programs in warm, locked-down Docker containers."""

from __future__ import annotations

import base64
import logging
import os
import secrets
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict
from typing import Callable, Iterable, Optional, Sequence


from . import images
from .container import ContainerSpec
from .engine import connect
from .errors import InfraError, SandboxError
from .pool import HostPool
from .types import Job, Limits, Result, infra_result
from .verdict import build_result

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

    ``hosts``: Docker engine URLs (``unix://…``, ``tcp://host:2375``); default: the
    local engine (``DOCKER_HOST`` or the default socket). ``slots``: jobs at once per
    host (default: the local CPU count; for remote hosts, the engine's CPU count).
    ``retries``: extra attempts, each on a fresh container, after an infrastructure
    error; only then is ``infra_error`` reported. ``auto_build``: build missing
    images instead of raising. ``runtime``: an OCI runtime other than the engine's
    default (``runsc`` for gVisor) for code that is hostile, not merely wrong.
    """

    def __init__(self, hosts: Optional[Sequence[str]] = None, *, slots: Optional[int] = None,
                 retries: int = 2, cpus_per_job: float = 1.0, spare: int = 1,
                 max_jobs_per_container: int = 1000, auto_build: bool = False,
                 runtime: Optional[str] = None) -> None:
        self.retries = retries
        self.cpus_per_job = cpus_per_job
        self.auto_build = auto_build
        self.runtime = runtime
        self.pool_id = secrets.token_hex(4)
        self._cond = threading.Condition()
        self._image_refs: dict[tuple[str, str], str] = {}
        self._ids = iter(range(1, 1 << 62))
        self.pools: list[HostPool] = []
        targets: list[Optional[str]] = list(hosts) if hosts else [None]
        try:
            for host in targets:
                client = connect(host)
                name = host or client.api.base_url
                n = slots or (default_slots() if host is None else int(client.info().get("NCPU", 1)))
                self.pools.append(HostPool(client, name, n, self.pool_id, spare=spare,
                                           max_jobs_per_container=max_jobs_per_container))
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
        for pool in self.pools:
            pool.close()

    # ------------------------------------------------------------------ public API
    def run(self, job: Job) -> Result:
        """Run one job; never raises for anything the program does."""
        if not isinstance(job, Job):
            raise SandboxError(f"Sandbox.run takes a Job, got {type(job).__name__}")
        return self._run_with_retries(job)

    def run_many(self, jobs: Iterable[Job], progress: Optional[Progress] = None) -> list[Result]:
        """Run jobs concurrently (one per slot); results come back in job order."""
        jobs = list(jobs)
        for i, job in enumerate(jobs):
            if not isinstance(job, Job):
                raise SandboxError(f"run_many: jobs[{i}] is a {type(job).__name__}, not a Job")
        if not jobs:
            return []
        results: list[Optional[Result]] = [None] * len(jobs)
        done = 0
        done_lock = threading.Lock()

        def one(i: int) -> None:
            nonlocal done
            results[i] = self._run_with_retries(jobs[i])
            if progress is not None:
                with done_lock:
                    done += 1
                    progress(done, len(jobs))

        with ThreadPoolExecutor(max_workers=min(self.slots, len(jobs)), thread_name_prefix="proctor-job") as ex:
            for future in [ex.submit(one, i) for i in range(len(jobs))]:
                future.result()
        return [r for r in results if r is not None]

    def warmup(self, languages: Sequence[str] = ("python",), per_host: Optional[int] = None,
               limits: Optional[Limits] = None) -> None:
        """Start containers now so the first jobs do not wait for them (~0.3 s each).

        A container serves jobs of one memory/pids/disk budget: pass the ``limits``
        your jobs will use.
        """
        for pool in self.pools:
            for language in languages:
                spec = self._spec(pool, Job(language=language, code="", limits=limits))  # type: ignore[arg-type]
                pool.warm(spec, per_host or pool.slots)

    def stats(self) -> dict[str, object]:
        return {p.host: {"slots": p.slots, "started": p.started, "recycled": p.recycled,
                         "idle": p.idle_count} for p in self.pools}

    # ------------------------------------------------------------------ internals
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
                             cpus=self.cpus_per_job, runtime=self.runtime)

    def _take_slot(self, avoid: Optional[HostPool]) -> HostPool:
        with self._cond:
            while True:
                free = [p for p in self.pools if p.busy < p.slots]
                if free:
                    # Prefer hosts that are not failing, then the least loaded one.
                    free.sort(key=lambda p: (p is avoid and len(self.pools) > 1, p.failures > 0,
                                             p.busy / p.slots))
                    pool = free[0]
                    pool.busy += 1
                    return pool
                self._cond.wait()

    def _give_slot(self, pool: HostPool) -> None:
        with self._cond:
            pool.busy -= 1
            self._cond.notify()

    def _run_with_retries(self, job: Job) -> Result:
        attempts, errors, avoid = 0, [], None
        t0 = time.monotonic()
        while attempts <= self.retries:
            attempts += 1
            pool = self._take_slot(avoid)
            try:
                result = self._attempt(pool, job, attempts)
                pool.failures = 0
                return result
            except InfraError as exc:
                pool.failures += 1
                errors.append(f"attempt {attempts} on {pool.host}: {exc}")
                log.warning("sandbox infra error (attempt %d/%d): %s", attempts, self.retries + 1, exc)
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
            reply = container.execute(request, timeout_s=reply_timeout(job))
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


def encode_job(job: Job, job_id: int) -> dict:
    files = {path: base64.b64encode(c.encode() if isinstance(c, str) else c).decode()
             for path, c in (job.files or {}).items()}
    return {
        "type": "job", "id": job_id, "language": job.language, "code": job.code, "tests": job.tests,
        "cases": [list(c) for c in (job.cases or ())], "files": files,
        "limits": asdict(job.effective_limits), "nonce": secrets.token_hex(16),
    }


def reply_timeout(job: Job) -> float:
    """How long the server may take before we call it hung: every limit, plus slack."""
    lim = job.effective_limits
    runs = (1 if (job.tests or not job.cases) else 0) + len(job.cases or ())
    compile_s = lim.compile_s if job.language in ("c", "cpp") else 0.0
    return compile_s + runs * (lim.wall_s + 3.0) + 15.0


__all__ = ["Sandbox", "default_slots", "encode_job", "reply_timeout"]
