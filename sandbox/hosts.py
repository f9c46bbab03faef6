"""Which Docker engines a sandbox may use, and how it proves who it is to them.

A Docker engine's API is root on its machine. A plain-TCP engine (``tcp://host:2375``)
gives that to anyone who reaches the port, so it is refused unless the caller says
``insecure_tcp=True``. The safe remote transports are:

* ``ssh://user@host``: the engine stays on its unix socket; the ``ssh`` client
  authenticates (keys, agent, ``~/.ssh/config``) and tunnels to it.
* TLS (``tcp://host:2376`` with client certificates): the engine runs with
  ``--tlsverify`` and accepts only clients whose certificate its CA signed; we check
  its certificate against the same CA.

Certificates come from a `TLSConfig` passed per host or for every TCP host, or from
Docker's own conventions: ``DOCKER_TLS_VERIFY=1`` and ``DOCKER_CERT_PATH`` (a
directory with ``ca.pem``, ``cert.pem``, ``key.pem``; a sub-directory named after
the host, ``host:port`` or ``host``, holds that host's own set).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Optional, Union
from urllib.parse import urlsplit

import docker.tls

from .errors import SandboxError

log = logging.getLogger("proctor.sandbox")

DEFAULT_SOCKET = "unix:///var/run/docker.sock"
CERT_FILES = ("ca.pem", "cert.pem", "key.pem")

_warned: set[str] = set()
_warned_lock = threading.Lock()


@dataclass(frozen=True)
class TLSConfig:
    """Client certificates for a Docker engine started with ``--tlsverify``.

    ``ca_cert`` signs the engine's certificate (checked, host name included);
    ``client_cert``/``client_key`` are what the engine checks us with.
    """

    ca_cert: Path
    client_cert: Path
    client_key: Path

    def __post_init__(self) -> None:
        for name in ("ca_cert", "client_cert", "client_key"):
            path = Path(getattr(self, name))
            object.__setattr__(self, name, path)
            if not path.is_file():
                raise SandboxError(f"TLSConfig.{name}: {path} is not a file; make the engine's client "
                                   "certificates first (docs/hosts.md: 'Sandbox hosts')")

    @classmethod
    def from_dir(cls, path: Union[str, Path]) -> "TLSConfig":
        """The ``DOCKER_CERT_PATH`` layout: ``ca.pem``, ``cert.pem``, ``key.pem`` in one directory."""
        d = Path(path).expanduser()
        missing = [f for f in CERT_FILES if not (d / f).is_file()]
        if missing:
            raise SandboxError(f"certificate directory {d} lacks {', '.join(missing)}: it needs ca.pem, "
                               "cert.pem and key.pem (Docker's DOCKER_CERT_PATH layout)")
        return cls(ca_cert=d / "ca.pem", client_cert=d / "cert.pem", client_key=d / "key.pem")

    def docker_tls(self) -> docker.tls.TLSConfig:
        return _OnlyThisCA(client_cert=(str(self.client_cert), str(self.client_key)),
                           ca_cert=str(self.ca_cert), verify=True)


class _OnlyThisCA(docker.tls.TLSConfig):
    """The SDK's TLS settings, with the engine checked against our CA alone.

    requests lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE replace a session's CA file
    (every public CA would then vouch for "the engine"), so the client ignores the
    environment: no CA bundles, no proxies, no .netrc.
    """

    def configure_client(self, client) -> None:  # type: ignore[no-untyped-def]
        super().configure_client(client)
        client.trust_env = False


TLSArg = Union[TLSConfig, Mapping[str, TLSConfig], None]


@dataclass(frozen=True)
class EngineTarget:
    """How to reach one engine: its URL, the transport, and certificates for TLS."""

    url: str
    transport: str                    # "unix" | "ssh" | "tls" | "insecure-tcp"
    tls: Optional[TLSConfig] = None

    def client(self, timeout_s: int = 60) -> docker.DockerClient:
        if self.transport == "ssh":
            # The system ssh client: keys, agent and ~/.ssh/config work as they do for `docker -H ssh://`.
            return docker.DockerClient(base_url=self.url, use_ssh_client=True, timeout=timeout_s)
        if self.transport == "tls":
            assert self.tls is not None
            return docker.DockerClient(base_url=self.url, tls=self.tls.docker_tls(), timeout=timeout_s)
        return docker.DockerClient(base_url=self.url, timeout=timeout_s)


def resolve(host: Optional[str], tls: TLSArg = None, insecure_tcp: bool = False,
            env: Optional[Mapping[str, str]] = None) -> EngineTarget:
    """Decide how to reach ``host`` (None: ``DOCKER_HOST`` or the local socket).

    Raises SandboxError for a plain-TCP engine without ``insecure_tcp`` and for a URL
    scheme Docker does not speak, naming what to do instead.
    """
    env = os.environ if env is None else env
    url = host or env.get("DOCKER_HOST") or DEFAULT_SOCKET
    parts = urlsplit(url)
    scheme = parts.scheme or "unix"
    if scheme in ("unix", "npipe"):
        return EngineTarget(url=url, transport="unix")
    if scheme == "ssh":
        if shutil.which("ssh") is None:
            raise SandboxError(f"engine {url}: ssh:// needs the ssh client; install openssh-client")
        return EngineTarget(url=url, transport="ssh")
    if scheme not in ("tcp", "http", "https"):
        raise SandboxError(f"engine {url}: unknown scheme {scheme!r}; use unix://, ssh://user@host or "
                           "tcp://host:2376 with TLS client certificates")
    if not parts.hostname or not parts.port:
        raise SandboxError(f"engine {url}: a TCP engine needs a host and a port, e.g. tcp://sandbox-1:2376")
    config = _tls_for(parts.hostname, parts.port, tls, env) if scheme != "http" else None
    if config is not None:
        return EngineTarget(url=f"tcp://{parts.hostname}:{parts.port}", transport="tls", tls=config)
    if not insecure_tcp:
        raise SandboxError(
            f"engine {url} would be plain TCP: anyone who reaches that port is root on its machine. "
            "Use TLS (Sandbox(tls=TLSConfig(...)), or DOCKER_TLS_VERIFY=1 with DOCKER_CERT_PATH), or "
            "ssh://user@host; pass insecure_tcp=True only on a network nobody else can reach")
    _warn_once(url)
    return EngineTarget(url=f"tcp://{parts.hostname}:{parts.port}", transport="insecure-tcp")


def _tls_for(hostname: str, port: int, tls: TLSArg, env: Mapping[str, str]) -> Optional[TLSConfig]:
    """The certificates for one TCP engine: given for it, given for all, or Docker's env convention."""
    if isinstance(tls, TLSConfig):
        return tls
    if tls is not None:
        for key in (f"tcp://{hostname}:{port}", f"{hostname}:{port}", hostname):
            if key in tls:
                return tls[key]
    if env.get("DOCKER_TLS_VERIFY", "") in ("", "0"):
        return None
    base = Path(env.get("DOCKER_CERT_PATH") or Path.home() / ".docker").expanduser()
    for sub in (f"{hostname}:{port}", hostname):
        if all((base / sub / f).is_file() for f in CERT_FILES):
            return TLSConfig.from_dir(base / sub)
    return TLSConfig.from_dir(base)


def _warn_once(url: str) -> None:
    with _warned_lock:
        if url in _warned:
            return
        _warned.add(url)
    log.warning("engine %s is plain TCP (insecure_tcp=True): anyone who reaches the port is root on "
                "that machine; use TLS or ssh:// outside a private network", url)


__all__ = ["TLSConfig", "EngineTarget", "resolve", "CERT_FILES", "DEFAULT_SOCKET"]
