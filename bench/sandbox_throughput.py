#!/usr/bin/env python3
"""Sandbox throughput benchmark: proctor vs. bare subprocess vs. `docker run` per job.

One HumanEval-sized job (HumanEval/0, ``has_close_elements``: prompt + canonical
solution as the code, its ``check`` function + ``check(has_close_elements)`` as the
tests) is run many times in three modes, each at concurrency 1 and 4:

  proctor     ``Sandbox(slots=c)`` after ``warmup``; ``sb.run(job)`` issued from c
              threads, each call timed on its own (latency = that job's wall time).
              The same batch through ``sb.run_many(jobs)`` is reported on a second row
              (throughput only: run_many does not expose per-job wall times).
  subprocess  unsandboxed ``/usr/bin/python3 -c code+tests`` from c threads; a job
              passes when the exit code is 0. The floor: no isolation at all.
  docker-run  one ``docker run --rm`` per job through the Docker SDK with the same
              python sandbox image, from c threads: what most home-grown RL code does.
  baseline    as proctor, with the proctor of another commit (``--baseline REV``: an
              export of REV run by bench/baseline_worker.py in a process of its own,
              its own images built if missing): rows "baseline" and "baseline
              run_many", and a table of proctor ÷ baseline. How a change to the
              sandbox moves its throughput, measured side by side in one run.
  proctor-runsc  as proctor, with the containers under gVisor (``runtime="runsc"``):
              rows "proctor [runsc]" and "proctor run_many [runsc]". On by default when
              the engine has runsc registered (``PROCTOR_RUNTIME=runsc bash
              scripts/setup.sh``); a runc/runsc table puts the two side by side.

Every mode is measured the same way: jobs/s = counted jobs / summed wall time of
the timed batches; p50/p99 = percentiles of the per-job wall times in ms. A cell's
jobs are split into --rounds batches and, per concurrency, the modes take turns
batch by batch (rotating who goes first), so load from other work on the machine
hits every mode alike. Untimed set-up per cell: container start-up (proctor), a
pre-flight in which each mode must pass the right solution and fail a wrong one
(so the failure counts can be trusted), then --warm warm-up jobs. Failures = every
counted job that did not pass (wrong verdict, timeout, exception). Exit status 1
if any counted job failed.

    .venv/bin/python bench/sandbox_throughput.py                 # ~1 min on 2 cores
    .venv/bin/python bench/sandbox_throughput.py --quick         # ~30 s smoke run
    .venv/bin/python bench/sandbox_throughput.py --json /tmp/bench.json
    .venv/bin/python bench/sandbox_throughput.py --baseline 83fd386 --modes proctor,baseline
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"   # before numpy/torch could read it

import argparse
import datetime as _dt
import json
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Callable, Optional
from machine import cpu_model, memory_gib, usable_cpus  # bench/machine.py: run as `python bench/...`

# --------------------------------------------------------------------------- the job

# HumanEval/0: prompt + canonical solution.
CODE = '''from typing import List


def has_close_elements(numbers: List[float], threshold: float) -> bool:
    """ Check if in given list of numbers, are any two numbers closer to each other than
    given threshold.
    >>> has_close_elements([1.0, 2.0, 3.0], 0.5)
    False
    >>> has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3)
    True
    """
    for idx, elem in enumerate(numbers):
        for idx2, elem2 in enumerate(numbers):
            if idx != idx2:
                distance = abs(elem - elem2)
                if distance < threshold:
                    return True

    return False
'''

# HumanEval/0: test + the call of check on the entry point.
TESTS = '''

METADATA = {
    'author': 'jt',
    'dataset': 'test'
}


def check(candidate):
    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True
    assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.05) == False
    assert candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.95) == True
    assert candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.8) == False
    assert candidate([1.0, 2.0, 3.0, 4.0, 5.0, 2.0], 0.1) == True
    assert candidate([1.1, 2.2, 3.1, 4.1, 5.1], 1.0) == True
    assert candidate([1.1, 2.2, 3.1, 4.1, 5.1], 0.5) == False


check(has_close_elements)
'''

# A wrong answer for the pre-flight check: every mode must report it as not passed.
WRONG_CODE = CODE.replace("return True\n\n    return False", "return False\n\n    return True")
assert WRONG_CODE != CODE

WALL_S = 5.0
MEMORY_MB = 256
HOST_TIMEOUT_S = 15.0      # subprocess.run timeout: the wall limit plus generous slack


def host_python() -> str:
    # /usr/bin/python3 avoids pyenv shims (~260 ms per start); fall back to ourselves.
    return "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable


def source(code: str, i: int) -> str:
    # The job index in a comment keeps every job distinct without changing its work.
    return f"# job {i}\n{code}\n{TESTS}"


# --------------------------------------------------------------------------- measuring


@dataclass
class Chunk:
    """Raw numbers of one timed batch of jobs."""

    jobs: int
    elapsed_s: float
    latencies_ms: list[float]
    failures: list[str]             # one detail string per job that did not pass


@dataclass
class Cell:
    mode: str
    concurrency: int
    jobs: int
    elapsed_s: float
    jobs_per_s: float
    p50_ms: Optional[float]
    p99_ms: Optional[float]
    mean_ms: Optional[float]
    max_ms: Optional[float]
    failures: int
    failure_examples: list[str] = field(default_factory=list)
    rounds: int = 0
    loadavg_1m: list[float] = field(default_factory=list)   # before each round: other work on the machine
    latencies_ms: list[float] = field(default_factory=list)


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    s = sorted(values)
    if len(s) == 1:
        return s[0]
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def make_cell(mode: str, conc: int, chunks: list[Chunk], loads: list[float]) -> Cell:
    jobs = sum(c.jobs for c in chunks)
    elapsed = sum(c.elapsed_s for c in chunks)
    ms = [x for c in chunks for x in c.latencies_ms]
    bad = [d for c in chunks for d in c.failures]
    return Cell(mode=mode, concurrency=conc, jobs=jobs, elapsed_s=round(elapsed, 4),
                jobs_per_s=jobs / elapsed if elapsed > 0 else 0.0,
                p50_ms=percentile(ms, 50) if ms else None, p99_ms=percentile(ms, 99) if ms else None,
                mean_ms=sum(ms) / len(ms) if ms else None, max_ms=max(ms) if ms else None,
                failures=len(bad), failure_examples=sorted(set(bad))[:3], rounds=len(chunks),
                loadavg_1m=loads, latencies_ms=[round(x, 3) for x in ms])


Runner = Callable[[int], tuple[bool, str]]   # job index -> (passed, detail when not passed)


def timed_threads(mode: str, conc: int, n: int, run_one: Runner, start_index: int = 0) -> Chunk:
    """Run jobs start_index..start_index+n-1 from `conc` threads, each call timed on its own."""
    if n < 1:
        return Chunk(0, 0.0, [], [])
    lat: list[float] = [0.0] * n
    ok: list[bool] = [False] * n
    details: list[str] = [""] * n

    def one(k: int) -> None:
        t = time.perf_counter()
        try:
            passed, detail = run_one(start_index + k)
        except Exception as exc:  # noqa: BLE001 - anything is a failure, counted honestly
            passed, detail = False, f"{type(exc).__name__}: {exc}"
        lat[k] = (time.perf_counter() - t) * 1000.0
        ok[k], details[k] = passed, detail

    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=conc, thread_name_prefix=f"bench-{mode}") as ex:
        for f in [ex.submit(one, k) for k in range(n)]:
            f.result()
    elapsed = time.perf_counter() - t0
    return Chunk(n, elapsed, lat, [d for d, o in zip(details, ok) if not o])


def preflight(mode: str, run_code: Callable[[str, int], tuple[bool, str]]) -> None:
    """The right solution must pass and a wrong one must fail, or the counts mean nothing."""
    good, detail = run_code(CODE, -1)
    if not good:
        sys.exit(f"{mode}: the canonical solution did not pass in the pre-flight check: {detail}")
    bad, _ = run_code(WRONG_CODE, -2)
    if bad:
        sys.exit(f"{mode}: a wrong solution PASSED in the pre-flight check; failures would not be counted")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- modes
#
# Each mode: setup (untimed: start, pre-flight, warm-up jobs), then `chunk(n, start)`
# called once per round, then close(). chunk returns {row name: Chunk}.


class ProctorMode:
    def __init__(self, conc: int, warm: int, runtime: Optional[str] = None) -> None:
        from proctor.sandbox import Job, Limits, Sandbox

        self.conc, self.Job = conc, Job
        self.name = "proctor" if runtime is None else f"proctor-{runtime}"
        self.suffix = "" if runtime is None else f" [{runtime}]"
        self.limits = Limits(wall_s=WALL_S, memory_mb=MEMORY_MB)
        self.sb = Sandbox(slots=conc, auto_build=True, runtime=runtime)
        try:
            t = time.perf_counter()
            # A container serves jobs of one memory/pids/disk budget: warm the benchmark's.
            self.sb.warmup(["python"], limits=self.limits)
            log(f"proctor c={conc}: warmup() took {time.perf_counter() - t:.2f} s")
            preflight("proctor", self.run_code)
            timed_threads("proctor", conc, warm, lambda i: self.run_code(CODE, i), start_index=-1000)
        except BaseException:
            self.sb.close()
            raise

    def job(self, code: str, i: int):
        # Job.tests is appended to Job.code by the sandbox; the comment keeps jobs distinct.
        return self.Job(language="python", code=f"# job {i}\n{code}", tests=TESTS, limits=self.limits)

    def run_code(self, code: str, i: int) -> tuple[bool, str]:
        r = self.sb.run(self.job(code, i))
        return r.passed, f"{r.status}: {(r.error or r.stderr)[-300:]}"

    def chunk(self, n: int, start: int) -> dict[str, Chunk]:
        threads = timed_threads("proctor", self.conc, n, lambda i: self.run_code(CODE, i), start)
        batch = [self.job(CODE, start + n + i) for i in range(n)]
        t0 = time.perf_counter()
        results = self.sb.run_many(batch)
        elapsed = time.perf_counter() - t0
        bad = [f"{r.status}: {(r.error or r.stderr)[-300:]}" for r in results if not r.passed]
        bad += ["missing result"] * (n - len(results))
        return {"proctor" + self.suffix: threads, "proctor run_many" + self.suffix: Chunk(n, elapsed, [], bad)}

    def close(self) -> None:
        log(f"{self.name} c={self.conc}: containers {self.sb.stats()}")
        self.sb.close()


class BaselineMode:
    """ProctorMode over another commit's proctor, in a worker process (bench/baseline_worker.py)."""

    name = "baseline"

    def __init__(self, conc: int, warm: int, checkout: str, label: str) -> None:
        self.label = label
        worker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "baseline_worker.py")
        self.proc = subprocess.Popen([sys.executable, worker, checkout, str(conc), str(warm)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if not json.loads(self._line()).get("ready"):
            sys.exit("baseline worker did not start")

    def _line(self) -> str:
        line = self.proc.stdout.readline()   # type: ignore[union-attr]
        if not line:
            sys.exit(f"baseline worker ended (exit {self.proc.wait()}); see its messages above")
        return line

    def chunk(self, n: int, start: int) -> dict[str, Chunk]:
        self.proc.stdin.write(json.dumps({"n": n, "start": start}) + "\n")   # type: ignore[union-attr]
        self.proc.stdin.flush()   # type: ignore[union-attr]
        rows = json.loads(self._line())["rows"]
        return {row.replace("proctor", "baseline", 1): Chunk(**chunk) for row, chunk in rows.items()}

    def close(self) -> None:
        try:
            self.proc.stdin.write(json.dumps({"close": True}) + "\n")   # type: ignore[union-attr]
            self.proc.stdin.close()   # type: ignore[union-attr]
        except OSError:
            pass
        self.proc.wait(timeout=120)


def export_checkout(rev: str) -> str:
    """An export of commit ``rev`` of this repository (git archive), made once per commit."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    sha = subprocess.run(["git", "-C", repo, "rev-parse", "--verify", f"{rev}^{{commit}}"], capture_output=True,
                         text=True)
    if sha.returncode != 0:
        sys.exit(f"--baseline {rev}: not a commit of {repo}: {sha.stderr.strip()}")
    target = os.path.join(tempfile.gettempdir(), f"proctor-baseline-{sha.stdout.strip()[:12]}")
    if not os.path.exists(os.path.join(target, "pyproject.toml")):
        os.makedirs(target, exist_ok=True)
        archive = subprocess.run(["git", "-C", repo, "archive", sha.stdout.strip()], capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", target], input=archive.stdout, check=True)
    return target


class SubprocessMode:
    name = "subprocess"

    def __init__(self, conc: int, warm: int) -> None:
        self.conc, self.py = conc, host_python()
        self.env = dict(os.environ, OMP_NUM_THREADS="1")
        preflight("subprocess", self.run_code)
        timed_threads("subprocess", conc, warm, lambda i: self.run_code(CODE, i), start_index=-1000)

    def run_code(self, code: str, i: int) -> tuple[bool, str]:
        p = subprocess.run([self.py, "-c", source(code, i)], timeout=HOST_TIMEOUT_S,
                           capture_output=True, env=self.env)
        return p.returncode == 0, f"exit {p.returncode}: {p.stderr.decode(errors='replace')[-300:]}"

    def chunk(self, n: int, start: int) -> dict[str, Chunk]:
        return {"subprocess": timed_threads("subprocess", self.conc, n, lambda i: self.run_code(CODE, i), start)}

    def close(self) -> None:
        pass


class DockerRunMode:
    name = "docker-run"

    def __init__(self, conc: int, warm: int, image: str) -> None:
        import docker

        self.docker, self.conc, self.image = docker, conc, image
        self.client = docker.from_env(max_pool_size=max(10, 2 * conc))
        try:
            preflight("docker-run", self.run_code)
            timed_threads("docker-run", conc, warm, lambda i: self.run_code(CODE, i), start_index=-1000)
        except BaseException:
            self.client.close()
            raise

    def run_code(self, code: str, i: int) -> tuple[bool, str]:
        # `docker run --rm` per job: create, start, wait, logs, remove.
        try:
            self.client.containers.run(self.image, ["python3", "-c", source(code, i)], entrypoint=[],
                                       remove=True, network_disabled=True, user="1000:1000",
                                       mem_limit=f"{MEMORY_MB}m", environment={"OMP_NUM_THREADS": "1"})
        except self.docker.errors.ContainerError as exc:
            return False, f"exit {exc.exit_status}: {str(exc.stderr or b'')[-300:]}"
        return True, ""

    def chunk(self, n: int, start: int) -> dict[str, Chunk]:
        return {"docker-run": timed_threads("docker-run", self.conc, n, lambda i: self.run_code(CODE, i), start)}

    def close(self) -> None:
        self.client.close()


def python_image() -> str:
    """The python sandbox image, built if the current inputs have no tag yet."""
    import docker

    from proctor.sandbox import images

    client = docker.from_env()
    try:
        try:
            return images.require_image(client, "python")
        except Exception:  # noqa: BLE001 - not built yet: build it, as Sandbox(auto_build=True) would
            log("python sandbox image missing; building it")
            images.build_images(client, ["python"], progress=lambda line: None)
            return images.require_image(client, "python")
    finally:
        client.close()


def split(n: int, rounds: int) -> list[int]:
    """n jobs over `rounds` rounds, as evenly as possible (no empty rounds)."""
    rounds = max(1, min(rounds, n))
    return [n // rounds + (1 if r < n % rounds else 0) for r in range(rounds)]


def bench_concurrency(conc: int, modes: list[str], args: argparse.Namespace, image: str) -> list[Cell]:
    """All modes at one concurrency, interleaved in rounds so background load hits them alike."""
    runners: dict[str, object] = {}
    try:
        for m in modes:
            if m == "proctor":
                runners[m] = ProctorMode(conc, args.warm)
            elif m == "proctor-runsc":
                runners[m] = ProctorMode(conc, args.warm, runtime="runsc")
            elif m == "baseline":
                runners[m] = BaselineMode(conc, args.warm, args.baseline_checkout, args.baseline)
            elif m == "subprocess":
                runners[m] = SubprocessMode(conc, args.warm)
            else:
                runners[m] = DockerRunMode(conc, args.warm, image)
        plan = {m: split(args.docker_jobs if m == "docker-run" else args.jobs, args.rounds) for m in modes}
        chunks: dict[str, list[Chunk]] = {}
        loads: dict[str, list[float]] = {}
        started = {m: 0 for m in modes}
        for r in range(max(len(p) for p in plan.values())):
            order = modes[r % len(modes):] + modes[:r % len(modes)]   # rotate who goes first
            for m in order:
                if r >= len(plan[m]):
                    continue
                load = round(os.getloadavg()[0], 2)
                for row, ch in runners[m].chunk(plan[m][r], started[m]).items():  # type: ignore[attr-defined]
                    chunks.setdefault(row, []).append(ch)
                    loads.setdefault(row, []).append(load)
                started[m] += 2 * plan[m][r]
            log(f"c={conc} round {r + 1}: " + ", ".join(
                f"{row} {ch[-1].jobs / ch[-1].elapsed_s:.1f}/s" for row, ch in chunks.items() if ch))
    finally:
        for runner in runners.values():
            runner.close()  # type: ignore[attr-defined]
    return [make_cell(row, conc, ch, loads[row]) for row, ch in chunks.items()]


# --------------------------------------------------------------------------- reporting


def machine_info() -> dict:
    info: dict = {
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "hostname": platform.node(),
        "nproc": usable_cpus(),
        "cpu_count": os.cpu_count(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        "kernel": platform.release(),
        "bench_python": sys.version.split()[0],
        "host_python": host_python(),
    }
    info["cpu_model"] = cpu_model()
    info["mem_gib"] = round(memory_gib(), 1)
    try:
        info["host_python_version"] = subprocess.run(
            [host_python(), "-c", "import platform; print(platform.python_version())"],
            capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        import docker
        c = docker.from_env()
        v = c.version()
        info["docker"] = f"{v.get('Version')} ({c.info().get('DefaultRuntime')}, {c.info().get('Driver')})"
        c.close()
    except Exception:  # noqa: BLE001
        info["docker"] = "unavailable"
    if shutil.which("runsc"):
        out = subprocess.run(["runsc", "--version"], capture_output=True, text=True, timeout=10).stdout
        info["runsc"] = out.splitlines()[0] if out else "?"
    return info


def fmt(x: Optional[float], digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def ratios(cells: list[Cell], concs: list[int]) -> list[dict]:
    by = {(c.mode, c.concurrency): c for c in cells}
    out = []
    for conc in concs:
        p = by.get(("proctor", conc))
        row: dict = {"concurrency": conc}
        for other in ("subprocess", "docker-run"):
            o = by.get((other, conc))
            row[f"proctor_over_{other}"] = (p.jobs_per_s / o.jobs_per_s) if p and o else None
        pm = by.get(("proctor run_many", conc))
        for other in ("subprocess", "docker-run"):
            o = by.get((other, conc))
            row[f"run_many_over_{other}"] = (pm.jobs_per_s / o.jobs_per_s) if pm and o else None
        for row_name, key in (("proctor", "runsc_over_runc"), ("proctor run_many", "run_many_runsc_over_runc")):
            runc, runsc = by.get((row_name, conc)), by.get((f"{row_name} [runsc]", conc))
            row[key] = (runsc.jobs_per_s / runc.jobs_per_s) if runc and runsc else None
        for row_name, key in (("proctor", "proctor_over_baseline"), ("proctor run_many", "run_many_over_baseline")):
            mine, base = by.get((row_name, conc)), by.get((row_name.replace("proctor", "baseline", 1), conc))
            row[key] = (mine.jobs_per_s / base.jobs_per_s) if mine and base else None
        out.append(row)
    return out


def print_runtimes(cells: list[Cell], ratio_rows: list[dict]) -> None:
    """runc and runsc side by side: the price of gVisor's kernel per job."""
    by = {(c.mode, c.concurrency): c for c in cells}
    rows = [r for r in ratio_rows if r.get("runsc_over_runc") is not None]
    if not rows:
        return
    print("\nproctor under runc vs runsc (gVisor)")
    print(f"{'conc':>4} | {'runc jobs/s':>11} {'p50 ms':>7} {'p99 ms':>7} | {'runsc jobs/s':>12} {'p50 ms':>7} "
          f"{'p99 ms':>7} | {'runsc/runc':>10} | {'run_many runc':>13} {'runsc':>6} {'ratio':>6}")
    for r in rows:
        conc = r["concurrency"]
        a, b = by[("proctor", conc)], by[("proctor [runsc]", conc)]
        ma, mb = by.get(("proctor run_many", conc)), by.get(("proctor run_many [runsc]", conc))
        print(f"{conc:>4} | {a.jobs_per_s:>11.1f} {fmt(a.p50_ms):>7} {fmt(a.p99_ms):>7} | {b.jobs_per_s:>12.1f} "
              f"{fmt(b.p50_ms):>7} {fmt(b.p99_ms):>7} | {r['runsc_over_runc']:>10.2f} | "
              f"{fmt(ma.jobs_per_s if ma else None):>13} {fmt(mb.jobs_per_s if mb else None):>6} "
              f"{fmt(r['run_many_runsc_over_runc'], 2):>6}")


def print_baseline(cells: list[Cell], ratio_rows: list[dict], label: str) -> None:
    """The working tree's proctor against another commit's, side by side."""
    by = {(c.mode, c.concurrency): c for c in cells}
    rows = [r for r in ratio_rows if r.get("proctor_over_baseline") is not None]
    if not rows:
        return
    print(f"\nproctor (working tree) vs baseline ({label}), same job, same machine, interleaved rounds")
    print(f"{'conc':>4} | {'proctor jobs/s':>14} {'p50 ms':>7} | {'baseline jobs/s':>15} {'p50 ms':>7} | "
          f"{'ratio':>6} | {'run_many':>8} {'baseline':>8} {'ratio':>6}")
    for r in rows:
        conc = r["concurrency"]
        a, b = by[("proctor", conc)], by[("baseline", conc)]
        ma, mb = by.get(("proctor run_many", conc)), by.get(("baseline run_many", conc))
        print(f"{conc:>4} | {a.jobs_per_s:>14.1f} {fmt(a.p50_ms):>7} | {b.jobs_per_s:>15.1f} {fmt(b.p50_ms):>7} | "
              f"{r['proctor_over_baseline']:>6.2f} | {fmt(ma.jobs_per_s if ma else None):>8} "
              f"{fmt(mb.jobs_per_s if mb else None):>8} {fmt(r.get('run_many_over_baseline'), 2):>6}")


def print_report(info: dict, cells: list[Cell], ratio_rows: list[dict], args: argparse.Namespace) -> None:
    header = (f"machine: {info['hostname']}  nproc={info['nproc']}  cpu={info.get('cpu_model', '?')}  "
              f"mem={info.get('mem_gib', '?')} GiB  kernel={info['kernel']}\n"
              f"docker {info.get('docker')}  {info.get('runsc', 'no runsc')}  host python {info.get('host_python')} "
              f"{info.get('host_python_version', '')}\n"
              f"date {info['date']}  load average at start {info['loadavg_start']}  "
              f"at end {info['loadavg_end']}\n"
              f"job: HumanEval/0 has_close_elements (canonical solution + check), "
              f"limits wall {WALL_S:g} s / {MEMORY_MB} MiB, OMP_NUM_THREADS=1, "
              f"warm-up {args.warm} jobs per cell not counted, {args.rounds} interleaved rounds")
    try:
        from rich.console import Console
        from rich.markup import escape   # "proctor [runsc]" is not markup
        from rich.table import Table
    except ImportError:
        Console = None  # type: ignore[assignment]

    if Console is not None:
        console = Console(width=max(110, shutil.get_terminal_size((110, 24)).columns))
        console.print(header, highlight=False)
        t = Table(title="sandbox throughput")
        for col in ("mode", "concurrency", "jobs", "jobs/s", "p50 ms", "p99 ms", "failures"):
            t.add_column(col, justify="left" if col == "mode" else "right")
        for c in cells:
            t.add_row(escape(c.mode), str(c.concurrency), str(c.jobs), fmt(c.jobs_per_s), fmt(c.p50_ms),
                      fmt(c.p99_ms), str(c.failures))
        console.print(t)
        r = Table(title="throughput ratios (jobs/s)")
        for col in ("concurrency", "proctor ÷ subprocess", "proctor ÷ docker-run",
                    "run_many ÷ subprocess", "run_many ÷ docker-run"):
            r.add_column(col, justify="right")
        for row in ratio_rows:
            r.add_row(str(row["concurrency"]), fmt(row["proctor_over_subprocess"], 2),
                      fmt(row["proctor_over_docker-run"], 2), fmt(row["run_many_over_subprocess"], 2),
                      fmt(row["run_many_over_docker-run"], 2))
        console.print(r)
    else:
        print(header)
        print(f"{'mode':<18}{'concurrency':>12}{'jobs':>6}{'jobs/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'failures':>10}")
        for c in cells:
            print(f"{c.mode:<18}{c.concurrency:>12}{c.jobs:>6}{fmt(c.jobs_per_s):>9}{fmt(c.p50_ms):>9}"
                  f"{fmt(c.p99_ms):>9}{c.failures:>10}")
        for row in ratio_rows:
            print(f"c={row['concurrency']}: proctor/subprocess {fmt(row['proctor_over_subprocess'], 2)}  "
                  f"proctor/docker-run {fmt(row['proctor_over_docker-run'], 2)}  "
                  f"run_many/subprocess {fmt(row['run_many_over_subprocess'], 2)}  "
                  f"run_many/docker-run {fmt(row['run_many_over_docker-run'], 2)}")
    for c in cells:
        for ex in c.failure_examples:
            print(f"  failure in {c.mode} c={c.concurrency}: {ex}")


# --------------------------------------------------------------------------- main

MODES = ("proctor", "proctor-runsc", "baseline", "subprocess", "docker-run")
ROWS = ("proctor", "proctor run_many", "baseline", "baseline run_many", "proctor [runsc]", "proctor run_many [runsc]",
        "subprocess", "docker-run")


def runsc_problem() -> Optional[str]:
    """Why the engine cannot run sandboxes under runsc, or None."""
    from proctor.sandbox import SandboxError
    from proctor.sandbox.engine import check_runtime, connect

    try:
        client = connect()
        try:
            return None if check_runtime(client, "runsc", client.api.base_url) else "runsc is not gVisor here"
        finally:
            client.close()
    except SandboxError as exc:
        return str(exc)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=None, help="counted jobs per proctor/subprocess cell (500)")
    ap.add_argument("--docker-jobs", type=int, default=None, help="counted jobs per docker-run cell (60)")
    ap.add_argument("--conc", default="1,4", help="comma-separated concurrencies (1,4)")
    ap.add_argument("--warm", type=int, default=None, help="uncounted warm-up jobs per cell (4)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="split each cell into this many chunks, modes interleaved round by round (5)")
    ap.add_argument("--modes", default=None,
                    help=f"comma-separated subset of {','.join(MODES)} (default: all; proctor-runsc only "
                         "when the engine has runsc)")
    ap.add_argument("--json", metavar="PATH", help="write every number (incl. per-job latencies) here")
    ap.add_argument("--quick", action="store_true", help="smoke run: 30 / 8 jobs per cell, 2 warm-up")
    ap.add_argument("--baseline", metavar="REV", default=None,
                    help="also measure the proctor of commit REV (mode 'baseline'), side by side")
    args = ap.parse_args(argv)

    args.jobs = args.jobs if args.jobs is not None else (30 if args.quick else 500)
    args.docker_jobs = args.docker_jobs if args.docker_jobs is not None else (8 if args.quick else 60)
    args.warm = args.warm if args.warm is not None else (2 if args.quick else 4)
    args.rounds = args.rounds if args.rounds is not None else (2 if args.quick else 5)
    concs = [int(x) for x in args.conc.split(",") if x.strip()]
    if args.modes is None:
        problem = runsc_problem()
        if problem is not None:
            log(f"not measuring proctor under runsc: {problem}")
        modes = [m for m in MODES if (m != "proctor-runsc" or problem is None) and (m != "baseline" or args.baseline)]
    else:
        modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if "baseline" in modes:
        if not args.baseline:
            ap.error("mode baseline needs --baseline REV")
        args.baseline_checkout = export_checkout(args.baseline)
        log(f"baseline: commit {args.baseline} exported to {args.baseline_checkout}")
    for m in modes:
        if m not in MODES:
            ap.error(f"unknown mode {m!r}; choose from {', '.join(MODES)}")
    if not concs or min(concs) < 1 or args.jobs < 1 or args.docker_jobs < 1 or args.warm < 0 or args.rounds < 1:
        ap.error("--conc, --jobs, --docker-jobs and --rounds must be positive, --warm not negative")

    info = machine_info()
    log(f"nproc={info['nproc']} load average {info['loadavg_start']}; modes {modes} at concurrency {concs}; "
        f"{args.jobs} jobs per cell ({args.docker_jobs} for docker-run), {args.warm} warm-up")
    image = python_image() if "docker-run" in modes or "proctor" in modes else ""
    if image:
        log(f"python sandbox image {image}")

    cells: list[Cell] = []
    t_all = time.perf_counter()
    for conc in concs:
        t = time.perf_counter()
        new = bench_concurrency(conc, modes, args, image)
        for c in new:
            log(f"{c.mode:<17} c={c.concurrency}: {c.jobs} jobs in {c.elapsed_s:.2f} s = "
                f"{c.jobs_per_s:.1f} jobs/s, p50 {fmt(c.p50_ms)} ms, p99 {fmt(c.p99_ms)} ms, "
                f"{c.failures} failures, load {c.loadavg_1m}")
        log(f"concurrency {conc} took {time.perf_counter() - t:.1f} s")
        cells.extend(new)
    info["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    info["total_s"] = round(time.perf_counter() - t_all, 1)
    info["image"] = image

    order = {m: i for i, m in enumerate(ROWS)}
    cells.sort(key=lambda c: (c.concurrency, order[c.mode]))
    ratio_rows = ratios(cells, concs)
    print_report(info, cells, ratio_rows, args)
    print_runtimes(cells, ratio_rows)
    print_baseline(cells, ratio_rows, args.baseline or "")

    if args.json:
        payload = {"machine": info, "job": {"code": CODE, "tests": TESTS, "wall_s": WALL_S, "memory_mb": MEMORY_MB},
                   "args": vars(args), "cells": [asdict(c) for c in cells], "ratios": ratio_rows}
        with open(args.json, "w") as fh:
            json.dump(payload, fh, indent=1)
        log(f"wrote {args.json}")
    return 1 if any(c.failures for c in cells) else 0


if __name__ == "__main__":
    sys.exit(main())
