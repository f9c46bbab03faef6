"""``proctor sandbox run|demo``: run untrusted programs from the command line."""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from proctor.sandbox import Job, Limits, Result, Sandbox, SandboxError, TLSConfig

from . import sandbox_serve

app = typer.Typer(help="Run untrusted programs in the Docker sandbox.", no_args_is_help=True)
app.command("serve")(sandbox_serve.serve)
console = Console()
err = Console(stderr=True)

_EXT_LANGUAGE = {".py": "python", ".c": "c", ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp", ".java": "java", ".go": "go",
                 ".rs": "rust", ".js": "javascript", ".cjs": "javascript"}
_STYLE = {"passed": "green", "failed": "red", "infra_error": "magenta"}


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text()
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {what} {path}: {exc.strerror}") from None


def _load_cases(path: Path) -> list[tuple[str, str]]:
    """A JSON list of [stdin, expected_stdout] pairs, or JSON lines of {"input", "output"}."""
    text = _read(path, "cases file")
    try:
        data = json.loads(text)
        rows = data if isinstance(data, list) else [data]
    except json.JSONDecodeError:
        from proctor.envs.core.sources import BadRow, json_lines

        try:
            rows = [row for _, row in json_lines(text, str(path))]
        except BadRow as exc:
            raise typer.BadParameter(f"{exc}; expected a JSON list of [stdin, expected] pairs or JSON lines "
                                     "of {\"input\", \"output\"}") from None
    cases = []
    for n, row in enumerate(rows, 1):
        if isinstance(row, dict) and isinstance(row.get("input"), str) and isinstance(row.get("output"), str):
            cases.append((row["input"], row["output"]))
        elif isinstance(row, list) and len(row) == 2 and all(isinstance(x, str) for x in row):
            cases.append((row[0], row[1]))
        else:
            raise typer.BadParameter(f"{path}: case {n} must be [stdin, expected_stdout] or "
                                     f"{{\"input\": ..., \"output\": ...}} with strings, got {str(row)[:80]}")
    return cases


HostOpt = Annotated[Optional[list[str]], typer.Option(
    "--host", help="Docker engine URL(s): unix://, ssh://user@host, tcp://host:2376 (TLS); default: the local engine.")]
RuntimeOpt = Annotated[Optional[str], typer.Option(
    "--runtime", help="OCI runtime for the sandbox containers, e.g. runsc (gVisor); default: the engine's.")]
CertOpt = Annotated[Optional[Path], typer.Option(
    "--cert-path", help="TLS client certificates (ca.pem, cert.pem, key.pem) for tcp:// hosts; "
                        "default: DOCKER_CERT_PATH when DOCKER_TLS_VERIFY=1.")]
InsecureOpt = Annotated[bool, typer.Option(
    "--insecure-tcp", help="Allow plain-TCP engines (root for anyone who reaches the port).")]


def _sandbox(host: Optional[list[str]], runtime: Optional[str], cert_path: Optional[Path],
             insecure_tcp: bool) -> Sandbox:
    tls = TLSConfig.from_dir(cert_path) if cert_path else None
    return Sandbox(hosts=host, auto_build=True, runtime=runtime, tls=tls, insecure_tcp=insecure_tcp)


def _result_dict(r: Result) -> dict:
    d = asdict(r)
    d["cases"] = [asdict(c) for c in r.cases]
    return d


