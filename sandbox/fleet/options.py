"""What the sandbox fleet is configured with and what it reports: frozen records that cross
process boundaries (client, router actor, host actors) by pickle."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ..errors import SandboxError
from ..types import LANGUAGES

DEFAULT_NAME = "proctor-sandbox-fleet"
DEFAULT_NAMESPACE = "proctor"


@dataclass(frozen=True)
class FleetOptions:
    """How every host actor of the fleet runs jobs, and how the router routes them.

    ``resource``: the custom Ray resource that marks a sandbox node (``ray start
    --resources='{"sandbox": 1}'``); one host actor per such node takes one unit of it.
    ``slots_per_node``: jobs at once per node (default: the node's ``CPU`` in Ray).
    ``retries``: extra attempts on the same node after an infrastructure error (the node's
    `Sandbox` makes them). ``reroutes``: further tries on another node when a node is lost
    mid-job or its attempts all ended ``infra_error``; after them the job is ``infra_error``.
    ``prefetch``: jobs sent to a node beyond its slots, so a node never idles for a round
    trip and results come back many per call; they wait on the node for a slot (the budget
    of jobs running stays ``slots``). Default: what the node finishes in a quarter of a
    second at its measured pace, at least its slots (router.py).
    ``cache``: one verdict cache for the whole fleet, in the router (``cache_entries``
    results in memory; ``cache_dir``: also on a directory the router's node can write).
    ``allow_unauthenticated``: run host actors (which hold the node's Docker socket) on a
    Ray cluster without token authentication; refused otherwise.
    """

    resource: str = "sandbox"
    slots_per_node: Optional[int] = None
    retries: int = 2
    reroutes: int = 1
    prefetch: Optional[int] = None
    runtime: Optional[str] = None
    cpus_per_job: float = 1.0
    startup_check: tuple[str, ...] = ("python",)
    auto_build: bool = False
    cache: bool = True
    cache_entries: int = 10_000
    cache_dir: Optional[str] = None
    allow_unauthenticated: bool = False

    def __post_init__(self) -> None:
        for name in ("retries", "reroutes", "prefetch"):
            value = getattr(self, name)
            if name == "prefetch" and value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SandboxError(f"sandbox.{name} must be an integer >= 0, got {value!r}")
        if self.slots_per_node is not None and (not isinstance(self.slots_per_node, int) or self.slots_per_node < 1):
            raise SandboxError(f"sandbox.slots_per_node must be an integer >= 1, got {self.slots_per_node!r}")
        bad = [x for x in self.startup_check if x not in LANGUAGES]
        if isinstance(self.startup_check, str) or bad:
            raise SandboxError(f"sandbox.startup_check takes a list of languages ({', '.join(LANGUAGES)}), "
                               f"got {self.startup_check!r}")
        if not self.resource or not isinstance(self.resource, str):
            raise SandboxError(f"sandbox.resource must name a Ray resource, got {self.resource!r}")


@dataclass(frozen=True)
class HostInfo:
    """One sandbox node as its host actor reports it."""

    node_id: str
    address: str          # the node's IP as Ray knows it
    engine: str           # the node's own Docker engine (a unix socket)
    slots: int
    pool: str = ""        # the `Sandbox.pool_id` its containers are labelled with (proctor.pool)

    @property
    def label(self) -> str:
        """How reports name the node: its address and the start of its Ray node id."""
        return f"{self.address}/{self.node_id[:8]}"


@dataclass(frozen=True)
class HostState:
    """A host as the router sees it now: up, or lost with the reason."""

    info: HostInfo
    up: bool
    busy: int
    jobs_done: int
    cause: str = ""


@dataclass(frozen=True)
class FleetInfo:
    """What a client learns when it attaches: the fleet's hosts and its one job budget."""

    name: str
    hosts: tuple[HostState, ...] = field(default_factory=tuple)
    failed: tuple[str, ...] = ()    # nodes whose host actor did not start, with the reason

    @property
    def slots(self) -> int:
        return sum(h.info.slots for h in self.hosts if h.up)


__all__ = ["DEFAULT_NAME", "DEFAULT_NAMESPACE", "FleetInfo", "FleetOptions", "HostInfo", "HostState"]
