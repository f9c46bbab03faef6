"""Docker-isolated execution of untrusted programs.

    from proctor.sandbox import Sandbox, Job, Limits, Result
    with Sandbox() as sb:
        r = sb.run(Job(language="python", code=src, tests=test_src, limits=Limits(wall_s=5, memory_mb=256)))
        rs = sb.run_many(jobs)   # concurrent, results in job order
"""

from .cache import CacheStats, VerdictCache
from .breaker import HostHealth
from .errors import (BadJob, EngineUnavailable, HostDown, ImageBuildError, InfraError, NoHostAvailable,
                     SandboxError, SessionClosed)
from .hosts import TLSConfig
from .remote import RemoteSandbox, RemoteSession
from .runner import JobRunner
from .sandbox import Sandbox
from .session import CellResult, Session, SessionLimits
from .types import LANGUAGES, STATUSES, CaseResult, Job, Limits, Result

__all__ = [
    "Sandbox", "RemoteSandbox", "RemoteSession", "JobRunner", "TLSConfig", "Job", "Limits", "Result", "CaseResult", "LANGUAGES", "STATUSES", "VerdictCache", "CacheStats",
    "SandboxError", "InfraError", "EngineUnavailable", "ImageBuildError", "BadJob",
    "NoHostAvailable", "HostDown", "HostHealth", "Session", "SessionLimits", "CellResult", "SessionClosed",
]
