"""``proctor sandbox serve``: the service on uvicorn, over a Sandbox it owns, or over the Ray
cluster's sandbox fleet (``ray_address``: docs/ray.md)."""

from __future__ import annotations

import logging
from typing import Optional, Sequence

import uvicorn

from ..errors import SandboxError
from ..runner import JobRunner
from ..sandbox import Sandbox
from .app import create_app
from .settings import ServiceSettings, check_bind


def serve(host: str, port: int, settings: ServiceSettings, *, pool_size: Optional[int] = None,
          runtime: Optional[str] = None, docker_hosts: Optional[Sequence[str]] = None,
          warm: Sequence[str] = ("python",), log_level: str = "info", ray_address: Optional[str] = None) -> None:
    """Start the sandbox, warm ``warm``'s containers, and serve until interrupted; the sandbox closes after."""
    check_bind(host, settings.token)
    sandbox = _runner(pool_size, runtime, docker_hosts, ray_address)
    try:
        if warm:
            sandbox.warmup(list(warm))
        app = create_app(sandbox, settings)
        # One process, one event loop: the sandbox's pool lives here, and routes hand its blocking
        # calls to worker threads. Several uvicorn workers would each start a pool of their own.
        uvicorn.run(app, host=host, port=port, log_level=log_level, access_log=False,
                    limit_concurrency=settings.max_pending + settings.max_sessions + 64, timeout_keep_alive=30)
    finally:
        sandbox.close()
        logging.getLogger(__name__).info("sandbox closed")


def _runner(pool_size: Optional[int], runtime: Optional[str], docker_hosts: Optional[Sequence[str]],
            ray_address: Optional[str]) -> JobRunner:
    if ray_address is None:
        return Sandbox(hosts=list(docker_hosts) if docker_hosts else None, slots=pool_size, auto_build=True,
                       runtime=runtime)
    if pool_size is not None or docker_hosts:
        raise SandboxError("--pool-size and --docker-host size and place a local sandbox; on the Ray fleet each "
                           "sandbox node runs as many jobs as its CPUs in Ray (ray start --num-cpus) on its own "
                           "engine: drop them, or drop --ray-address")
    from ..fleet import RaySandbox

    # The fleet every client on the cluster shares (its default name): the service's jobs count
    # against the same budget as the trainers'.
    return RaySandbox(address=ray_address, runtime=runtime)


__all__ = ["serve"]
