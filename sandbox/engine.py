"""Connecting to the Docker engine, with errors that say how to get one running."""

from __future__ import annotations

import docker
import requests

from .errors import EngineUnavailable

_DEFAULT_HOST_HINT = "DOCKER_HOST or unix:///var/run/docker.sock"
_FIX = (
    "run `bash scripts/setup.sh` (installs docker.io and starts dockerd), "
    "or start dockerd yourself (`sudo dockerd &`)"
)


def connect(host: str | None = None) -> docker.DockerClient:
    """Return a client for the engine at `host` (or the environment's default) that answered a ping.

    Raises EngineUnavailable when nothing answers, so callers fail at start-up
    with a fix instead of deep inside the first container call.
    """
    where = host or _DEFAULT_HOST_HINT
    try:
        client = docker.DockerClient(base_url=host) if host else docker.from_env()
        client.ping()
    # from_env raises DockerException when the socket is missing; ping raises
    # requests' ConnectionError (an OSError) when nothing listens on it.
    except (docker.errors.DockerException, requests.RequestException, OSError) as exc:
        raise EngineUnavailable(
            f"Docker engine not reachable at {where}: {exc}. To fix: {_FIX}."
        ) from exc
    return client