@app.command("run")
def run(
    file: Annotated[Path, typer.Argument(help="The program: .py, .c, .cpp, .java, .go, .rs or .js.")],
    tests: Annotated[Optional[Path], typer.Option("--tests", "-t", help="Test code: appended (Python) or linked (C/C++).")] = None,
    cases: Annotated[Optional[Path], typer.Option("--cases", help="stdin/stdout cases: JSON [[stdin, expected], ...].")] = None,
    language: Annotated[Optional[str], typer.Option("--language", "-l", help="python | c | cpp | java | go | rust | javascript (default: from the file's extension).")] = None,
    wall_s: Annotated[float, typer.Option(help="Wall-clock limit per run, seconds.")] = Limits.wall_s,
    cpu_s: Annotated[float, typer.Option(help="CPU-time limit per run (whole process tree), seconds.")] = Limits.cpu_s,
    memory_mb: Annotated[int, typer.Option(help="Memory limit, MiB.")] = Limits.memory_mb,
    as_json: Annotated[bool, typer.Option("--json", help="Print the Result as JSON.")] = False,
    host: HostOpt = None,
    runtime: RuntimeOpt = None,
    cert_path: CertOpt = None,
    insecure_tcp: InsecureOpt = False,
) -> None:
    """Run one program (and its tests or cases) in the sandbox; exit code 0 only if it passed."""
    lang = language or _EXT_LANGUAGE.get(file.suffix)
    if lang is None:
        raise typer.BadParameter(f"cannot tell the language of {file} from its extension; pass --language python|c|cpp|java|go|rust|javascript")
    try:
        job = Job(language=lang, code=_read(file, "program"),  # type: ignore[arg-type]
                  tests=_read(tests, "tests file") if tests else None,
                  cases=_load_cases(cases) if cases else None,
                  limits=Limits(wall_s=wall_s, cpu_s=cpu_s, memory_mb=memory_mb))
        with _sandbox(host, runtime, cert_path, insecure_tcp) as sb:
            result = sb.run(job)
    except SandboxError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(2) from None
    if as_json:
        print(json.dumps(_result_dict(result), indent=2))
    else:
        _print_result(file.name, result)
    raise typer.Exit(0 if result.passed else 1)


def _print_result(name: str, r: Result) -> None:
    style = _STYLE.get(r.status, "yellow")
    console.print(f"[bold]{escape(name)}[/bold]: [{style}]{r.status}[/{style}]  exit={r.exit_code} "
                  f"wall={r.wall_s * 1000:.0f} ms cpu={r.cpu_s * 1000:.0f} ms", highlight=False)
    for i, c in enumerate(r.cases):
        cs = _STYLE.get(c.status, "yellow")
        console.print(f"  case {i}: [{cs}]{c.status}[/{cs}] ({c.wall_s * 1000:.0f} ms)", highlight=False)
    if r.stdout:
        console.rule("stdout")
        console.print(escape(r.stdout[-2000:]), highlight=False)
    if r.stderr:
        console.rule("stderr")
        console.print(escape(r.stderr[-2000:]), highlight=False)
    if r.error:
        console.print(f"[magenta]{escape(r.error)}[/magenta]")


@app.command("demo")
def demo(
    host: HostOpt = None,
    runtime: RuntimeOpt = None,
    cert_path: CertOpt = None,
    insecure_tcp: InsecureOpt = False,
) -> None:
    """Run a sample batch: right and wrong answers, reward hacks and attacks, side by side."""
    from proctor.cli.sandbox_demo import DEMO_JOBS

    try:
        with _sandbox(host, runtime, cert_path, insecure_tcp) as sb:
            console.print(f"warming {sb.slots} sandbox container(s)...")
            sb.warmup(["python", "cpp"])
            t0 = time.monotonic()
            results = sb.run_many([job for _, _, job in DEMO_JOBS])
            elapsed = time.monotonic() - t0
    except SandboxError as exc:
        err.print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
        raise typer.Exit(2) from None
    table = Table(title=f"sandbox demo: {len(results)} jobs in {elapsed:.2f} s on {sb.slots} slot(s)")
    for col in ("job", "expected", "status", "wall ms", "cpu ms"):
        table.add_column(col)
    wrong = 0
    for (name, expected, _), r in zip(DEMO_JOBS, results):
        ok = r.status == expected
        wrong += not ok
        style = "green" if ok else "red"
        table.add_row(name, expected, f"[{style}]{r.status}[/{style}]", f"{r.wall_s * 1000:.0f}", f"{r.cpu_s * 1000:.0f}")
    console.print(table)
    if wrong:
        err.print(f"[red]{wrong} job(s) did not get their expected verdict[/red]")
        sys.exit(1)
    console.print("every job got its expected verdict; every attack was contained.")
