"""``proctor doctor``: what this machine has and lacks for sandboxes and training, with fixes.

Every probe is wrapped so doctor reports a broken dependency instead of crashing on it.
"""

from __future__ import annotations

import importlib
import json
import shutil
import sys
from dataclasses import asdict, dataclass
from typing import Annotated, Any, Callable, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

OK, MISSING, WARN = "ok", "missing", "warn"
MIN_PYTHON = (3, 10)


@dataclass
class Check:
    check: str
    status: str  # ok | missing | warn
    detail: str
    fix: str = ""
    required: bool = False

    @property
    def failed(self) -> bool:
        return self.required and self.status != OK


def _guard(name: str, required: bool, fn: Callable[[], Check]) -> Check:
    try:
        return fn()
    except Exception as exc:  # a probe must never take doctor down with it
        return Check(name, MISSING if required else WARN, f"probe crashed: {exc!r}", required=required)


def check_engine(host: str | None) -> tuple[Check, Any]:
    from proctor.sandbox.engine import connect
    from proctor.sandbox.errors import EngineUnavailable

    try:
        client = connect(host)
    except EngineUnavailable as exc:
        return Check("docker engine", MISSING, str(exc), "bash scripts/setup.sh  (or: dockerd &)", True), None
    version = client.version().get("Version", "?")
    return Check("docker engine", OK, f"reachable, server {version}", required=True), client


def check_mmdebstrap() -> Check:
    path = shutil.which("mmdebstrap")
    if path:
        return Check("mmdebstrap", OK, path)
    return Check("mmdebstrap", MISSING, "needed only to (re)build the image base", "apt-get install -y mmdebstrap")


def check_images(client: Any) -> list[Check]:
    from proctor.sandbox import images as img

    if client is None:
        return [
            Check(f"image {n}", MISSING, "engine unreachable", "proctor images build", True) for n in img.IMAGE_NAMES
        ]
    out = []
    for s in img.image_status(client):
        stale = f"; {len(s.stale_tags)} stale tag(s), `proctor images prune`" if s.stale_tags else ""
        if s.present:
            out.append(Check(f"image {s.name}", OK, f"{s.ref}{stale}", required=True))
        else:
            out.append(Check(f"image {s.name}", MISSING, f"{s.ref} not built{stale}", "proctor images build", True))
    return out


def check_torch() -> list[Check]:
    try:
        torch = importlib.import_module("torch")
    except Exception as exc:
        return [
            Check("torch", MISSING, f"not importable: {exc}", "pip install torch==2.13.0"),
            Check("cuda", WARN, "unknown (torch missing)"),
        ]
    checks = [Check("torch", OK, str(torch.__version__))]
    if torch.cuda.is_available():
        checks.append(Check("cuda", OK, f"{torch.cuda.device_count()} device(s): {torch.cuda.get_device_name(0)}"))
    else:
        checks.append(Check("cuda", WARN, "CPU-only (no CUDA device); training runs on CPU"))
    return checks


def check_vllm() -> Check:
    try:
        vllm = importlib.import_module("vllm")
    except Exception as exc:
        return Check("vllm", WARN, f"optional, not importable: {type(exc).__name__}", "pip install -e '.[vllm]'")
    return Check("vllm", OK, str(getattr(vllm, "__version__", "?")))


def check_python() -> Check:
    v = sys.version_info
    detail = f"{v.major}.{v.minor}.{v.micro} ({sys.executable})"
    if v[:2] >= MIN_PYTHON:
        return Check("python", OK, detail)
    return Check("python", WARN, detail, f"use Python >= {MIN_PYTHON[0]}.{MIN_PYTHON[1]}")


def run_checks(host: str | None = None) -> list[Check]:
    """All checks, in display order."""
    try:
        engine, client = check_engine(host)
    except Exception as exc:
        engine, client = Check("docker engine", MISSING, f"probe crashed: {exc!r}", "bash scripts/setup.sh", True), None
    checks = [engine, _guard("mmdebstrap", False, check_mmdebstrap)]
    try:
        checks += check_images(client)
    except Exception as exc:
        checks.append(Check("images", MISSING, f"probe crashed: {exc!r}", "proctor images build", True))
    try:
        checks += check_torch()
    except Exception as exc:
        checks.append(Check("torch", WARN, f"probe crashed: {exc!r}"))
    checks += [_guard("vllm", False, check_vllm), _guard("python", False, check_python)]
    return checks


_STYLE = {OK: "green", MISSING: "red", WARN: "yellow"}


def _print_table(checks: list[Check]) -> None:
    table = Table(title="proctor doctor")
    for col in ("check", "status", "detail", "fix"):
        table.add_column(col, overflow="fold")
    for c in checks:
        table.add_row(escape(c.check), f"[{_STYLE[c.status]}]{c.status}[/]", escape(c.detail), escape(c.fix))
    Console().print(table)


def doctor(
    as_json: Annotated[bool, typer.Option("--json", help="Print the checks as JSON instead of a table.")] = False,
    host: Annotated[Optional[str], typer.Option("--host", help="Docker engine URL; default: DOCKER_HOST or the local socket.")] = None,
) -> None:
    """Check the engine, images, torch, CUDA and vLLM; exit 1 when a required check (engine, images) fails."""
    checks = run_checks(host)
    ok = not any(c.failed for c in checks)
    if as_json:
        typer.echo(json.dumps({"ok": ok, "checks": [asdict(c) for c in checks]}, indent=2))
    else:
        _print_table(checks)
    if not ok:
        raise typer.Exit(code=1)
