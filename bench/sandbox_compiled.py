#!/usr/bin/env python3
"""Compiled-language throughput on HumanEval-X rows: this working tree against another commit.

Jobs are shaped like an RL step's: for each of ``--tasks`` HumanEval-X problems per
language, ``--answers`` - 1 right answers (the canonical solution, each with a comment of
its own so no two jobs are the same text) and one wrong answer (the row's control, which
its tests must fail). Both proctors (the working tree, and ``--baseline REV`` exported,
each in a worker process with its own images) run the same batches through
``Sandbox.run_many`` at ``--conc`` slots, taking turns batch by batch, the side that goes
first alternating by round. jobs/s = jobs / summed wall time of that side's batches.
Every verdict is compared with the one expected (pass for a right answer, fail for the
control); exit status 1 if any differs.

    .venv/bin/python bench/sandbox_compiled.py --baseline f958b67            # ~6 min on 2 cores
    .venv/bin/python bench/sandbox_compiled.py --languages cpp --rounds 1
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

from baseline_worker import CheckoutFinder   # bench/: run as `python bench/...`
from machine import cpu_model, usable_cpus
from sandbox_throughput import export_checkout, log

REPO = Path(__file__).resolve().parent.parent
LANGUAGES = ("cpp", "java", "go", "rust", "javascript")
WALL_S, CPU_S, MEMORY_MB = 20.0, 10.0, 512
COMMENT = {"cpp": "//", "java": "//", "go": "//", "rust": "//", "javascript": "//"}

Spec = dict   # {"language", "code", "tests", "expect": "passed" | "failed"}: plain data for either proctor


def specs(language: str, tasks: int, answers: int) -> list[Spec]:
    """``tasks`` problems x ``answers`` jobs each (right ones, then the wrong control)."""
    from proctor.envs.code.humaneval_x import problems

    chosen = [p for p in problems(language) if p.broken_upstream is None][:tasks]
    out = []
    for p in chosen:
        right = p.program(p.canonical_solution)
        out += [{"language": language, "code": right, "tests": p.tests, "expect": "passed"}
                for _ in range(answers - 1)]
        out.append({"language": language, "code": p.program(p.wrong_solution), "tests": p.tests,
                    "expect": "failed"})
    return out


def numbered(spec: Spec, i: int) -> Spec:
    """The same job under a comment of its own: no two jobs of a run are the same text."""
    return {**spec, "code": f"{spec['code']}\n{COMMENT[spec['language']]} answer {i}\n"}


# --------------------------------------------------------------------------- the worker


def worker(checkout: Path, conc: int, languages: list[str]) -> int:
    """Serve {"specs", "start"} -> {"s", "statuses"} over stdin/stdout for the proctor of ``checkout``."""
    sys.meta_path.insert(0, CheckoutFinder(checkout))
    import proctor.sandbox as ps

    if not Path(ps.__file__).resolve().is_relative_to(checkout):
        sys.exit(f"worker: proctor.sandbox came from {ps.__file__}, not {checkout}")
    limits = ps.Limits(wall_s=WALL_S, cpu_s=CPU_S, memory_mb=MEMORY_MB)
    with ps.Sandbox(slots=conc, auto_build=True, startup_check=tuple(languages)) as sb:
        sb.warmup(languages, limits=limits)
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            request = json.loads(line)
            jobs = [ps.Job(language=s["language"], code=s["code"], tests=s["tests"], limits=limits)
                    for s in (numbered(s, int(request["start"]) + i) for i, s in enumerate(request["specs"]))]
            t0 = time.perf_counter()
            results = sb.run_many(jobs)
            elapsed = time.perf_counter() - t0
            print(json.dumps({"s": elapsed, "statuses": [r.status for r in results],
                              "why": [(r.error or r.stderr)[-300:] for r in results]}), flush=True)
    return 0


class Worker:
    def __init__(self, checkout: Path, conc: int, languages: list[str]) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker", str(checkout), "--conc", str(conc),
                                      "--languages", ",".join(languages)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.reply()

    def reply(self) -> dict:
        line = self.proc.stdout.readline()   # type: ignore[union-attr]
        if not line:
            sys.exit(f"bench worker ended (exit {self.proc.wait()}); see its messages above")
        return json.loads(line)

    def batch(self, batch: list[Spec], start: int) -> dict:
        self.proc.stdin.write(json.dumps({"specs": batch, "start": start}) + "\n")   # type: ignore[union-attr]
        self.proc.stdin.flush()   # type: ignore[union-attr]
        return self.reply()

    def close(self) -> None:
        self.proc.stdin.close()   # type: ignore[union-attr]
        self.proc.wait(timeout=120)


# --------------------------------------------------------------------------- the run


def measure(conc: int, jobs: dict[str, list[Spec]], rounds: int, base: Path) -> dict[str, dict[str, list]]:
    """{language: {side: [seconds, jobs, [unexpected verdicts]]}} over ``rounds`` interleaved rounds."""
    languages = list(jobs)
    sides = {"tree": Worker(REPO, conc, languages), "base": Worker(base, conc, languages)}
    totals = {lang: {s: [0.0, 0, []] for s in sides} for lang in jobs}
    try:
        for r in range(rounds):
            order = list(sides) if r % 2 == 0 else list(reversed(sides))
            for lang, batch in jobs.items():
                for side in order:
                    got = sides[side].batch(batch, start=r * 10_000)
                    t = totals[lang][side]
                    t[0] += got["s"]
                    t[1] += len(batch)
                    t[2] += [f"job {i}: {s} (expected {spec['expect']}): {why}"
                             for i, (spec, s, why) in enumerate(zip(batch, got["statuses"], got["why"]))
                             if s != spec["expect"]]
                    log(f"round {r + 1}/{rounds} {lang} {side}: {len(batch) / got['s']:.2f} jobs/s")
    finally:
        for w in sides.values():
            w.close()
    return totals


def report(totals: dict[str, dict[str, list]], label: str, conc: int) -> int:
    print(f"\n# {cpu_model()}, {usable_cpus()} CPUs; run_many at {conc} slots, rounds interleaved")
    print(f"| language | tree jobs/s | base ({label}) jobs/s | ratio | unexpected verdicts |")
    print("|---|---|---|---|---|")
    bad = 0
    for lang, t in totals.items():
        rate = {s: t[s][1] / t[s][0] for s in t}
        wrong = len(t["tree"][2]) + len(t["base"][2])
        bad += wrong
        print(f"| {lang} | {rate['tree']:.2f} | {rate['base']:.2f} | {rate['tree'] / rate['base']:.2f}x | {wrong} |")
        for side in t:
            for why in t[side][2][:3]:
                print(f"    {side}: {why}")
    return 1 if bad else 0


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", default="f958b67", help="commit to compare with (f958b67: before the speed work)")
    p.add_argument("--languages", default=",".join(LANGUAGES), help="comma-separated subset of " + ", ".join(LANGUAGES))
    p.add_argument("--tasks", type=int, default=6, help="problems per language (6)")
    p.add_argument("--answers", type=int, default=4, help="jobs per problem: answers-1 right, 1 wrong (4)")
    p.add_argument("--conc", type=int, default=2, help="sandbox slots (2: one per core here)")
    p.add_argument("--rounds", type=int, default=2, help="rounds, sides alternating first (2)")
    p.add_argument("--json", metavar="PATH", help="write the totals here")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    languages = args.languages.split(",")
    if args.worker:
        return worker(Path(args.worker).resolve(), args.conc, languages)
    unknown = sorted(set(languages) - set(LANGUAGES))
    if unknown:
        p.error(f"--languages: {', '.join(unknown)} unknown; choose from {', '.join(LANGUAGES)}")
    jobs = {lang: specs(lang, args.tasks, args.answers) for lang in languages}
    base = Path(export_checkout(args.baseline))
    totals = measure(args.conc, jobs, args.rounds, base)
    if args.json:
        Path(args.json).write_text(json.dumps(totals, indent=1))
    return report(totals, args.baseline, args.conc)


if __name__ == "__main__":
    sys.exit(main())
