#!/usr/bin/env python3
"""A sandbox host that cannot start containers: how long until the caller knows, old vs. new.

The broken host is a second dockerd started here (tests/second_dockerd.py). With
``--broken fake`` (default) its OCI runtime is a script that fails every container create;
with ``--broken gvisor`` it is the machine's real ``/usr/bin/runsc`` registered without
``--network=none``, which fails every start ("cannot run with network enabled in root
network namespace"), as in issue 15. The working host is the machine's engine. Each scenario runs a batch of ``--jobs`` small
jobs (``print(i)``) through

  old   the sandbox package as it was at ``--baseline`` (default: the commit before the
        circuit breaker), extracted with ``git archive`` and imported under another name;
  new   the sandbox in this tree (per-host breaker, start-up check).

Scenarios: ``broken``: the broken host alone (new: ``startup_check=()``, so the batch
itself meets the broken host; the start-up check's own time to its error is its own row);
``pair``: the working engine plus the broken host. The batch is issued the way
``run_many`` issues it (``slots`` threads calling ``Sandbox.run``), each result timed as
it arrives. Reported per row: time to the first ``infra_error`` result, time to the whole
batch, results by status, container starts the broken runtime received (its own log),
and WARNING lines the ``proctor.sandbox`` logger emitted.

    .venv/bin/python bench/sandbox_breaker.py                 # ~1-2 min on 2 cores (the old code is slow)
    .venv/bin/python bench/sandbox_breaker.py --broken gvisor    # issue 15's host; the old code takes ~3 min
    .venv/bin/python bench/sandbox_breaker.py --jobs 50 --json /tmp/breaker.json
"""

from __future__ import annotations

import os

os.environ["OMP_NUM_THREADS"] = "1"

import argparse
import datetime as _dt
import importlib
import json
import logging
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from types import ModuleType
from typing import Optional

from machine import cpu_model, usable_cpus  # bench/machine.py: run as `python bench/...`

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from second_dockerd import SecondEngine, can_run_dockerd  # noqa: E402

BASELINE = "88e1bdb"   # the last commit before the breaker: every job retried on the broken host
LOCAL = "unix:///var/run/docker.sock"


@dataclass
class Row:
    scenario: str
    version: str
    construct_s: float
    first_infra_s: Optional[float]
    batch_s: float
    passed: int
    infra_error: int
    other: int
    starts_on_broken: int
    warnings: int
    note: str = ""


class WarningCounter(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


def load_baseline(rev: str) -> ModuleType:
    """The sandbox package at ``rev``, importable as ``proctor_sandbox_baseline`` (read from git, not checked out)."""
    tmp = Path(tempfile.mkdtemp(prefix="proctor-baseline-"))
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "sandbox"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(tmp)], input=archive.stdout, check=True)
    (tmp / "sandbox").rename(tmp / "proctor_sandbox_baseline")
    sys.path.insert(0, str(tmp))
    return importlib.import_module("proctor_sandbox_baseline")


def run_batch(sb: object, job_cls: type, n: int) -> tuple[Optional[float], float, list[str]]:
    """``n`` jobs from ``slots`` threads, as run_many does: (first infra_error s, whole batch s, statuses)."""
    jobs = [job_cls("python", f"print({i})") for i in range(n)]
    t0 = time.monotonic()
    firsts: list[float] = []

    def one(job: object) -> str:
        r = sb.run(job)  # type: ignore[attr-defined]
        if r.status == "infra_error":
            firsts.append(time.monotonic() - t0)
        return r.status

    with ThreadPoolExecutor(max_workers=sb.slots) as ex:  # type: ignore[attr-defined]
        statuses = list(ex.map(one, jobs))
    return (min(firsts) if firsts else None), time.monotonic() - t0, statuses


def measure(scenario: str, version: str, mod: ModuleType, hosts: list[str], engine: SecondEngine,
            n: int, slots: int, counter: WarningCounter, **options: object) -> Row:
    starts0, warn0 = engine.start_attempts(), counter.count
    t0 = time.monotonic()
    with mod.Sandbox(hosts=hosts, slots=slots, **options) as sb:
        construct = time.monotonic() - t0
        first, batch, statuses = run_batch(sb, mod.Job, n)
    return Row(scenario, version, round(construct, 3), None if first is None else round(first, 3), round(batch, 3),
               statuses.count("passed"), statuses.count("infra_error"),
               len(statuses) - statuses.count("passed") - statuses.count("infra_error"),
               engine.start_attempts() - starts0, counter.count - warn0)


def measure_check(mod: ModuleType, engine: SecondEngine, slots: int, counter: WarningCounter) -> Row:
    """New only: the start-up check's time to its one error (the constructor raises)."""
    starts0, warn0 = engine.start_attempts(), counter.count
    t0 = time.monotonic()
    try:
        mod.Sandbox(hosts=[engine.url], slots=slots).close()
        note = "constructed (unexpected)"
    except mod.SandboxError as exc:
        note = f"raised {type(exc).__name__}"
    took = round(time.monotonic() - t0, 3)
    return Row("broken", "new, start-up check", took, took, 0.0, 0, 0, 0, engine.start_attempts() - starts0,
               counter.count - warn0, note)


