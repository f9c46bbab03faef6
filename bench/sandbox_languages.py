"""Per-job latency of each sandbox language, against Python and C++ as the baselines.

One warm container per language; jobs run one at a time (no contention between
them), each a HumanEval(-X) problem 0 with its canonical solution and its tests.
Reports client-side p50/p90 per job (build + run + sweep + transfer) and the ratio
to Python's p50. Usage: python bench/sandbox_languages.py [--n 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from proctor.sandbox import Job, Limits, Sandbox

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from machine import cpu_model, usable_cpus  # noqa: E402

SAMPLE = HERE.parent / "tests" / "data" / "humaneval_x_sample.jsonl"
LIM = Limits(wall_s=15, cpu_s=5, memory_mb=512)
PY = Job(language="python", limits=LIM,
         code="def has_close_elements(numbers, threshold):\n"
              "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])\n",
         tests="assert has_close_elements([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3)\n"
               "assert not has_close_elements([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.05)\n")
CPP = Job(language="cpp", limits=LIM,
          code="#include <cmath>\n#include <vector>\n"
               "bool has_close_elements(std::vector<float> v, float t) {\n"
               "  for (size_t i = 0; i < v.size(); i++) for (size_t j = i + 1; j < v.size(); j++)\n"
               "    if (std::fabs(v[i] - v[j]) < t) return true;\n  return false;\n}\n",
          tests="#include <cassert>\n#include <vector>\nbool has_close_elements(std::vector<float>, float);\n"
                "int main() { assert(has_close_elements({1.0, 2.0, 3.9, 4.0, 5.0, 2.2}, 0.3)); }\n")


def humaneval_x_jobs() -> dict[str, Job]:
    jobs = {}
    with open(SAMPLE) as f:
        for line in f:
            row = json.loads(line)
            if row["task_id"].endswith("/0"):
                jobs[row["language"]] = Job(language=row["language"], code=row["prefix"] + row["canonical_solution"],
                                            tests=row["tests"], limits=LIM)
    return jobs


def measure(sb: Sandbox, job: Job, n: int) -> list[float]:
    for _ in range(2):   # warm the container and the page cache
        sb.run(job)
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        r = sb.run(job)
        times.append(time.perf_counter() - t0)
        if not r.passed:
            raise SystemExit(f"{job.language}: the canonical solution did not pass: {r.status}\n{r.stderr[-800:]}")
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10, help="timed jobs per language")
    args = ap.parse_args()
    jobs = {"python": PY, "cpp": CPP, **humaneval_x_jobs()}
    print(f"# {cpu_model()}, {usable_cpus()} CPUs, load {os.getloadavg()[0]:.1f}; n={args.n} serial jobs each")
    print("| language | p50 ms | p90 ms | p50 / python |")
    print("|---|---|---|---|")
    base = None
    with Sandbox(slots=1, spare=0) as sb:
        for language, job in jobs.items():
            t = sorted(measure(sb, job, args.n))
            p50, p90 = statistics.median(t), t[min(len(t) - 1, int(0.9 * len(t)))]
            base = base or p50
            print(f"| {language} | {p50 * 1e3:.0f} | {p90 * 1e3:.0f} | {p50 / base:.1f}x |", flush=True)


if __name__ == "__main__":
    main()
