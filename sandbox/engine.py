"""Connecting to a Docker engine, with errors that say how to get one running."""

from __future__ import annotations

import os
from typing import Optional

import docker
import requests

from .errors import EngineUnavailable, SandboxError
from .hosts import TLSArg, resolve

_FIX = (
    "run `bash scripts/setup.sh` (installs docker.io and starts dockerd), "
    "or start dockerd yourself (`sudo dockerd &`)"
)
_REMOTE_FIX = "check that its dockerd runs and that this machine may reach it (docs/hosts.md: 'Sandbox hosts')"
_RUNSC_FIX = "run `PROCTOR_RUNTIME=runsc bash scripts/setup.sh` on that machine"


def connect(host: Optional[str] = None, *, tls: TLSArg = None, insecure_tcp: bool = False) -> docker.DockerClient:
    """Return a client for the engine at `host` (or the environment's default) that answered a ping.

    ``ssh://`` and TLS (``tcp://`` with certificates from ``tls`` or ``DOCKER_CERT_PATH``)
    reach remote engines; plain TCP raises SandboxError unless ``insecure_tcp``.
    Raises EngineUnavailable when nothing answers, so callers fail at start-up
    with a fix instead of deep inside the first container call.
    """
    target = resolve(host, tls, insecure_tcp)
    fix = _FIX if target.transport == "unix" else _REMOTE_FIX
    try:
        client = target.client()
        client.ping()
    # A missing socket raises DockerException; nothing listening, requests' ConnectionError
    # (an OSError); a certificate the engine refuses, an SSLError (also an OSError).
    except (docker.errors.DockerException, requests.RequestException, OSError) as exc:
        raise EngineUnavailable(
            f"Docker engine not reachable at {target.url} ({target.transport}): {exc}. To fix: {fix}."
        ) from exc
    return client


def check_runtime(client: docker.DockerClient, runtime: Optional[str], where: str) -> bool:
    """Whether ``runtime`` on this engine is gVisor; SandboxError if it cannot start a sandbox.

    gVisor must be registered with ``--network=none``: the sandbox's containers have no
    network, and runsc's own network stack refuses Docker's empty namespace
    ("cannot run with network enabled in root network namespace").
    """
    if runtime is None:
        return False
    try:
        runtimes = client.info().get("Runtimes") or {}
    except (docker.errors.DockerException, requests.RequestException, OSError) as exc:
        raise EngineUnavailable(f"engine {where} did not say which runtimes it has: {exc}") from exc
    if runtime not in runtimes:
        hint = _RUNSC_FIX if runtime == "runsc" else "register it in /etc/docker/daemon.json \"runtimes\""
        raise SandboxError(f"runtime {runtime!r} is not registered with the engine at {where} "
                           f"(it has {', '.join(sorted(runtimes)) or 'none'}): {hint}")
    entry = runtimes[runtime] or {}
    gvisor = os.path.basename(str(entry.get("path", ""))) == "runsc"
    args = [str(a) for a in entry.get("runtimeArgs") or ()]
    if gvisor and "--network=none" not in args:
        raise SandboxError(f"runtime {runtime!r} at {where} is gVisor without --network=none in its "
                           f"runtimeArgs ({args}): every sandbox start would fail with 'cannot run with "
                           f"network enabled in root network namespace'; {_RUNSC_FIX}")
    return gvisor