def medians(rows: list[Row]) -> list[Row]:
    """One row per (scenario, version): the median of each figure over the rounds, ``runs`` in the note."""
    groups: dict[tuple[str, str], list[Row]] = {}
    for r in rows:
        groups.setdefault((r.scenario, r.version), []).append(r)
    out = []
    for (scenario, version), rs in groups.items():
        def med(name: str):
            values = sorted(v for v in (getattr(r, name) for r in rs) if v is not None)
            return values[len(values) // 2] if values else None
        out.append(Row(scenario, version, med("construct_s"), med("first_infra_s"), med("batch_s"), med("passed"),
                       med("infra_error"), med("other"), med("starts_on_broken"), med("warnings"),
                       ", ".join(sorted({r.note for r in rs if r.note}) + [f"median of {len(rs)}"])))
    return out


def fmt(x: Optional[float]) -> str:
    return "–" if x is None else f"{x:.2f}"


def table(rows: list[Row]) -> str:
    head = ("| scenario | version | constructor s | first infra_error s | whole batch s | passed | infra_error "
            "| starts on broken host | warnings |\n|---|---|---|---|---|---|---|---|---|")
    lines = [head]
    for r in rows:
        lines.append(f"| {r.scenario} | {r.version}{' (' + r.note + ')' if r.note else ''} | {r.construct_s:.2f} "
                     f"| {fmt(r.first_infra_s)} | {r.batch_s:.2f} | {r.passed} | {r.infra_error} "
                     f"| {r.starts_on_broken} | {r.warnings} |")
    return "\n".join(lines)


def ratios(rows: list[Row]) -> str:
    by = {(r.scenario, r.version): r for r in rows}
    out = []
    for scenario in ("broken", "pair"):
        old, new = by.get((scenario, "old")), by.get((scenario, "new"))
        if old and new and new.batch_s > 0:
            first = (f"{old.first_infra_s / new.first_infra_s:.3g}x" if old.first_infra_s and new.first_infra_s
                     else "–")
            out.append(f"{scenario}: whole batch old/new = {old.batch_s / new.batch_s:.3g}x, "
                       f"first infra_error old/new = {first}")
    return "\n".join(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--slots", type=int, default=2, help="slots per host (default 2: this machine's cores)")
    ap.add_argument("--baseline", default=BASELINE, help="git revision of the old behaviour")
    ap.add_argument("--skip-old", action="store_true", help="only the new code (the old takes ~1 min)")
    ap.add_argument("--broken", choices=("fake", "gvisor"), default="fake",
                    help="fake: a runtime script that fails every create; gvisor: real runsc without --network=none")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every row but the old code's broken-host row")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    problem = can_run_dockerd()
    if args.broken == "gvisor" and not Path("/usr/bin/runsc").exists():
        problem = "--broken gvisor needs /usr/bin/runsc (apt install runsc)"
    if problem:
        print(f"cannot run: {problem}", file=sys.stderr)
        return 2

    import proctor.sandbox as new
    from proctor.sandbox.images import image_ref
    old = None if args.skip_old else load_baseline(args.baseline)
    counter = WarningCounter()
    logging.getLogger("proctor.sandbox").addHandler(counter)   # the old code logs under the same name
    rows: list[Row] = []
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    with SecondEngine(real="runc" if args.broken == "fake" else "/usr/bin/runsc") as engine:
        engine.load_images([image_ref("python")])
        # The healthy reference: the same batch on the machine's engine.
        engine.set_broken(args.broken == "fake")   # gVisor without --network=none is broken by itself
        # Rounds, old and new taking turns (who goes first alternates), so load from other work on
        # the machine hits both alike; the old code on the broken host alone runs once (it is the slow one).
        for rnd in range(args.rounds):
            versions = [("new", new), ("old", old)] if rnd % 2 == 0 else [("old", old), ("new", new)]
            rows.append(measure("healthy", "new", new, [LOCAL], engine, args.jobs, args.slots, counter))
            rows.append(measure_check(new, engine, args.slots, counter))
            rows.append(measure("broken", "new", new, [engine.url], engine, args.jobs, args.slots, counter,
                                startup_check=()))
            for version, mod in versions:
                if mod is not None:
                    rows.append(measure("pair", version, mod, [LOCAL, engine.url], engine, args.jobs, args.slots,
                                        counter))
        if old is not None:
            rows.append(measure("broken", "old", old, [engine.url], engine, args.jobs, args.slots, counter))
    rows = medians(rows)
    print(f"\n{args.jobs} jobs, {args.slots} slot(s) per host; broken host: {args.broken}; {usable_cpus()} CPUs "
          f"({cpu_model()}); baseline {args.baseline}; {started}\n")
    print(table(rows))
    print("\n" + ratios(rows))
    if args.json:
        args.json.write_text(json.dumps({"started": started, "jobs": args.jobs, "slots": args.slots,
                                         "broken": args.broken,
                                         "baseline": args.baseline, "rows": [asdict(r) for r in rows]}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
