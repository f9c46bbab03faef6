"""`RaySandbox`: the `Sandbox` API (run, run_many, imap, session, warmup) on a fleet of Ray nodes.

    with RaySandbox(address="auto") as sb:      # or sandbox: {backend: ray, address: auto}
        results = sb.run_many(jobs)             # results in job order

Every client in the cluster that names the same fleet (``name``, ``namespace``) shares one
router actor, hence one job budget and one verdict cache (router.py). Ray is imported
only here, when a `RaySandbox` is made: the default, single-machine path never needs it.
"""

from __future__ import annotations

import secrets
from typing import Any, Iterable, Iterator, Optional, Sequence, Sized

from ..errors import InfraError, SandboxError
from ..runner import Progress
from ..types import Job, Limits, Result, infra_result
from .options import DEFAULT_NAME, DEFAULT_NAMESPACE, FleetInfo, FleetOptions
from .session import FleetSession

COLLECT_WAIT_S = 1.0


def require_ray() -> Any:
    """The ``ray`` module, or a SandboxError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise SandboxError("sandbox backend 'ray' needs Ray, which is not installed here: "
                           "pip install 'proctor[ray]'") from None
    return ray


class RaySandbox:
    """A client of the sandbox fleet on a Ray cluster; a context manager; one per process is enough.

    ``address``: the cluster (``auto``: the one this machine runs in, as ``ray.init``
    finds it). ``name`` / ``namespace``: the fleet; clients naming the same one share it
    (the first to attach starts it; the last to close stops it). The other keyword
    arguments are `FleetOptions`; every client of a fleet must give the same ones.
    """

    def __init__(self, address: str = "auto", *, name: str = DEFAULT_NAME, namespace: str = DEFAULT_NAMESPACE,
                 **options: Any) -> None:
        if "startup_check" in options:
            options["startup_check"] = tuple(options["startup_check"])
        self.options = FleetOptions(**options)
        self.name, self.namespace, self.address = name, namespace, address
        self.cache = None   # the fleet's cache lives in the router: see cache_stats()
        self._ray = require_ray()
        self._id = secrets.token_hex(8)
        self._closed = False
        self._owns_ray = not self._ray.is_initialized()
        if self._owns_ray:
            self._init_ray()
        try:
            self._router, self.fleet = self._attach()
        except BaseException:
            self._shutdown_ray()
            raise

    def _init_ray(self) -> None:
        try:
            self._ray.init(address=self.address, namespace=self.namespace, log_to_driver=False,
                           include_dashboard=False if self.address in (None, "local") else None)
        except ConnectionError as exc:
            raise SandboxError(f"no Ray cluster answers at {self.address!r} ({exc}): start one with "
                               "`ray start --head`, and sandbox nodes with `ray start --address HEAD:6379 "
                               "--resources='{\"sandbox\": 1}'`") from None

    def _attach(self) -> tuple[Any, FleetInfo]:
        """The fleet's router (made if absent) and what it reports; one retry if it ended meanwhile."""
        from .router import FleetRouter

        router_class = self._ray.remote(FleetRouter)
        for attempt in (1, 2):
            router = router_class.options(
                name=self.name, namespace=self.namespace, get_if_exists=True, num_cpus=0,
                max_concurrency=1000, max_restarts=0, scheduling_strategy=self._here(),
            ).remote(self.name, self.options)
            try:
                return router, self._ray.get(router.attach.remote(self._id, self.options))
            except self._ray.exceptions.RayActorError:
                if attempt == 2:
                    raise
            except SandboxError as exc:
                self._ray.kill(router)   # a router whose hosts never started is no use to the next client
                raise getattr(exc, "cause", None) or exc from None   # the router's own error, not Ray's wrapper
        raise AssertionError("unreachable")

    def _here(self) -> Any:
        """The router goes on the head node when it can: a sandbox node may be the one that is lost,
        and the cluster does not outlive its head anyway."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        heads = [n["NodeID"] for n in self._ray.nodes() if n.get("Alive") and "node:__internal_head__" in n["Resources"]]
        if heads:   # hard: under load a soft affinity was seen to fall back to a sandbox node
            return NodeAffinitySchedulingStrategy(heads[0], soft=False)
        return NodeAffinitySchedulingStrategy(self._ray.get_runtime_context().get_node_id(), soft=True)

    # ------------------------------------------------------------------ context
    def __enter__(self) -> "RaySandbox":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Detach; the last client to close stops the fleet (its hosts' containers and actors)."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._ray.get(self._router.detach.remote(self._id), timeout=60) == 0:
                self._ray.get(self._router.shutdown.remote(), timeout=120)
                self._ray.kill(self._router)
        except self._ray.exceptions.RayError:
            pass   # the router is gone already: its hosts went with it (it owned them)
        finally:
            self._shutdown_ray()

    def _shutdown_ray(self) -> None:
        if self._owns_ray and self._ray.is_initialized():
            self._ray.shutdown()

    @property
    def slots(self) -> int:
        """Jobs the fleet runs at once (the nodes that are up), shared by every client."""
        return self.health().slots

    def health(self) -> FleetInfo:
        """Each node's state now: up, or lost with the cause; nodes whose host never started."""
        return self._ray.get(self._router.info.remote(), timeout=60)

    def stats(self) -> dict:
        return self._ray.get(self._router.stats.remote(), timeout=120)

    def images(self) -> dict:
        """The sandbox images on each node that is up: {node: {image name: {present, ref}}}."""
        return self._ray.get(self._router.images.remote(), timeout=120)

    def traffic(self) -> dict[str, int]:
        """The router's counters since it started: jobs, results, and actor calls by kind."""
        return self._ray.get(self._router.traffic_stats.remote(), timeout=60)

    def cache_stats(self) -> Optional[dict]:
        """The fleet-wide verdict cache's counters (`CacheStats` fields), or None without a cache."""
        return self._ray.get(self._router.cache_stats.remote(), timeout=60)

    # ------------------------------------------------------------------ jobs
    def run(self, job: Job) -> Result:
        """Run one job on the fleet; never raises for anything the program, a node or the router does."""
        return self.run_many([job])[0]

    def run_many(self, jobs: Iterable[Job], progress: Optional[Progress] = None, *,
                 max_pending: Optional[int] = None) -> list[Result]:
        """One result per job, in job order (``max_pending``: jobs sent ahead of results read; default all)."""
        if isinstance(jobs, Sequence):   # a list: refuse a bad job before any runs
            for i, job in enumerate(jobs):
                _check_job(job, i)
        bound = _check_pending(max_pending) if max_pending is not None else None
        return list(self._stream(jobs, progress, bound))

    def imap(self, jobs: Iterable[Job], progress: Optional[Progress] = None, *,
             max_pending: Optional[int] = None) -> Iterator[Result]:
        """Yields each result in job order as soon as it and those before it are done.

        ``jobs`` is read lazily, at most ``max_pending`` (default: 4 per fleet slot) ahead
        of the result last yielded.
        """
        bound = _check_pending(max_pending) if max_pending is not None else 4 * max(1, self.slots)
        return self._stream(jobs, progress, bound)

    def _stream(self, jobs: Iterable[Job], progress: Optional[Progress], bound: Optional[int]) -> Iterator[Result]:
        """Send jobs up to ``bound`` ahead of what was yielded, collect results, yield them in order."""
        if self._closed:
            raise SandboxError("this RaySandbox is closed; make a new one")
        window = _Window(iter(jobs), len(jobs) if isinstance(jobs, Sized) else None, progress, bound)
        batch = secrets.token_hex(8)
        sent: list = []   # submit calls not yet known to have worked
        try:
            while True:
                chunk = window.read()
                if chunk:
                    sent.append(self._router.submit.remote(batch, window.taken - len(chunk), chunk))
                while window.next in window.ready:
                    yield window.pop()
                if window.finished:
                    return
                if window.next < window.taken:
                    sent = self._check_sent(sent)
                    window.arrived(self._collect(batch, window))
        finally:
            try:
                self._router.close_batch.remote(batch)
            except self._ray.exceptions.RayError:
                pass

    def _check_sent(self, sent: list) -> list:
        """Submissions still in flight; one the router refused raises here, not as a wait for ever."""
        done, left = self._ray.wait(sent, num_returns=len(sent), timeout=0)
        try:
            self._ray.get(done)
        except self._ray.exceptions.RayTaskError as exc:
            raise SandboxError(f"the sandbox fleet refused a batch: {exc}") from None
        except self._ray.exceptions.RayError:
            pass   # the router is gone: collect says so for every job
        return left

    def _collect(self, batch: str, window: "_Window") -> list[tuple[int, Result]]:
        """Finished results; when the router is gone, infra_error for every job still owed (read or not)."""
        try:
            return self._ray.get(self._router.collect.remote(batch, COLLECT_WAIT_S))
        except self._ray.exceptions.RayError as exc:
            message = (f"the sandbox fleet's router ({self.namespace}/{self.name}) is gone ({type(exc).__name__}); "
                       "the program was not judged: drop this sample and make a new RaySandbox")
            window.drain()
            return [(i, infra_result(message, 0)) for i in range(window.next, window.taken)
                    if i not in window.ready]

    # ------------------------------------------------------------------ the rest of the Sandbox API
    def session(self, language: str = "python", *, limits: Optional[Any] = None) -> FleetSession:
        """A stateful interpreter in a container on the least loaded node (session.py)."""
        handle, info = self._ray.get(self._router.session_host.remote(), timeout=60)
        try:
            session_id, lim = self._ray.get(handle.open_session.remote(language, limits), timeout=300)
        except self._ray.exceptions.RayActorError as exc:
            raise InfraError(f"the sandbox node {info.address} was lost while opening a session: {exc}") from None
        return FleetSession(handle, session_id, language, lim, info.address)

    def warmup(self, languages: Sequence[str] = ("python",), per_host: Optional[int] = None,
               limits: Optional[Limits] = None) -> None:
        """Start containers for ``languages`` on every node now (``per_host``: each node's slots)."""
        del per_host   # each node warms its own slots
        self._ray.get(self._router.warmup.remote(list(languages), limits), timeout=900)


