"""The sandbox as an HTTP service (``proctor sandbox serve``).

* SandboxFusion-compatible ``POST /run_code`` and ``POST /run_jupyter`` (run_code.py,
  jupyter.py): SandboxFusion's own client and verl's ``sandbox_fusion_url`` reward code
  work against it unchanged.
* Proctor's own ``POST /v1/jobs`` (a batch of `Job`s, results streamed in job order) and
  ``/v1/sessions`` (stateful interpreters) (native.py); `proctor.sandbox.remote.RemoteSandbox`
  is their client.
* ``GET /health``, ``GET /metrics`` (Prometheus), ``GET /v1/ping``.
* A bearer token (required off loopback), a body-size limit, a bounded queue (429 with
  Retry-After) and a bound on open sessions (settings.py, admission.py, app.py).
"""

from .app import create_app
from .server import serve
from .settings import ServiceSettings, check_bind, read_token

__all__ = ["create_app", "serve", "ServiceSettings", "check_bind", "read_token"]
