#!/usr/bin/env python3
"""Sandbox services side by side: SandboxFusion's /run_code, Proctor's service (/run_code and
/v1/jobs) and the in-process library, on the same jobs at the same concurrency, in one run.

Arms (``--arms``, default all):

  sf_run_code       SandboxFusion's own server (bench/sandboxfusion_setup.sh; started here on a
                    loopback port unless ``--sf-url``): ``POST /run_code`` from C client threads
  px_run_code       ``proctor sandbox serve`` (started here unless ``--service-url``), its
                    SandboxFusion-compatible ``POST /run_code``: the same client code and payloads
  px_jobs_batch     its native ``POST /v1/jobs`` through ``RemoteSandbox.run_many`` (one batch)
  lib_batch         ``Sandbox(slots=C).run_many`` in this process
  px_jobs_run       ``RemoteSandbox.run`` from C threads (per-job latency of the native API)
  lib_run           ``Sandbox.run`` from C threads (per-job latency of the library)

Jobs (bench/service_bench_jobs.py): HumanEval Python problems right (canonical solution), wrong
(``return None``) and never ending (a busy loop, run_timeout 1 s); 20 C++ stdin/stdout programs
(3 cases each) right, with a one-line bug, and spinning after reading their input. A /run_code
program is prompt + solution + test + ``check(entry_point)`` in one file, as verl sends it; a
C++ job is one /run_code request per case, in turn, stopping at the first case that fails (a
binary reward), so each request compiles again; the Proctor APIs get ``Job(code, tests)`` or
``Job(code, cases, stop_on_first_failure=True)``, compiled once. Limits: run_timeout (10 s, or
1 s for the never-ending jobs) is SandboxFusion's wall limit and Proctor's CPU limit (wall
limit: run_timeout + 5 s); compile_timeout 10 s; memory 1024 MB (verl's default).

Method: ``--rounds`` rounds; in each, for each kind of job, every arm runs its own batch of that
kind (distinct jobs: a comment names arm, round and index, so no verdict cache answers), the arms
taking turns in an order rotated each round, so load from other work hits all arms alike.
jobs/s = jobs / summed wall time of the arm's batches; p50/p99 = per-job latency (client threads:
request sent to verdict; a C++ job's latency is all its requests); batch arms have no per-job
latency. Verdicts are mapped to pass / fail / timeout / infra and compared with each job's
expected verdict: agreement is the share equal to it. ``--mixed``: instead, each round every
arm gets one batch of every kind, shuffled the same way for every arm, as a trainer sends a
step's rewards; then only the whole batch has a jobs/s (per kind: p50/p99 and verdicts).

    .venv/bin/python bench/sandbox_service.py --quick            # a check, ~1 min
    .venv/bin/python bench/sandbox_service.py                    # the default size, <= 10 min on 2 cores
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"

import argparse
import datetime as _dt
import json
import random
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Optional

from machine import cpu_model, memory_gib, usable_cpus   # bench/: run as `python bench/...`
from service_arms import ARMS, Arm, Outcome, make_arms
from service_bench_jobs import KINDS, BenchJob, jobs_of_kind
from service_servers import Servers

REPO = Path(__file__).resolve().parent.parent
SUMMARY = Path(__file__).resolve().parent / "sandbox_service_summary.json"
DEFAULT_COUNTS = {"python right": 60, "python wrong": 14, "python timeout": 2,
                  "cpp right": 6, "cpp wrong": 2, "cpp timeout": 1}
QUICK_COUNTS = {"python right": 8, "python wrong": 3, "python timeout": 1,
                "cpp right": 2, "cpp wrong": 1, "cpp timeout": 1}


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- measuring


@dataclass
class Tally:
    """One arm's numbers for one kind of job (or all kinds), summed over rounds."""

    jobs: int = 0
    elapsed_s: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)
    verdicts: dict[str, int] = field(default_factory=dict)
    agree: int = 0
    mismatches: list[str] = field(default_factory=list)

    def add(self, jobs: list[BenchJob], outcomes: list[Outcome], elapsed: float, lat: list[float]) -> None:
        self.jobs += len(jobs)
        self.elapsed_s += elapsed
        self.latencies_ms += lat
        for job, out in zip(jobs, outcomes):
            self.verdicts[out.verdict] = self.verdicts.get(out.verdict, 0) + 1
            if out.verdict == job.expected:
                self.agree += 1
            elif len(self.mismatches) < 5:
                self.mismatches.append(f"{job.kind} {job.name}: expected {job.expected}, got {out.verdict}"
                                       f" ({out.detail[:160]})")

    def summary(self) -> dict:
        ms = self.latencies_ms
        return {"jobs": self.jobs, "elapsed_s": round(self.elapsed_s, 3),
                "jobs_per_s": round(self.jobs / self.elapsed_s, 2) if self.elapsed_s else None,
                "p50_ms": round(percentile(ms, 50), 1) if ms else None,
                "p99_ms": round(percentile(ms, 99), 1) if ms else None,
                "agreement": round(self.agree / self.jobs, 4) if self.jobs else None,
                "verdicts": dict(sorted(self.verdicts.items())), "mismatches": self.mismatches}


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default)."""
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo, hi = int(pos), min(int(pos) + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def run_threads(arm: Arm, jobs: list[BenchJob], conc: int) -> tuple[list[Outcome], float, list[float]]:
    """Each job from one of ``conc`` client threads, timed on its own."""
    def one(job: BenchJob) -> tuple[Outcome, float]:
        t = time.perf_counter()
        try:
            out = arm.run_one(job)
        except Exception as exc:  # noqa: BLE001 - a client-side failure is counted, never hidden
            out = Outcome("infra", f"{type(exc).__name__}: {exc}")
        return out, (time.perf_counter() - t) * 1000.0

    t0 = time.perf_counter()
    with ThreadPoolExecutor(conc) as pool:
        pairs = list(pool.map(one, jobs))
    elapsed = time.perf_counter() - t0
    return [p[0] for p in pairs], elapsed, [p[1] for p in pairs]


def run_batch(arm: Arm, jobs: list[BenchJob]) -> tuple[list[Outcome], float, list[float]]:
    t0 = time.perf_counter()
    try:
        outs = arm.run_batch(jobs)
    except Exception as exc:  # noqa: BLE001 - the whole batch is lost: every job counts as infra
        outs = [Outcome("infra", f"{type(exc).__name__}: {exc}")] * len(jobs)
    return outs, time.perf_counter() - t0, []


def batch_of(kind: str, count: int, rnd: int, arm_index: int) -> list[BenchJob]:
    """Round ``rnd``'s ``count`` jobs of ``kind``, cycling through the kind's problems."""
    pool = jobs_of_kind(kind)
    start = rnd * count
    return [pool[(start + i) % len(pool)].numbered(f"a{arm_index}.r{rnd}.{i}") for i in range(count)]


def run_arm(arm: Arm, jobs: list[BenchJob], conc: int) -> tuple[list[Outcome], float, list[float]]:
    return run_batch(arm, jobs) if arm.batch else run_threads(arm, jobs, conc)


def rounds_in_turn(arms: list[Arm], rounds: int, loads: list[float], what: str) -> Iterator[tuple[int, list[Arm]]]:
    """(round, the arms in this round's order): the order rotated each round, the load logged in ``loads``."""
    for rnd in range(rounds):
        loads.append(round(os.getloadavg()[0], 2))
        order = arms[rnd % len(arms):] + arms[:rnd % len(arms)]
        log(f"round {rnd + 1}/{rounds} (load {loads[-1]}), {what}: {', '.join(a.name for a in order)}")
        yield rnd, order


def measure(arms: list[Arm], counts: dict[str, int], rounds: int, conc: int) -> tuple[dict, list[float]]:
    tallies = {a.name: {k: Tally() for k in KINDS} for a in arms}
    loads: list[float] = []
    for rnd, order in rounds_in_turn(arms, rounds, loads, "arms in turn"):
        for kind in KINDS:
            if not counts.get(kind):
                continue
            for arm in order:
                jobs = batch_of(kind, counts[kind], rnd, arms.index(arm))
                outs, elapsed, lat = run_arm(arm, jobs, conc)
                tallies[arm.name][kind].add(jobs, outs, elapsed, lat)
    return tallies, loads


def measure_mixed(arms: list[Arm], counts: dict[str, int], rounds: int, conc: int
                  ) -> tuple[dict, list[float], dict[str, float]]:
    """``--mixed``: each round, every arm gets the round's jobs of all kinds as one batch, shuffled
    (the same order for every arm), as a trainer sends a step's rewards. Per-kind tallies keep
    verdicts and latencies; only the whole batch has a wall time (returned per arm)."""
    tallies = {a.name: {k: Tally() for k in KINDS} for a in arms}
    elapsed = {a.name: 0.0 for a in arms}
    loads: list[float] = []
    for rnd, order in rounds_in_turn(arms, rounds, loads, "one mixed batch per arm"):
        for arm in order:
            jobs = [j for kind in KINDS if counts.get(kind) for j in batch_of(kind, counts[kind], rnd, arms.index(arm))]
            random.Random(rnd).shuffle(jobs)
            outs, took, lat = run_arm(arm, jobs, conc)
            elapsed[arm.name] += took
            for kind in KINDS:
                idx = [i for i, j in enumerate(jobs) if j.kind == kind]
                tallies[arm.name][kind].add([jobs[i] for i in idx], [outs[i] for i in idx], 0.0,
                                            [lat[i] for i in idx] if lat else [])
    return tallies, loads, elapsed


# --------------------------------------------------------------------------- reporting


def overall(per_kind: dict[str, Tally]) -> Tally:
    t = Tally()
    for k in per_kind.values():
        t.jobs += k.jobs
        t.elapsed_s += k.elapsed_s
        t.latencies_ms += k.latencies_ms
        t.agree += k.agree
        for v, n in k.verdicts.items():
            t.verdicts[v] = t.verdicts.get(v, 0) + n
        t.mismatches += k.mismatches[: max(0, 5 - len(t.mismatches))]
    return t


def fmt(x: Optional[float], spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def print_tables(result: dict) -> None:
    arms = result["arms"]
    print("\n| arm | jobs | jobs/s | p50 ms | p99 ms | verdict agreement | infra |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, s in arms.items():
        o = s["all"]
        print(f"| {ARMS[name]} | {o['jobs']} | {fmt(o['jobs_per_s'])} | {fmt(o['p50_ms'])} | {fmt(o['p99_ms'])} "
              f"| {100 * o['agreement']:.1f}% | {o['verdicts'].get('infra', 0)} |")
    kinds = [k for k in KINDS if any(s[k]["jobs"] for s in arms.values())]
    print("\njobs/s by kind (p50 ms)\n")
    print("| arm | " + " | ".join(kinds) + " |")
    print("| --- |" + " --- |" * len(kinds))
    for name, s in arms.items():
        cells = [f"{fmt(s[k]['jobs_per_s'])} ({fmt(s[k]['p50_ms'], '.0f')})" for k in kinds]
        print(f"| {ARMS[name]} | " + " | ".join(cells) + " |")
    if result["ratios"]:
        print("\n| ratio | all | " + " | ".join(kinds) + " |")
        print("| --- | --- |" + " --- |" * len(kinds))
        for label, r in result["ratios"].items():
            cells = [fmt(r[k], ".2f") + ("x" if r[k] is not None else "") for k in ("all", *kinds)]
            print(f"| {label} | " + " | ".join(cells) + " |")
    for name, s in arms.items():
        for m in s["all"]["mismatches"]:
            print(f"  {name}: {m}")


RATIOS = [("proctor /run_code ÷ SandboxFusion /run_code", "px_run_code", "sf_run_code"),
          ("proctor /v1/jobs batch ÷ SandboxFusion /run_code", "px_jobs_batch", "sf_run_code"),
          ("proctor /v1/jobs batch ÷ library run_many", "px_jobs_batch", "lib_batch"),
          ("proctor /v1/jobs run ÷ library run (threads)", "px_jobs_run", "lib_run"),
          ("proctor /run_code ÷ library run (threads)", "px_run_code", "lib_run")]


def ratios(arms: dict[str, dict]) -> dict:
    out = {}
    for label, num, den in RATIOS:
        if num in arms and den in arms:
            out[label] = {k: (arms[num][k]["jobs_per_s"] / arms[den][k]["jobs_per_s"]
                              if arms[num][k]["jobs_per_s"] and arms[den][k]["jobs_per_s"] else None)
                          for k in ("all", *KINDS)}
    return out


def git_head(path: Path) -> str:
    r = subprocess.run(["git", "-C", str(path), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return r.stdout.strip()


def conditions(args: argparse.Namespace, servers: Servers) -> dict:
    return {"date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "proctor_commit": git_head(REPO), "sandboxfusion": servers.sf_description,
            "cpu": cpu_model(), "cpus": usable_cpus(), "memory_gib": round(memory_gib(), 1),
            "concurrency": args.concurrency, "rounds": args.rounds, "per_round": args.counts,
            "loadavg_1m_start": round(os.getloadavg()[0], 2)}


# --------------------------------------------------------------------------- main


def parse_args(argv: Optional[list[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="few jobs, 1 round: a check that every arm works")
    p.add_argument("--rounds", type=int, default=None, help="rounds (default 3; --quick 1)")
    p.add_argument("--concurrency", type=int, default=4, help="client threads = service pool = library slots")
    p.add_argument("--arms", default=",".join(ARMS), help=f"comma-separated, from {', '.join(ARMS)}")
    p.add_argument("--mixed", action="store_true",
                   help="one batch per arm and round holding every kind, shuffled (jobs/s for the whole only)")
    p.add_argument("--scale", type=float, default=1.0, help="multiply the default jobs per round by this")
    p.add_argument("--sf-url", help="a running SandboxFusion (default: start one from /work/sandboxfusion)")
    p.add_argument("--sf-home", default=os.environ.get("SF_HOME", "/work/sandboxfusion"))
    p.add_argument("--service-url", help="a running `proctor sandbox serve` (default: start one)")
    p.add_argument("--token-file", help="the bearer token of --service-url")
    p.add_argument("--json", help=f"where to save the summary (default: {SUMMARY.name} beside this script; "
                                  "none with --quick)")
    args = p.parse_args(argv)
    if args.concurrency < 1:
        p.error("--concurrency must be >= 1")
    args.rounds = args.rounds or (1 if args.quick else 3)
    base = QUICK_COUNTS if args.quick else DEFAULT_COUNTS
    args.counts = {k: max(1, round(v * args.scale)) for k, v in base.items()}
    args.arm_names = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in args.arm_names if a not in ARMS]
    if unknown:
        p.error(f"--arms: unknown {', '.join(unknown)}; choose from {', '.join(ARMS)}")
    if args.json is None and not args.quick:
        args.json = str(SUMMARY)
    return args


def main(argv: Optional[list[str]] = None) -> int:
    args = parse_args(argv)
    with Servers(args) as servers:
        with make_arms(args.arm_names, servers, args.concurrency) as arms:
            cond = conditions(args, servers)
            log(f"warming up {len(arms)} arms")
            for arm in arms:
                arm.warm()
            if args.mixed:
                tallies, loads, batch_s = measure_mixed(arms, args.counts, args.rounds, args.concurrency)
            else:
                (tallies, loads), batch_s = measure(arms, args.counts, args.rounds, args.concurrency), {}
    result = {"conditions": {**cond, "mixed": args.mixed, "loadavg_1m_per_round": loads}, "arms": {}}
    for name, per_kind in tallies.items():
        total = overall(per_kind)
        total.elapsed_s = batch_s.get(name, total.elapsed_s)   # --mixed: only whole batches were timed
        result["arms"][name] = {"all": total.summary(), **{k: t.summary() for k, t in per_kind.items()}}
    result["ratios"] = ratios(result["arms"])
    print(json.dumps(result["conditions"]))
    print_tables(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
        log(f"summary written to {args.json}")
    return 0 if all(s["all"]["verdicts"].get("infra", 0) == 0 for s in result["arms"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
