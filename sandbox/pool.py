"""Warm containers on one Docker engine: handed out one job at a time, recycled on any doubt."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Optional, Sequence

import docker

from .breaker import Breaker
from .container import LABEL, ContainerSpec, WarmContainer
from .errors import HostDown, InfraError, SandboxError
from .owner import sweep_orphans

SpecFor = Callable[["HostPool", str], ContainerSpec]   # (pool, language) -> the spec a check starts


class HostPool:
    """Containers on one engine.

    ``slots`` jobs run at once (one per container: concurrent jobs in one container
    could read each other's files). Up to ``slots * warm_kinds + spare`` containers
    live: ``slots`` of each of ``warm_kinds`` kinds (a kind is a language at one
    memory/pids/disk budget), so a batch that mixes languages keeps each language's
    containers warm instead of swapping them at every change of language, and ``spare``
    more, so a replacement can start in the background while the others keep serving.
    When the pool is full, a new kind evicts the idle container that has been idle
    longest. An idle container costs memory only: 20-55 MiB (50-115 MiB under gVisor,
    measured per language on the 2-core AMD VM, 2026-12-07). Every
    container start goes through ``breaker``: a host that cannot start containers
    is taken out after a few tries instead of failing every job in turn.
    """

    def __init__(self, client: docker.DockerClient, host: str, slots: int, pool_id: str, breaker: Breaker,
                 spare: int = 1, warm_kinds: int = 4, max_jobs_per_container: int = 1000) -> None:
        self.client = client
        self.host = host
        self.slots = slots
        self.pool_id = pool_id
        self.capacity = slots * warm_kinds + spare
        self.max_jobs = max_jobs_per_container
        self.busy = 0                      # slots taken (guarded by the Sandbox's condition)
        self.failures = 0                  # consecutive infra errors: steers work to other hosts
        self.breaker = breaker             # consecutive failed starts: takes the host out
        self.probe_spec: Optional[ContainerSpec] = None   # what a probe starts: the spec that failed last
        self._lock = threading.Lock()
        self._idle: dict[ContainerSpec, list[WarmContainer]] = {}   # each list oldest-idle first
        self._live = 0
        self._starting: dict[ContainerSpec, int] = {}
        self._background = ThreadPoolExecutor(max_workers=2, thread_name_prefix=f"proctor-{host[-12:]}")
        self._closed = False
        # containers left by a process of this machine that was killed before it could close
        self._background.submit(sweep_orphans, client, LABEL)
        self.started = 0
        self.recycled = 0
        self.start_failures = 0

    # ------------------------------------------------------------------ containers
    def acquire(self, spec: ContainerSpec) -> WarmContainer:
        """A clean container of this spec: idle if there is one, else started now.

        Raises HostDown when the breaker has taken this host out, InfraError when the start fails.
        """
        with self._lock:
            idle = self._idle.get(spec)
            if idle:
                return idle.pop()   # the most recently idle
        if not self.breaker.admit_start():
            raise HostDown(self.breaker.health().describe())
        evict: Optional[WarmContainer] = None
        with self._lock:
            idle = self._idle.get(spec)
            found = idle.pop() if idle else None   # a pre-start finished while we waited for the permit
            if found is None:
                if self._live >= self.capacity:
                    evict = self._pop_other_idle(spec)
                self._live += 1
        if found is not None:
            self.breaker.start_abandoned()
            return found
        if evict is not None:
            self._remove(evict)
        return self._start(spec)

    def _start(self, spec: ContainerSpec) -> WarmContainer:
        """Start a container under a permit already taken (and one ``_live`` slot counted)."""
        try:
            container = WarmContainer(self.client, spec, self.host, self.pool_id).start()
        except InfraError as exc:
            with self._lock:
                self._live -= 1
                self.start_failures += 1
                self.probe_spec = spec
            self.breaker.start_failed(str(exc))
            raise
        except BaseException:
            with self._lock:
                self._live -= 1
            self.breaker.start_abandoned()
            raise
        with self._lock:
            self.started += 1
        self.breaker.start_succeeded()
        return container

    def release(self, container: WarmContainer, healthy: bool) -> None:
        if healthy and container.jobs_served < self.max_jobs and not self._closed:
            with self._lock:
                container.idle_since = time.monotonic()
                self._idle.setdefault(container.spec, []).append(container)
            return
        with self._lock:
            self._live -= 1
            self.recycled += 1
        self._background.submit(container.remove)
        if not self._closed:
            self._background.submit(self._prestart, container.spec)

    def warm(self, spec: ContainerSpec, n: int) -> int:
        """Start containers until ``n`` of this spec are idle (in parallel); how many started.

        Failed starts go to the breaker, which reports a host that goes down.
        """
        with self._lock:
            have = len(self._idle.get(spec, ())) + self._starting.get(spec, 0)
        want = max(0, min(n, self.capacity) - have)
        futures = [self._background.submit(self._prestart, spec, True) for _ in range(want)]
        return sum(1 for f in futures if f.exception() is None and f.result())

    def start_one(self, spec: ContainerSpec) -> Optional[str]:
        """Start one container of ``spec`` outside the breaker's gate (a start-up check or a probe).

        The container is kept, idle. Returns None, or why the start failed; the caller tells the breaker.
        """
        with self._lock:
            self._live += 1
        try:
            container = WarmContainer(self.client, spec, self.host, self.pool_id).start()
        except InfraError as exc:
            with self._lock:
                self._live -= 1
                self.start_failures += 1
                self.probe_spec = spec
            return str(exc)
        except BaseException:
            with self._lock:
                self._live -= 1
            raise
        with self._lock:
            self.started += 1
        self._keep(spec, container)
        return None

    def check(self, spec_for: SpecFor, languages: Sequence[str]) -> bool:
        """Start-up check: start one container per language now; if one cannot start, the host is down."""
        for language in languages:
            try:
                spec = spec_for(self, language)
            except SandboxError as exc:   # image missing (without auto_build) or its build failed
                self.breaker.checked(False, str(exc))
                return False
            error = self.start_one(spec)
            if error is not None:
                self.breaker.checked(False, error)
                return False
        self.breaker.checked(True)
        return True

    def probe(self, spec_for: SpecFor, language: str) -> None:
        """Probe a down host (the caller holds the breaker's probe): start one container, report how it went."""
        try:
            spec = self.probe_spec or spec_for(self, language)
            error = self.start_one(spec)
        except SandboxError as exc:
            error = str(exc)
        except BaseException as exc:
            self.breaker.end_probe(False, f"the probe itself failed: {exc!r}")   # never leave it "probing"
            raise
        self.breaker.end_probe(error is None, error or "")

    def submit(self, fn: Callable[[], None]) -> bool:
        """Run ``fn`` on this host's background threads (probes); False once the pool is closed."""
        if self._closed:
            return False
        try:
            self._background.submit(fn)
        except RuntimeError:   # closed between the check and the submit
            return False
        return True

    def _prestart(self, spec: ContainerSpec, wait: bool = False) -> bool:
        # Opportunistic (a replacement, or warmup): never on a down host, never past the gate.
        if not self.breaker.admit_start(wait=wait):
            return False
        with self._lock:
            full = self._closed or self._live >= self.capacity
            if not full:
                self._live += 1
                self._starting[spec] = self._starting.get(spec, 0) + 1
        if full:
            self.breaker.start_abandoned()   # outside our lock: the breaker takes the Sandbox's
            return False
        try:
            container = self._start(spec)
        except InfraError:
            return False   # counted by the breaker, which warns when the host goes down
        finally:
            with self._lock:
                self._starting[spec] -= 1
        self._keep(spec, container)
        return True

    def _keep(self, spec: ContainerSpec, container: WarmContainer) -> None:
        """Put a freshly started container in the idle list (or remove it if the pool closed)."""
        with self._lock:
            if self._closed:
                self._live -= 1
            else:
                container.idle_since = time.monotonic()
                self._idle.setdefault(spec, []).append(container)
                return
        container.remove()

    def _pop_other_idle(self, spec: ContainerSpec) -> Optional[WarmContainer]:
        """The container of another kind that has been idle longest (under ``_lock``), taken out of the pool."""
        oldest = [idle for other, idle in self._idle.items() if other != spec and idle]
        if not oldest:
            return None
        idle = min(oldest, key=lambda cs: cs[0].idle_since)
        self._live -= 1
        return idle.pop(0)

    def _remove(self, container: WarmContainer) -> None:
        self._background.submit(container.remove)

    @property
    def idle_count(self) -> int:
        with self._lock:
            return sum(len(v) for v in self._idle.values())

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle = [c for cs in self._idle.values() for c in cs]
            self._idle.clear()
            self._live -= len(idle)
        for container in idle:
            self._background.submit(container.remove)
        self._background.shutdown(wait=True)
        # Anything of this pool still on the engine (a container whose job was
        # interrupted mid-flight, say) goes too.
        try:
            for c in self.client.containers.list(all=True, filters={"label": f"proctor.pool={self.pool_id}"}):
                c.remove(force=True)
        except Exception:   # engine gone: nothing to clean that we could reach
            pass
