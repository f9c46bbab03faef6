"""`JobRunner`: what code that judges programs needs of a sandbox, local (`Sandbox`) or remote
(`RemoteSandbox`), so the code env and the trainer switch between them by configuration."""

from __future__ import annotations

from typing import Callable, Iterable, Iterator, Optional, Protocol, Sequence, runtime_checkable

from .session import CellResult, SessionLimits
from .types import Job, Limits, Result

Progress = Callable[[int, Optional[int]], None]


@runtime_checkable
class SessionLike(Protocol):
    """A stateful interpreter: `Session` here, `RemoteSession` through the service."""

    id: str

    def run(self, code: str, *, limits: Optional[SessionLimits] = None) -> CellResult: ...
    def put_files(self, files: dict) -> None: ...
    def get_files(self, paths: Sequence[str]) -> dict[str, Optional[bytes]]: ...
    def close(self) -> None: ...
    def __enter__(self) -> "SessionLike": ...
    def __exit__(self, *exc: object) -> None: ...


@runtime_checkable
class JobRunner(Protocol):
    """Every method callers of a sandbox use; `Sandbox` and `RemoteSandbox` implement all of them."""

    slots: int

    def run(self, job: Job) -> Result: ...
    def run_many(self, jobs: Iterable[Job], progress: Optional[Progress] = None, *,
                 max_pending: Optional[int] = None) -> list[Result]: ...
    def imap(self, jobs: Iterable[Job], progress: Optional[Progress] = None, *,
             max_pending: Optional[int] = None) -> Iterator[Result]: ...
    def session(self, language: str = "python", *, limits: Optional[SessionLimits] = None) -> SessionLike: ...
    def warmup(self, languages: Sequence[str] = ("python",), per_host: Optional[int] = None,
               limits: Optional[Limits] = None) -> None: ...
    def close(self) -> None: ...
    def __enter__(self) -> "JobRunner": ...
    def __exit__(self, *exc: object) -> None: ...


__all__ = ["JobRunner", "SessionLike", "Progress"]
