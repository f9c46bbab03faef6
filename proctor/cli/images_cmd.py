"""``proctor images build|list|prune``: the sandbox images, built locally without a registry."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from proctor.sandbox import images as img
from proctor.sandbox.engine import connect
from proctor.sandbox.errors import SandboxError

app = typer.Typer(help="Build, list and prune the sandbox images (proctor/python, proctor/cpp).", no_args_is_help=True)
console = Console()
err = Console(stderr=True)


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
    host: Annotated[Optional[str], typer.Option("--host", help="Docker engine URL; default: DOCKER_HOST or the local socket.")] = None,
) -> None:
    """Build the images whose input hash has no tag yet; unchanged inputs cost nothing."""
    for n in name or []:
        if n not in img.IMAGE_NAMES:
            raise typer.BadParameter(f"unknown image {n!r}; choose from {', '.join(img.IMAGE_NAMES)}", param_hint="--name")
    try:
        client = connect(host)
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
    host: Annotated[Optional[str], typer.Option("--host", help="Docker engine URL; default: DOCKER_HOST or the local socket.")] = None,
) -> None:
    """Show each image's current ref, whether it is built, and stale tags left by older inputs."""
    try:
        statuses = img.image_status(connect(host))
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
    host: Annotated[Optional[str], typer.Option("--host", help="Docker engine URL; default: DOCKER_HOST or the local socket.")] = None,
) -> None:
    """Remove proctor/* tags (images and base) that the current inputs no longer hash to."""
    try:
        removed, kept = img.prune_images(connect(host))
    except SandboxError as exc:
        raise _fail(exc) from exc
    for tag in removed:
        console.print(f"removed {tag}", highlight=False)
    for tag in kept:
        console.print(f"[yellow]kept[/yellow] {tag} (still used by a container; remove it and rerun)", highlight=False)
    if not removed and not kept:
        console.print("nothing to prune")