class _Window:
    """One stream's bookkeeping: jobs read (``taken``), results arrived (``ready``), the next to yield."""

    def __init__(self, source: Iterator[Job], total: Optional[int], progress: Optional[Progress],
                 bound: Optional[int]) -> None:
        self.source, self.total, self.progress, self.bound = source, total, progress, bound
        self.taken = self.next = self.done = 0
        self.exhausted = False
        self.ready: dict[int, Result] = {}

    @property
    def finished(self) -> bool:
        return self.exhausted and self.next == self.taken

    def read(self) -> list[Job]:
        room = (self.bound - (self.taken - self.next)) if self.bound is not None else 1 << 62
        chunk: list[Job] = []
        while not self.exhausted and len(chunk) < room:
            job = next(self.source, None)
            if job is None:
                self.exhausted = True
                break
            _check_job(job, self.taken + len(chunk))
            chunk.append(job)
        self.taken += len(chunk)
        return chunk

    def drain(self) -> None:
        """Read every job left, so each gets its (infra_error) result: one result per job, always."""
        self.bound = None
        self.read()

    def arrived(self, results: list[tuple[int, Result]]) -> None:
        for index, result in results:
            if not isinstance(result, Result):
                raise SandboxError(f"internal error: job {index} produced {type(result).__name__}, not a Result")
            self.ready[index] = result
            self.done += 1
            if self.progress is not None:
                self.progress(self.done, self.total if self.total is not None else self.taken)

    def pop(self) -> Result:
        result = self.ready.pop(self.next)
        self.next += 1
        return result


def _check_job(job: object, index: int) -> None:
    if not isinstance(job, Job):
        raise SandboxError(f"run_many: jobs[{index}] is a {type(job).__name__}, not a Job")


def _check_pending(max_pending: object) -> int:
    if not isinstance(max_pending, int) or isinstance(max_pending, bool) or max_pending < 1:
        raise SandboxError(f"max_pending must be an integer >= 1, got {max_pending!r}")
    return max_pending


__all__ = ["RaySandbox", "require_ray"]
