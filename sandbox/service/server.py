"""``proctor sandbox serve``: the service on uvicorn, over a Sandbox it owns."""

from __future__ import annotations

import logging
from typing import Optional, Sequence

import uvicorn

from ..sandbox import Sandbox
from .app import create_app
from .settings import ServiceSettings, check_bind


def serve(host: str, port: int, settings: ServiceSettings, *, pool_size: Optional[int] = None,
          runtime: Optional[str] = None, docker_hosts: Optional[Sequence[str]] = None,
          warm: Sequence[str] = ("python",), log_level: str = "info") -> None:
    """Start the sandbox, warm ``warm``'s containers, and serve until interrupted; the sandbox closes after."""
    check_bind(host, settings.token)
    sandbox = Sandbox(hosts=list(docker_hosts) if docker_hosts else None, slots=pool_size, auto_build=True,
                      runtime=runtime)
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


__all__ = ["serve"]
