"""The arms of bench/sandbox_service.py: one way each of getting a `BenchJob` judged, and the
mapping of each system's answer to a verdict (pass / fail / timeout / infra)."""

from __future__ import annotations

import contextlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Iterator, Optional

import httpx

from service_bench_jobs import COMPILE_TIMEOUT_S, MEMORY_MB, BenchJob, jobs_of_kind, stdout_matches

ARMS = {"sf_run_code": "SandboxFusion /run_code", "px_run_code": "proctor /run_code",
        "px_jobs_batch": "proctor /v1/jobs run_many", "lib_batch": "library run_many",
        "px_jobs_run": "proctor /v1/jobs run (threads)", "lib_run": "library run (threads)"}
WALL_SLACK_S = 5.0          # Proctor's wall limit = run_timeout + this; run_timeout is its CPU limit
HTTP_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Outcome:
    verdict: str             # pass | fail | timeout | infra
    detail: str = ""


@dataclass
class Arm:
    """``run_one`` judges one job (client-thread arms); ``run_batch`` a list (batch arms)."""

    name: str
    batch: bool
    run_one: Callable[[BenchJob], Outcome]
    run_batch: Callable[[list[BenchJob]], list[Outcome]]

    def warm(self) -> None:
        """Untimed: one right job of each language per slot, so no arm pays its start-up in a timed batch."""
        jobs = [j.numbered(f"warm.{i}") for i, j in enumerate(jobs_of_kind("python right")[:4]
                                                               + jobs_of_kind("cpp right")[:2])]
        if self.batch:
            outs = self.run_batch(jobs)
        else:
            with ThreadPoolExecutor(4) as pool:
                outs = list(pool.map(self.run_one, jobs))
        bad = [f"{j.name}: {o.verdict} {o.detail[:200]}" for j, o in zip(jobs, outs) if o.verdict != "pass"]
        if bad:
            raise SystemExit(f"{ARMS[self.name]}: a right job did not pass in the warm-up: {bad[0]}")


# --------------------------------------------------------------------------- /run_code (both servers)


def run_code_payload(job: BenchJob, stdin: Optional[str]) -> dict:
    body = {"code": job.program(), "language": job.language, "run_timeout": job.run_timeout,
            "compile_timeout": COMPILE_TIMEOUT_S, "memory_limit_MB": MEMORY_MB}
    if stdin is not None:
        body["stdin"] = stdin
    return body


def run_code_verdict(resp: dict, expected_stdout: Optional[str]) -> Outcome:
    """A SandboxFusion /run_code response as a verdict, from its standard fields only."""
    status = resp.get("status")
    if status == "SandboxError":
        return Outcome("infra", resp.get("message", "")[:300])
    parts = [p for p in (resp.get("compile_result"), resp.get("run_result")) if p]
    if any(p.get("status") == "TimeLimitExceeded" for p in parts):
        return Outcome("timeout", "TimeLimitExceeded")
    run = resp.get("run_result") or {}
    if status == "Success":
        if expected_stdout is not None and not stdout_matches(run.get("stdout") or "", expected_stdout):
            return Outcome("fail", f"stdout {run.get('stdout', '')[:80]!r}")
        return Outcome("pass")
    if status == "Failed":
        return Outcome("fail", (run.get("stderr") or (resp.get("compile_result") or {}).get("stderr") or "")[-200:])
    return Outcome("infra", f"unknown status {status!r}")


def run_code_arm(name: str, client: httpx.Client, url: str) -> Arm:
    def post(job: BenchJob, stdin: Optional[str], expected: Optional[str]) -> Outcome:
        try:
            r = client.post(f"{url}/run_code", json=run_code_payload(job, stdin))
        except httpx.HTTPError as exc:
            return Outcome("infra", f"{type(exc).__name__}: {exc}")
        if r.status_code != 200:
            return Outcome("infra", f"HTTP {r.status_code}: {r.text[:200]}")
        return run_code_verdict(r.json(), expected)

    def run_one(job: BenchJob) -> Outcome:
        if not job.cases:
            return post(job, None, None)
        out = Outcome("pass")
        for stdin, expected in job.cases:   # one request per case, stopping at the first failure
            out = post(job, stdin, expected)
            if out.verdict != "pass":
                break
        return out

    return Arm(name, False, run_one, lambda jobs: [run_one(j) for j in jobs])


# --------------------------------------------------------------------------- Proctor's Job API


def proctor_job(job: BenchJob):
    from proctor.sandbox import Job, Limits

    limits = Limits(wall_s=job.run_timeout + WALL_SLACK_S, cpu_s=job.run_timeout, memory_mb=MEMORY_MB,
                    compile_s=COMPILE_TIMEOUT_S)
    return Job(language=job.language, code=job.code, tests=job.tests, cases=list(job.cases) or None,
               limits=limits, stop_on_first_failure=bool(job.cases))


def result_verdict(result) -> Outcome:
    """A Proctor `Result` as a verdict: every non-passing program verdict but timeout is a fail."""
    if result.status == "passed":
        return Outcome("pass")
    if result.status == "timeout":
        return Outcome("timeout", "timeout")
    if result.status == "infra_error":
        return Outcome("infra", result.error or "")
    return Outcome("fail", f"{result.status}: {(result.stderr or '')[-160:]}")


def job_api_arms(prefix: str, sandbox) -> tuple[Arm, Arm]:
    """The batch arm (``run_many``) and the client-thread arm (``run``) over one Sandbox-like object."""
    def run_one(job: BenchJob) -> Outcome:
        return result_verdict(sandbox.run(proctor_job(job)))

    def run_batch(jobs: list[BenchJob]) -> list[Outcome]:
        return [result_verdict(r) for r in sandbox.run_many([proctor_job(j) for j in jobs])]

    return Arm(f"{prefix}_batch", True, run_one, run_batch), Arm(f"{prefix}_run", False, run_one, run_batch)


@contextlib.contextmanager
def make_arms(names: list[str], servers, conc: int) -> Iterator[list[Arm]]:
    """The arms named, in ARMS' order, with their clients; closed on exit."""
    with contextlib.ExitStack() as stack:
        made: dict[str, Arm] = {}
        limits = httpx.Limits(max_connections=4 * conc, max_keepalive_connections=4 * conc)
        if "sf_run_code" in names:
            client = stack.enter_context(httpx.Client(timeout=HTTP_TIMEOUT_S, limits=limits))
            made["sf_run_code"] = run_code_arm("sf_run_code", client, servers.sf_url)
        if "px_run_code" in names:
            headers = {"Authorization": f"Bearer {servers.token}"} if servers.token else {}
            client = stack.enter_context(httpx.Client(timeout=HTTP_TIMEOUT_S, limits=limits, headers=headers))
            made["px_run_code"] = run_code_arm("px_run_code", client, servers.service_url)
        if {"px_jobs_batch", "px_jobs_run"} & set(names):
            from proctor.sandbox.remote import RemoteSandbox

            remote = stack.enter_context(RemoteSandbox(servers.service_url, token=servers.token))
            made.update(zip(("px_jobs_batch", "px_jobs_run"), job_api_arms("px_jobs", remote)))
        if {"lib_batch", "lib_run"} & set(names):
            from proctor.sandbox import Sandbox

            sb = stack.enter_context(Sandbox(slots=conc, auto_build=True))
            sb.warmup(["python", "cpp"])
            made.update(zip(("lib_batch", "lib_run"), job_api_arms("lib", sb)))
        yield [made[n] for n in ARMS if n in names]


__all__ = ["ARMS", "Arm", "Outcome", "make_arms", "run_code_verdict", "result_verdict"]
