"""SandboxFusion's ``POST /run_jupyter``: cells run in turn in a fresh Proctor session.

State (variables, imports, files) carries from cell to cell as in a notebook; the
session is closed at the end, so nothing outlives the request. Each cell's answer has
SandboxFusion's shape: ``stdout``, ``stderr``, ``display`` (the last expression's value
as ``{"text/plain": repr}``) and ``error`` (``{"ename", "evalue", "traceback"}``). A cell
that errs does not stop the next (as in SandboxFusion); a cell that hits a limit resets
the session (Proctor's rule: its state is gone) and says so in its error. ``cell_timeout``
(0: none) bounds each cell, ``total_timeout`` all of them: past it the driver's status is
TimeLimitExceeded and the answer Failed, with the cells that ran. An infrastructure
failure is SandboxError.
"""

from __future__ import annotations

import base64
import time
from typing import Any, Callable, Dict, List, Optional

from pydantic import BaseModel, Field

from ..errors import InfraError, SessionClosed
from ..session import CellResult, SessionLimits
from .status import ServedSession
from .run_code import CommandRunResult, CommandRunStatus, RunStatus, memory_mb

MIN_CELL_S = 0.05


class RunJupyterRequest(BaseModel):
    cells: List[str] = Field(..., description="code blocks to run in turn in one interpreter")
    cell_timeout: float = Field(0, ge=0, description="max run time of each cell (0: only total_timeout)")
    total_timeout: float = Field(45, gt=0, description="max run time of all the cells")
    memory_limit_MB: int = Field(-1, description="memory limit in MB; -1: the service's default")
    kernel: str = Field("python3", description="python3 only")
    files: Dict[str, str] = Field({}, description="path -> base64 content, written before the first cell")
    fetch_files: List[str] = Field([], description="paths whose content comes back base64 in files")


class CellRunResult(BaseModel):
    stdout: str
    stderr: str
    display: List[Dict[str, Any]]
    error: List[Dict[str, Any]]
    proctor_status: str = "ok"


class RunJupyterResponse(BaseModel):
    status: RunStatus
    message: str
    driver: Optional[CommandRunResult] = None
    cells: List[CellRunResult] = []
    executor_pod_name: Optional[str] = None
    files: Dict[str, str] = {}


def cell_answer(cell: CellResult) -> CellRunResult:
    # A notebook shows no value for None (a cell ending in print(), say): neither do we.
    display = [{"text/plain": cell.value}] if cell.value not in (None, "None") else []
    error: list[dict] = []
    if cell.status != "ok":
        ename, _, evalue = (cell.error or cell.status).partition(": ")
        if cell.status != "error":
            ename, evalue = {"timeout": "TimeoutError", "memory": "MemoryError",
                             "output_limit": "OutputLimitError"}.get(cell.status, cell.status), cell.error or ""
        error.append({"ename": ename, "evalue": evalue, "traceback": (cell.traceback or "").splitlines()})
    return CellRunResult(stdout=cell.stdout, stderr=cell.stderr, display=display, error=error,
                         proctor_status=cell.status)


def session_limits(req: RunJupyterRequest, base: SessionLimits, default_memory_mb: int) -> SessionLimits:
    per_cell = req.cell_timeout if req.cell_timeout > 0 else req.total_timeout
    return SessionLimits(cpu_s=per_cell, wall_s=per_cell, memory_mb=memory_mb(req.memory_limit_MB, default_memory_mb),
                         output_bytes=base.output_bytes, idle_ttl_s=max(base.idle_ttl_s, req.total_timeout + 60),
                         budget_s=req.total_timeout)


def run_cells(req: RunJupyterRequest, open_session: Callable[[SessionLimits], ServedSession],
              base: SessionLimits, default_memory_mb: int) -> RunJupyterResponse:
    """Run the request's cells in a new session (closed at the end). Blocking: call it from a worker thread."""
    limits = session_limits(req, base, default_memory_mb)
    t0 = time.monotonic()
    answers: list[CellRunResult] = []
    try:
        with open_session(limits) as session:
            if req.files:
                session.put_files({p: base64.b64decode(c) for p, c in req.files.items()})
            for code in req.cells:
                left = req.total_timeout - (time.monotonic() - t0)
                if left < MIN_CELL_S:
                    return _timed_out(answers, t0)
                per_cell = min(limits.wall_s, left)
                cell = session.run(code, limits=SessionLimits(
                    cpu_s=per_cell, wall_s=per_cell, memory_mb=limits.memory_mb, output_bytes=limits.output_bytes,
                    idle_ttl_s=limits.idle_ttl_s, budget_s=limits.budget_s))
                if cell.status == "infra_error":
                    return _sandbox_error(cell.error or "the session's container failed", answers, t0)
                answers.append(cell_answer(cell))
                if session.closed or (cell.status == "timeout"
                                      and time.monotonic() - t0 >= req.total_timeout - MIN_CELL_S):
                    return _timed_out(answers, t0)   # closed here: its CPU budget (total_timeout) is spent
            fetched = session.get_files(req.fetch_files) if req.fetch_files else {}
    except (InfraError, SessionClosed) as exc:
        return _sandbox_error(str(exc), answers, t0)
    files = {p: base64.b64encode(c).decode() for p, c in fetched.items() if c is not None}
    driver = CommandRunResult(status=CommandRunStatus.Finished, execution_time=time.monotonic() - t0, return_code=0)
    return RunJupyterResponse(status=RunStatus.Success, message="", driver=driver, cells=answers, files=files)


def _timed_out(answers: list[CellRunResult], t0: float) -> RunJupyterResponse:
    driver = CommandRunResult(status=CommandRunStatus.TimeLimitExceeded, execution_time=time.monotonic() - t0)
    return RunJupyterResponse(status=RunStatus.Failed, message="total_timeout reached", driver=driver, cells=answers)


def _sandbox_error(message: str, answers: list[CellRunResult], t0: float) -> RunJupyterResponse:
    driver = CommandRunResult(status=CommandRunStatus.Error, execution_time=time.monotonic() - t0)
    return RunJupyterResponse(status=RunStatus.SandboxError, message=message, driver=driver, cells=answers)


__all__ = ["RunJupyterRequest", "RunJupyterResponse", "CellRunResult", "run_cells", "cell_answer"]
