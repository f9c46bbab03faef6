"""``proctor images build|list|prune``: the sandbox images, built locally without a registry."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from proctor.sandbox import images as img
from proctor.sandbox.engine import connect
from proctor.sandbox.errors import SandboxError
from proctor.sandbox.hosts import TLSConfig

app = typer.Typer(help="Build, list and prune the sandbox images (proctor/python, proctor/cpp).", no_args_is_help=True)
console = Console()
err = Console(stderr=True)


HostOpt = Annotated[Optional[str], typer.Option(
    "--host", help="Docker engine URL: unix://, ssh://user@host, tcp://host:2376 (TLS); "
                   "default: DOCKER_HOST or the local socket.")]
CertOpt = Annotated[Optional[Path], typer.Option(
    "--cert-path", help="TLS client certificates (ca.pem, cert.pem, key.pem) for a tcp:// host; "
                        "default: DOCKER_CERT_PATH when DOCKER_TLS_VERIFY=1.")]
InsecureOpt = Annotated[bool, typer.Option(
    "--insecure-tcp", help="Allow a plain-TCP engine (root for anyone who reaches the port).")]


def _connect(host: Optional[str], cert_path: Optional[Path], insecure_tcp: bool):
    tls = TLSConfig.from_dir(cert_path) if cert_path else None
    return connect(host, tls=tls, insecure_tcp=insecure_tcp)


def _fail(exc: Exception) -> typer.Exit:
    err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
    return typer.Exit(code=1)


@app.command("build")
def build(
    name: Annotated[
        Optional[list[str]],
        typer.Option("--name", "-n", help=f"Image to build ({'|'.join(img.IMAGE_NAMES)}); repeatable. Default: all."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Rebuild even when the current tag exists (no layer cache).")] = False,
    host: HostOpt = None,
    cert_path: CertOpt = None,
    insecure_tcp: InsecureOpt = False,
) -> None:
    """Build the images whose input hash has no tag yet; unchanged inputs cost nothing."""
    for n in name or []:
        if n not in img.IMAGE_NAMES:
            raise typer.BadParameter(f"unknown image {n!r}; choose from {', '.join(img.IMAGE_NAMES)}", param_hint="--name")
    try:
        client = _connect(host, cert_path, insecure_tcp)
        results = img.ensure_images(
            client, names=name or None, force=force,
            # Build logs contain brackets ("[1/2]"); escape them so rich does not read markup.
            progress=lambda line: console.print(f"[dim]{escape(line)}[/dim]", highlight=False, soft_wrap=True),
        )
    except SandboxError as exc:
        raise _fail(exc) from exc
    table = Table(title="sandbox images")
    for col in ("image", "ref", "result"):
        table.add_column(col)
    for r in results:
        table.add_row(r.name, r.ref, "[green]built[/green]" if r.built else "already current")
    console.print(table)


@app.command("list")
def list_images(
    host: HostOpt = None,
    cert_path: CertOpt = None,
    insecure_tcp: InsecureOpt = False,
) -> None:
    """Show each image's current ref, whether it is built, and stale tags left by older inputs."""
    try:
        statuses = img.image_status(_connect(host, cert_path, insecure_tcp))
    except SandboxError as exc:
        raise _fail(exc) from exc
    table = Table(title="sandbox images")
    for col in ("image", "ref", "status", "stale tags"):
        table.add_column(col)
    for s in statuses:
        state = "[green]present[/green]" if s.present else "[red]missing[/red] (run `proctor images build`)"
        table.add_row(s.name, s.ref, state, ", ".join(s.stale_tags) or "-")
    console.print(table)


@app.command("prune")
def prune(
    host: HostOpt = None,
    cert_path: CertOpt = None,
    insecure_tcp: InsecureOpt = False,
) -> None:
    """Remove proctor/* tags (images and base) that the current inputs no longer hash to."""
    try:
        removed, kept = img.prune_images(_connect(host, cert_path, insecure_tcp))
    except SandboxError as exc:
        raise _fail(exc) from exc
    for tag in removed:
        console.print(f"removed {tag}", highlight=False)
    for tag in kept:
        console.print(f"[yellow]kept[/yellow] {tag} (still used by a container; remove it and rerun)", highlight=False)
    if not removed and not kept:
        console.print("nothing to prune")
