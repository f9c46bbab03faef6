"""Warm containers on one Docker engine: handed out one job at a time, recycled on any doubt."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Optional

import docker

from .container import ContainerSpec, WarmContainer
from .errors import InfraError

log = logging.getLogger("proctor.sandbox")


class HostPool:
    """Containers on one engine.

    ``slots`` jobs run at once (one per container: concurrent jobs in one container
    could read each other's files). Up to ``slots + spare`` containers live, so a
    replacement can start in the background while the others keep serving.
    """

    def __init__(self, client: docker.DockerClient, host: str, slots: int, pool_id: str,
                 spare: int = 1, max_jobs_per_container: int = 1000) -> None:
        self.client = client
        self.host = host
        self.slots = slots
        self.pool_id = pool_id
        self.capacity = slots + spare
        self.max_jobs = max_jobs_per_container
        self.busy = 0                      # slots taken (guarded by the Sandbox's condition)
        self.failures = 0                  # consecutive infra errors: steers work to other hosts
        self._lock = threading.Lock()
        self._idle: dict[ContainerSpec, list[WarmContainer]] = {}
        self._live = 0
        self._starting: dict[ContainerSpec, int] = {}
        self._background = ThreadPoolExecutor(max_workers=2, thread_name_prefix=f"proctor-{host[-12:]}")
        self._closed = False
        self.started = 0
        self.recycled = 0

    # ------------------------------------------------------------------ containers
    def acquire(self, spec: ContainerSpec) -> WarmContainer:
        """A clean container of this spec: idle if there is one, else started now."""
        evict: Optional[WarmContainer] = None
        with self._lock:
            idle = self._idle.get(spec)
            if idle:
                return idle.pop()
            if self._live >= self.capacity:
                evict = self._pop_other_idle(spec)
            self._live += 1
        if evict is not None:
            self._remove(evict)
        try:
            container = WarmContainer(self.client, spec, self.host, self.pool_id).start()
        except BaseException:
            with self._lock:
                self._live -= 1
            raise
        with self._lock:
            self.started += 1
        return container

    def release(self, container: WarmContainer, healthy: bool) -> None:
        if healthy and container.jobs_served < self.max_jobs and not self._closed:
            with self._lock:
                self._idle.setdefault(container.spec, []).append(container)
            return
        with self._lock:
            self._live -= 1
            self.recycled += 1
        self._background.submit(container.remove)
        if not self._closed:
            self._background.submit(self._prestart, container.spec)

    def warm(self, spec: ContainerSpec, n: int) -> None:
        """Start containers until ``n`` of this spec are idle (in parallel)."""
        with self._lock:
            have = len(self._idle.get(spec, ())) + self._starting.get(spec, 0)
        want = max(0, min(n, self.capacity) - have)
        futures = [self._background.submit(self._prestart, spec) for _ in range(want)]
        errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:
            raise errors[0]

    def _prestart(self, spec: ContainerSpec) -> None:
        with self._lock:
            if self._closed or self._live >= self.capacity:
                return
            self._live += 1
            self._starting[spec] = self._starting.get(spec, 0) + 1
        try:
            container = WarmContainer(self.client, spec, self.host, self.pool_id).start()
        except InfraError as exc:
            log.warning("could not pre-start a sandbox container on %s: %s", self.host, exc)
            with self._lock:
                self._live -= 1
                self._starting[spec] -= 1
            raise
        with self._lock:
            self._starting[spec] -= 1
            self.started += 1
            if self._closed:
                self._live -= 1
                closed = True
            else:
                self._idle.setdefault(spec, []).append(container)
                closed = False
        if closed:
            container.remove()

    def _pop_other_idle(self, spec: ContainerSpec) -> Optional[WarmContainer]:
        for other, idle in self._idle.items():
            if other != spec and idle:
                self._live -= 1
                return idle.pop(0)
        return None

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
