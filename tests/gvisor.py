"""Whether gVisor (runsc) can run a sandbox on this machine: shared by the modules that test under it.

A module runs under gVisor when runsc is registered with the engine
(``PROCTOR_RUNTIME=runsc bash scripts/setup.sh``) and a sandbox job just ran under it.
Otherwise its tests skip, naming the reason (the engine's or the kernel's error); with
``PROCTOR_RUNTIME=runsc`` set, that is a failure instead, since gVisor was asked for.
"""

from __future__ import annotations

import functools
import os
from typing import Optional

import pytest

from proctor.sandbox import Job, Sandbox, SandboxError
from proctor.sandbox.engine import check_runtime, connect

RUNTIME = os.environ.get("PROCTOR_GVISOR_RUNTIME", "runsc")
VERSION_PROBE = "print(open('/proc/version').read().strip())"


@functools.lru_cache(maxsize=1)
def gvisor_problem() -> Optional[str]:
    """Why a sandbox cannot run under gVisor here, or None when one just did (probed once per session)."""
    try:
        client = connect()
        if not check_runtime(client, RUNTIME, client.api.base_url):
            return f"runtime {RUNTIME!r} is registered with the engine but is not gVisor's runsc"
        with Sandbox(runtime=RUNTIME, slots=1, spare=0, retries=0, auto_build=True) as sb:
            r = sb.run(Job("python", VERSION_PROBE))
    except SandboxError as exc:
        return str(exc)
    if r.status != "passed":
        return f"a sandbox job under {RUNTIME} ended {r.status}: {(r.error or r.stderr)[-800:]}"
    return None


def require_gvisor() -> str:
    """The runtime name, or skip (fail under PROCTOR_RUNTIME=runsc) saying why gVisor cannot run."""
    problem = gvisor_problem()
    if problem is None:
        return RUNTIME
    if os.environ.get("PROCTOR_RUNTIME") == "runsc":
        pytest.fail(f"PROCTOR_RUNTIME=runsc but gVisor cannot run a sandbox here: {problem}")
    pytest.skip(f"gVisor (runsc) cannot run a sandbox on this machine: {problem}")
