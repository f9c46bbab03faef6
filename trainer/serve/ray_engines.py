"""Rollout engines on a Ray cluster: ``proctor serve`` in Ray actors, one per placement-group
bundle (its GPUs), found by name instead of typed URLs.

    engines = RayEngines.start("Qwen/Qwen2.5-1.5B", count=4, address="auto")   # or `proctor serve --ray-engines 4`
    urls = find_engines("proctor-rollout", address="auto")                       # what a trainer does

Each actor runs ``proctor serve`` as a child process (ManagedServer: it exits with the actor),
listening on its node's IP, with the devices Ray gave the actor (``CUDA_VISIBLE_DEVICES`` is
inherited). The actors are named ``<name>-<i>`` in the ``proctor`` namespace: any driver of
the cluster finds them, and they live as long as the process that started them. The trainer
talks to the engines over their HTTP API, as to any ``proctor serve`` (VLLMServerGenerator):
prompts split between them, every weight sync to all. Ray is imported only here.
"""

from __future__ import annotations

import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from .errors import ServerUnreachable

NAMESPACE = "proctor"
DEFAULT_NAME = "proctor-rollout"


class EngineActor:
    """One ``proctor serve`` on the node Ray placed this actor on (made as ``ray.remote(EngineActor)``)."""

    def __init__(self, model: str, args: Sequence[str], log_path: str, start_timeout_s: float) -> None:
        import ray

        from .launch import ManagedServer

        self.node = ray.get_runtime_context().get_node_id()
        host = ray.util.get_node_ip_address()
        self.server = ManagedServer(model, log_path, extra_args=[*args, "--host", host],
                                    start_timeout_s=start_timeout_s)

    def describe(self) -> tuple[str, str]:
        """(URL, node id)."""
        return self.server.url, self.node

    def close(self) -> None:
        self.server.close()


@dataclass(frozen=True)
class EngineBundle:
    """What one engine reserves on the cluster: ``gpus`` (0 on CPU-only clusters) and ``cpus``."""

    gpus: float = 1.0
    cpus: float = 1.0

    def resources(self) -> dict[str, float]:
        return {"GPU": self.gpus, "CPU": self.cpus} if self.gpus else {"CPU": self.cpus}


class RayEngines:
    """Engines this process started on the cluster; ``close`` stops them (and so does its exit)."""

    def __init__(self, actors: list, urls: list[str], nodes: list[str], group: Any) -> None:
        self.actors, self.urls, self.nodes, self._group = actors, urls, nodes, group

    @classmethod
    def start(cls, model: str, count: int, *, address: Optional[str] = "auto", name: str = DEFAULT_NAME,
              bundle: EngineBundle = EngineBundle(), args: Sequence[str] = (), log_dir: Optional[str] = None,
              strategy: str = "SPREAD", start_timeout_s: float = 600.0) -> "RayEngines":
        """Reserve ``count`` bundles (a placement group; SPREAD: on distinct nodes where it can), start
        one engine in each, and return once every one answers. Errors name what the cluster lacks."""
        ray = _ray(address)
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if count < 1:
            raise ValueError(f"rollout engines: count must be >= 1 (got {count})")
        _check_name(name)
        if find_engines(name, address=None):
            raise ValueError(f"rollout engines named {name!r} already run on this cluster: use them "
                             "(rollout.vllm.ray.engines: 0), stop them, or pick another name")
        group = placement_group([bundle.resources()] * count, strategy=strategy)
        try:
            ray.get(group.ready(), timeout=start_timeout_s)
        except ray.exceptions.GetTimeoutError:
            remove_placement_group(group)
            raise ServerUnreachable(
                f"the Ray cluster has no room for {count} rollout engines of {bundle.resources()} each "
                f"(waited {start_timeout_s:.0f} s; `ray status` shows what is free): add nodes, or ask for "
                "fewer engines or smaller bundles") from None
        logs = Path(log_dir or tempfile.mkdtemp(prefix="proctor-engines-"))
        remote = ray.remote(EngineActor)
        actors = [remote.options(name=f"{name}-{i}", namespace=NAMESPACE, num_gpus=bundle.gpus, num_cpus=bundle.cpus,
                                 max_restarts=0, scheduling_strategy=PlacementGroupSchedulingStrategy(group, i))
                  .remote(model, list(args), str(logs / f"{name}-{i}.log"), start_timeout_s)
                  for i in range(count)]
        try:
            described = ray.get([a.describe.remote() for a in actors], timeout=start_timeout_s + 60)
        except ray.exceptions.RayError as exc:
            for actor in actors:
                ray.kill(actor)
            remove_placement_group(group)
            raise ServerUnreachable(f"a rollout engine did not start: {_cause(exc)} (logs in {logs})") from None
        return cls(actors, [u for u, _ in described], [n for _, n in described], group)

    def close(self) -> None:
        import ray
        from ray.util.placement_group import remove_placement_group

        for actor in self.actors:
            try:
                ray.get(actor.close.remote(), timeout=60)
            except ray.exceptions.RayError:
                pass   # gone already: its server exited with it
            ray.kill(actor)
        remove_placement_group(self._group)
        self.actors = []


def find_engines(name: str = DEFAULT_NAME, *, address: Optional[str] = "auto") -> list[str]:
    """The URLs of the engines named ``<name>-<i>`` on the cluster, in index order ([] if none)."""
    ray = _ray(address)
    pattern = re.compile(re.escape(name) + r"-(\d+)$")
    found = sorted((int(m.group(1)), a["name"]) for a in ray.util.list_named_actors(all_namespaces=True)
                   if a["namespace"] == NAMESPACE and (m := pattern.match(a["name"])))
    urls = []
    for _, actor_name in found:
        try:
            urls.append(ray.get(ray.get_actor(actor_name, namespace=NAMESPACE).describe.remote(), timeout=60)[0])
        except (ValueError, ray.exceptions.RayError):
            continue   # it ended between the listing and the call
    return urls


def _ray(address: Optional[str]) -> Any:
    """``ray``, connected to the cluster at ``address`` unless this process already is (None: must be)."""
    try:
        import ray
    except ImportError:
        raise ImportError("rollout engines on Ray need Ray: pip install 'proctor[ray]'") from None
    if not ray.is_initialized():
        if address is None:
            raise RuntimeError("not connected to a Ray cluster: call ray.init first")
        ray.init(address=address, namespace=NAMESPACE, log_to_driver=False,
                 runtime_env={"env_vars": {"OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}})
    return ray


def _check_name(name: str) -> None:
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name or ""):
        raise ValueError(f"rollout engines: name {name!r} must be letters, digits, '.', '_' or '-'")


def _cause(exc: BaseException) -> str:
    cause = getattr(exc, "cause", None) or exc
    lines = str(cause).strip().splitlines()
    return f"{type(cause).__name__}: {lines[-1] if lines else ''}"[:800]


__all__ = ["DEFAULT_NAME", "EngineActor", "EngineBundle", "NAMESPACE", "RayEngines", "find_engines"]
