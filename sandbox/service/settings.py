"""What `proctor sandbox serve` is configured with, and the checks made before it listens."""

from __future__ import annotations

import ipaddress
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..errors import SandboxError
from ..session import SessionLimits

LOOPBACK_NAMES = ("localhost", "ip6-localhost")


@dataclass(frozen=True)
class ServiceSettings:
    """Limits of the service (the sandbox's own limits are the jobs').

    ``token``: the bearer token every request must carry (None: no auth, loopback only).
    ``max_body_bytes``: a request body larger than this is refused (413).
    ``max_pending``: jobs admitted and not yet finished, over all requests; a request that
    would go past it gets 429 with Retry-After. ``batch_window``: jobs of one /v1/jobs
    batch running or queued at once (its share of ``max_pending``; results flow as the
    client reads them, so a slow reader holds back its own batch only).
    ``max_sessions``: open sessions (/v1/sessions and /run_jupyter). ``run_code_memory_mb``:
    the memory limit of a /run_code or /run_jupyter request that sends none (SandboxFusion's
    -1, "unlimited"). ``wall_slack_s``: /run_code's run_timeout is the CPU limit; the wall
    limit is run_timeout plus this.
    """

    token: Optional[str] = None
    max_body_bytes: int = 32 << 20
    max_pending: int = 256
    batch_window: int = 32
    max_sessions: int = 32
    run_code_memory_mb: int = 1024
    wall_slack_s: float = 5.0
    session_limits: SessionLimits = SessionLimits()
    retry_after_s: int = 1

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_pending", "batch_window", "max_sessions", "run_code_memory_mb",
                     "retry_after_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SandboxError(f"ServiceSettings.{name} must be an integer >= 1, got {value!r}")
        if self.batch_window > self.max_pending:
            raise SandboxError(f"ServiceSettings.batch_window ({self.batch_window}) must be <= max_pending "
                               f"({self.max_pending}): one batch could never be admitted")
        if self.token is not None and len(self.token) < 16:
            raise SandboxError("the service token must be at least 16 characters: make one with "
                               "`python -c 'import secrets; print(secrets.token_urlsafe(32))' > token`")


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, token: Optional[str]) -> None:
    """Refuse to listen beyond this machine without a token: anyone who reaches the port could run code."""
    if token is None and not is_loopback(host):
        raise SandboxError(f"refusing to listen on {host} without a token: anyone who reaches it could run "
                           "programs here. Pass --token-file FILE (a secret of >= 16 characters), or listen "
                           "on 127.0.0.1")


def read_token(path: Path) -> str:
    """The token in ``path`` (stripped); it must not be readable by other users."""
    try:
        mode = os.stat(path).st_mode
        text = path.read_text().strip()
    except OSError as exc:
        raise SandboxError(f"cannot read the token file {path}: {exc.strerror}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SandboxError(f"the token file {path} is readable by other users: chmod 600 {path}")
    if not text:
        raise SandboxError(f"the token file {path} is empty: write a secret of >= 16 characters into it")
    return text


__all__ = ["ServiceSettings", "check_bind", "is_loopback", "read_token"]
