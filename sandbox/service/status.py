"""What ``GET /health`` and ``GET /metrics`` report about the sandbox under the service: a local
`Sandbox` (its Docker hosts and pools) or the Ray fleet (its nodes). The routes need only
`SandboxStatus`; `status_of` picks the one that fits the runner the service was given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional, Protocol, Sequence, Union

from ..images import image_status_doc
from ..sandbox import Sandbox
from ..session import CellResult, SessionLimits

if TYPE_CHECKING:
    from ..fleet import RaySandbox


@dataclass(frozen=True)
class Gauges:
    """The sandbox side of /metrics."""

    slots: int           # jobs run at once
    idle: int            # warm containers waiting for a job
    hosts_up: int        # Docker hosts (local) or sandbox nodes (fleet) that are up
    cache_saved: int     # runs the verdict cache answered instead of the sandbox


class ServedSession(Protocol):
    """What the session routes use of a session: `Session` (local) or `FleetSession` (a node's)."""

    id: str
    language: str
    limits: SessionLimits
    calls: int
    cpu_spent_s: float

    @property
    def closed(self) -> bool: ...
    @property
    def close_reason(self) -> Optional[str]: ...
    def run(self, code: str, *, limits: Optional[SessionLimits] = None) -> CellResult: ...
    def put_files(self, files: dict) -> None: ...
    def get_files(self, paths: Sequence[str]) -> dict[str, Optional[bytes]]: ...
    def close(self) -> None: ...


class SandboxStatus(Protocol):
    """Everything the service's health and metrics routes ask of the sandbox."""

    def summary(self) -> dict:
        """``runtime``, ``slots``, ``pool`` (per-host counters) and ``hosts`` ({name: {up, cause, fix}})."""
        ...

    def images(self) -> dict:
        """{host or node: {image name: {present, ref}}} (slow: the routes cache it)."""
        ...

    def gauges(self) -> Gauges:
        ...


class LocalStatus:
    """A `Sandbox` in the service's own process: its Docker hosts."""

    def __init__(self, sandbox: Sandbox) -> None:
        self.sandbox = sandbox

    def summary(self) -> dict:
        hosts = {name: {"up": h.up, "cause": h.cause, "fix": h.fix} for name, h in self.sandbox.health().items()}
        return {"runtime": self.sandbox.runtime or "default", "slots": self.sandbox.slots,
                "pool": self.sandbox.stats(), "hosts": hosts}

    def images(self) -> dict:
        return {pool.host: image_status_doc(pool.client) for pool in self.sandbox.pools}

    def gauges(self) -> Gauges:
        stats = self.sandbox.stats().values()
        cache = self.sandbox.cache
        return Gauges(slots=self.sandbox.slots, idle=sum(int(h.get("idle", 0)) for h in stats),   # type: ignore[union-attr]
                      hosts_up=sum(1 for h in stats if h.get("up")),       # type: ignore[union-attr]
                      cache_saved=cache.stats().saved if cache is not None else 0)


class FleetStatus:
    """The Ray fleet (`RaySandbox`): its nodes, as the router and their host actors report them."""

    def __init__(self, fleet: "RaySandbox") -> None:
        self.fleet = fleet

    def summary(self) -> dict:
        info = self.fleet.health()
        hosts = {h.info.label: {
            "up": h.up, "cause": h.cause,
            "fix": "" if h.up else "restart the node's dockerd and Ray worker; new clients of the fleet use it"}
            for h in info.hosts}
        hosts.update({line: {"up": False, "cause": line, "fix": "see the cause"} for line in info.failed})
        return {"runtime": self.fleet.options.runtime or "default", "slots": info.slots,
                "pool": self.fleet.stats(), "hosts": hosts}

    def images(self) -> dict:
        return self.fleet.images()

    def gauges(self) -> Gauges:
        stats = self.fleet.stats().values()
        cache = self.fleet.cache_stats()
        info = self.fleet.health()
        idle = sum(int(p.get("idle", 0)) for s in stats for p in s.get("pool", {}).values())
        return Gauges(slots=info.slots, idle=idle, hosts_up=sum(h.up for h in info.hosts),
                      cache_saved=int(cache["saved"]) if cache else 0)


def status_of(runner: Union[Sandbox, "RaySandbox"]) -> SandboxStatus:
    """The status reader for the runner a service runs on."""
    if isinstance(runner, Sandbox):
        return LocalStatus(runner)
    from ..fleet import RaySandbox

    if isinstance(runner, RaySandbox):
        return FleetStatus(runner)
    raise TypeError(f"the service runs on a Sandbox or a RaySandbox, not a {type(runner).__name__}")


__all__ = ["FleetStatus", "Gauges", "LocalStatus", "SandboxStatus", "ServedSession", "status_of"]
