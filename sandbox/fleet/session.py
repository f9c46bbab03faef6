"""`FleetSession`: a stateful interpreter on one node of the fleet, called through its host actor.

The same calls as `Session`. A session lives in one container on one node: if that node
is lost, the call in progress is an ``infra_error`` `CellResult` and the session is
closed (its state is gone), as when a local session's container crashes.
"""

from __future__ import annotations

import time
from typing import Any, Optional, Sequence

from ..errors import SessionClosed
from ..session import CellResult, SessionLimits


class FleetSession:
    """A session on host actor ``handle``; a context manager. Made by `RaySandbox.session`."""

    def __init__(self, handle: Any, session_id: str, language: str, limits: SessionLimits, node: str) -> None:
        self._handle, self.id, self.language, self.limits, self.node = handle, session_id, language, limits, node
        self._reason: Optional[str] = None
        self.calls = 0            # cells run through this handle
        self.cpu_spent_s = 0.0    # their CPU seconds (what the session's budget_s counts)

    def __enter__(self) -> "FleetSession":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def closed(self) -> bool:
        return self._reason is not None

    @property
    def close_reason(self) -> Optional[str]:
        """None while open (as far as this handle knows); then "closed" or "lost" (its node)."""
        return self._reason

    def run(self, code: str, *, limits: Optional[SessionLimits] = None) -> CellResult:
        import ray

        self._check_open()
        t0 = time.monotonic()
        try:
            result: CellResult = ray.get(self._handle.session_run.remote(self.id, code, limits))
            self.calls += 1
            self.cpu_spent_s += result.cpu_s
            return result
        except ray.exceptions.RayTaskError as exc:
            if isinstance(exc.cause, SessionClosed):
                self._reason = "closed"
            raise exc.cause from None
        except ray.exceptions.RayError as exc:
            self._reason = "lost"
            return CellResult(status="infra_error", stdout="", stderr="", value=None,
                              error=f"the sandbox node {self.node} was lost: {type(exc).__name__}",
                              traceback=None, wall_s=round(time.monotonic() - t0, 6), cpu_s=0.0)

    def put_files(self, files: dict) -> None:
        self._call("session_put_files", files)

    def get_files(self, paths: Sequence[str]) -> dict[str, Optional[bytes]]:
        return self._call("session_get_files", list(paths))

    def close(self) -> None:
        import ray

        if self._reason is None:
            self._reason = "closed"
            try:
                ray.get(self._handle.session_close.remote(self.id), timeout=60)
            except ray.exceptions.RayError:
                pass   # the node is gone, and its container with it

    def _call(self, method: str, *args: Any) -> Any:
        import ray

        self._check_open()
        try:
            return ray.get(getattr(self._handle, method).remote(self.id, *args))
        except ray.exceptions.RayTaskError as exc:
            raise exc.cause from None
        except ray.exceptions.RayError as exc:
            self._reason = "lost"
            raise SessionClosed(f"session {self.id}: the sandbox node {self.node} was lost ({type(exc).__name__}); "
                                "open a new session") from None

    def _check_open(self) -> None:
        if self._reason is not None:
            raise SessionClosed(f"session {self.id} is {self._reason}; open a new one")


__all__ = ["FleetSession"]
