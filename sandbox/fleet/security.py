"""The fleet's security checks, made where the Docker socket is: in each host actor.

A Ray cluster without token authentication runs any code sent by anyone who reaches its
ports; a host actor holds its node's Docker socket, which is root on that node. So a host
actor refuses to start on such a cluster unless the user said so. The check reads the
mode of the worker process the actor runs in, which is the cluster's (a client's own
``RAY_AUTH_MODE`` says nothing about the cluster: measured with Ray 2.60, a client in
token mode connects to a cluster without authentication and its workers report
``disabled``).
"""

from __future__ import annotations

import os
from urllib.parse import urlparse

from ..errors import SandboxError

DEFAULT_ENGINE = "unix:///var/run/docker.sock"


class ClusterNotAuthenticated(SandboxError):
    """The Ray cluster runs without token authentication and the fleet was not told to accept that."""


def cluster_token_auth() -> bool:
    """Whether the Ray cluster this process runs in checks a token on every connection."""
    from ray._raylet import AuthenticationMode, get_authentication_mode

    return get_authentication_mode() == AuthenticationMode.TOKEN


def require_token_auth(allow_unauthenticated: bool) -> None:
    """Raise ClusterNotAuthenticated unless the cluster checks tokens (or the user accepted the risk)."""
    if allow_unauthenticated or cluster_token_auth():
        return
    raise ClusterNotAuthenticated(
        "this Ray cluster runs without token authentication: anyone who reaches its ports can run code "
        "on every node, and a sandbox host actor holds its node's Docker socket (root there). Start every "
        "node with RAY_AUTH_MODE=token and the same token (RAY_AUTH_TOKEN or ~/.ray/auth_token; "
        "`ray get-auth-token --generate` makes one), or pass sandbox.allow_unauthenticated=true for a "
        "cluster on a network you trust entirely")


def local_engine() -> str:
    """This node's Docker engine: DOCKER_HOST when set, else the default socket; only a unix socket.

    A fleet node must not reach its engine over TCP or ssh: that would put a Docker API
    (root on its host) on the network, which is what the fleet exists to avoid.
    """
    url = os.environ.get("DOCKER_HOST") or DEFAULT_ENGINE
    if urlparse(url).scheme != "unix":
        raise SandboxError(f"this sandbox node's DOCKER_HOST is {url!r}: a fleet node uses its own engine over "
                           "its unix socket, never a Docker API on the network. Unset DOCKER_HOST (the default "
                           f"is {DEFAULT_ENGINE}) or point it at unix:///path/to/docker.sock before `ray start`")
    return url


__all__ = ["ClusterNotAuthenticated", "DEFAULT_ENGINE", "cluster_token_auth", "local_engine", "require_token_auth"]
