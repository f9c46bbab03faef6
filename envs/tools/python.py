"""The ``python`` tool: a stateful interpreter in the sandbox, one session per episode.

    tool = PythonTool()                    # its own Sandbox on first use; or PythonTool(sandbox=sb)
    env = ToolEnv(source, verifier, tools=[tool])

Variables, imports and files persist from one call to the next within an episode (one
`Sandbox.session`, a container of its own, opened at the episode's first call and closed
when the episode ends); no two episodes share one. The model reads what the cell printed,
the value of its last expression (as a notebook shows it) or its error with the
traceback's last lines. A timeout, a memory kill or an output flood is an error output
the model reads (the session is then reset: its state is gone, and the message says so);
a session that cannot start or a container that died is ``infra_error``: the episode is
not judged.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Mapping, Optional, Union

from proctor.sandbox import CellResult, InfraError, SandboxError, SessionClosed, SessionLimits
from proctor.sandbox.runner import JobRunner, SessionLike

from .schema import Tool, ToolContext, ToolOutput

TRACEBACK_LINES = 6
RESET_NOTE = "the session was reset: its variables, imports and files are gone"


class PythonTool(Tool):
    """``python(code)``: run code in the episode's own persistent interpreter.

    ``sandbox``: a `Sandbox` / `RemoteSandbox` to share (the caller closes it), a function that
    returns one (a verifier's, started when first asked), a mapping of options (``{url: ...,
    token_file: ...}`` for a service), or None: one is started on first use and ``close`` stops it.
    ``memory_mb`` / ``budget_s`` / ``output_bytes``: each session's memory, total CPU seconds and
    per-stream output; the time of one call is the episode's
    ``ToolLimits.timeout_s`` (CPU and wall)."""

    name = "python"
    description = ("Run Python code in a persistent interpreter: variables, imports and files are kept between "
                   "calls. Returns what the code prints and the value of its last expression.")
    parameters = {"type": "object", "required": ["code"],
                  "properties": {"code": {"type": "string", "description": "The Python code to run."}}}

    def __init__(self, sandbox: Union[JobRunner, Callable[[], JobRunner], Mapping[str, Any], None] = None, *,
                 memory_mb: int = 256,
                 budget_s: float = 120.0, output_bytes: int = 64 << 10) -> None:
        self.session_limits = SessionLimits(memory_mb=memory_mb, budget_s=budget_s, output_bytes=output_bytes,
                                            idle_ttl_s=max(300.0, budget_s))
        self._options: dict[str, Any] = dict(sandbox) if isinstance(sandbox, Mapping) else {}
        self._provider = sandbox if callable(sandbox) and not hasattr(sandbox, "session") else None
        self._sandbox: Optional[JobRunner] = (None if isinstance(sandbox, Mapping) or self._provider is not None
                                              else sandbox)  # type: ignore[assignment]
        self._owns = self._sandbox is None and self._provider is None
        self._lock = threading.Lock()

    @property
    def sandbox(self) -> JobRunner:
        """The sandbox sessions open on, started on first use when none was given."""
        if self._provider is not None:
            return self._provider()
        with self._lock:
            if self._sandbox is None:
                from ..code.verifier import make_sandbox

                # a local Sandbox starts no container up front: sessions start their own
                local = {} if self._options.get("url") else {"startup_check": ()}
                self._sandbox = make_sandbox({**local, **self._options})
            return self._sandbox

    def call(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolOutput:
        try:
            session = self._session(context)
        except (InfraError, SandboxError) as exc:
            return ToolOutput(f"the python session could not start: {exc}", "infra_error")
        t = context.timeout_s
        limits = SessionLimits(cpu_s=t, wall_s=t, memory_mb=self.session_limits.memory_mb,
                               output_bytes=self.session_limits.output_bytes)
        try:
            result = session.run(str(arguments["code"]), limits=limits)
        except SessionClosed as exc:
            context.state.pop(self.name, None)
            if getattr(session, "close_reason", None) == "budget":
                return ToolOutput(f"Error: the python session spent its {self.session_limits.budget_s:g} CPU "
                                  f"seconds; {RESET_NOTE}", "error")
            return ToolOutput(f"the python session closed: {exc}", "infra_error")
        if getattr(session, "closed", False):   # a memory kill closes the session: the next call opens a new one
            context.state.pop(self.name, None)
        return cell_output(result, t)

    def _session(self, context: ToolContext) -> SessionLike:
        session = context.state.get(self.name)
        if session is None:
            session = self.sandbox.session("python", limits=self.session_limits)
            context.state[self.name] = session
        return session

    def end_episode(self, context: ToolContext) -> None:
        session = context.state.pop(self.name, None)
        if session is not None:
            try:
                session.close()
            except SandboxError:
                pass   # already gone: nothing of it is left to release

    def close(self) -> None:
        with self._lock:
            if self._owns and self._sandbox is not None:
                self._sandbox.close()
                self._sandbox = None


def cell_output(result: CellResult, timeout_s: float) -> ToolOutput:
    """What the model reads of one cell: output, then the value or the error."""
    shown = [part.rstrip("\n") for part in (result.stdout, result.stderr) if part]
    if result.status == "ok":
        if result.value is not None and result.value != "None":
            shown.append(result.value)
        return ToolOutput("\n".join(shown) if shown else "(no output)")
    if result.status == "error":
        trace = (result.traceback or result.error or "").rstrip("\n").splitlines()[-TRACEBACK_LINES:]
        return ToolOutput("\n".join(shown + trace), "error")
    if result.status == "infra_error":
        return ToolOutput(result.error or "the python session failed", "infra_error")
    why = {"timeout": f"the code did not finish within {timeout_s:g} s",
           "memory": "the code ran out of memory", "output_limit": "the code printed too much"}[result.status]
    reset = f"; {RESET_NOTE}" if result.reset else ""
    shown.append(f"Error: {why}{reset}")
    return ToolOutput("\n".join(shown), "timeout" if result.status == "timeout" else "error")


__all__ = ["PythonTool", "cell_output"]
