"""Exceptions raised by ``proctor.sandbox``.

One root (`SandboxError`) so callers can catch everything the sandbox raises; the
subclasses separate "the machine is not set up" (infrastructure) from "the caller
sent something invalid" (`BadJob`), because only the former is worth retrying.
"""

from __future__ import annotations


class SandboxError(Exception):
    """Base class of every error raised by proctor.sandbox."""


class InfraError(SandboxError):
    """The execution infrastructure failed (engine, container, image); not the job's fault."""


class EngineUnavailable(InfraError):
    """The Docker engine could not be reached."""


class HostDown(InfraError):
    """A sandbox host was taken out after failing to start containers; no start was attempted."""


class NoHostAvailable(InfraError):
    """No host of a `Sandbox` can start containers; the message names each host, its cause and the fix."""


class ImageBuildError(InfraError):
    """Building a sandbox image (or its Debian base) failed."""


class BadJob(SandboxError, ValueError):
    """A job is malformed (bad limits, paths, language); fix the caller, retrying will not help."""


class SessionClosed(SandboxError):
    """A `Session` is closed (closed by its owner, idle past its TTL, out of budget, or its process died).

    Its state is gone: open a new session with `Sandbox.session()`.
    """
