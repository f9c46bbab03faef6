"""``proctor sandbox serve``: the sandbox as an HTTP service (proctor/sandbox/service)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from proctor.sandbox import SandboxError, SessionLimits

err = Console(stderr=True)


def serve(
    host: Annotated[str, typer.Option(help="Address to listen on. Off loopback a --token-file is required.")]
    = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
    token_file: Annotated[Optional[Path], typer.Option(
        help="File holding the bearer token (>= 16 characters, chmod 600). Clients send "
             "'Authorization: Bearer TOKEN', or http://user:TOKEN@host:port as the URL.")] = None,
    pool_size: Annotated[Optional[int], typer.Option(help="Jobs run at once (default: the CPU count).")] = None,
    runtime: Annotated[Optional[str], typer.Option(help="OCI runtime, e.g. runsc (gVisor).")] = None,
    docker_host: Annotated[Optional[list[str]], typer.Option(
        help="Docker engine URL(s) (unix://, ssh://, tcp:// with TLS); default: the local engine.")] = None,
    ray_address: Annotated[Optional[str], typer.Option(
        help="Run the jobs on this Ray cluster's sandbox fleet ('auto': the cluster this machine is in; "
             "docs/ray.md) instead of a local pool.")] = None,
    warm: Annotated[list[str], typer.Option(help="Languages whose containers start before serving.")]
    = ["python"],   # noqa: B006 (typer reads the default)
    max_pending: Annotated[int, typer.Option(help="Jobs queued or running over all requests; 429 beyond.")] = 256,
    batch_window: Annotated[int, typer.Option(help="Jobs of one /v1/jobs batch queued or running at once.")] = 32,
    max_sessions: Annotated[int, typer.Option(help="Open sessions (/v1/sessions, /run_jupyter); 429 beyond.")] = 32,
    max_body_mb: Annotated[int, typer.Option(help="Largest request body in MiB (413 beyond).")] = 32,
    memory_mb: Annotated[int, typer.Option(
        help="Memory limit of a /run_code or /run_jupyter request that sends none (-1).")] = 1024,
    session_idle_ttl_s: Annotated[float, typer.Option(help="A session unused this long is closed.")] = 300.0,
    log_level: Annotated[str, typer.Option(help="uvicorn's log level.")] = "info",
) -> None:
    """Serve the sandbox over HTTP: SandboxFusion's /run_code and /run_jupyter, Proctor's /v1/jobs and
    /v1/sessions, /health and /metrics."""
    from proctor.sandbox.service import ServiceSettings, read_token
    from proctor.sandbox.service import serve as run_service

    try:
        token = read_token(token_file) if token_file else None
        settings = ServiceSettings(token=token, max_pending=max_pending, batch_window=min(batch_window, max_pending),
                                   max_sessions=max_sessions, max_body_bytes=max_body_mb << 20,
                                   run_code_memory_mb=memory_mb,
                                   session_limits=SessionLimits(idle_ttl_s=session_idle_ttl_s))
        err.print(f"[bold]proctor sandbox serve[/bold] on http://{host}:{port} "
                  f"({'token required' if token else 'no token: loopback only'})")
        run_service(host, port, settings, pool_size=pool_size, runtime=runtime, docker_hosts=docker_host,
                    warm=warm, log_level=log_level, ray_address=ray_address)
    except SandboxError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None
