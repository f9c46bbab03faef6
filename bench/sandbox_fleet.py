"""The sandbox fleet against its engines run directly, on one machine.

A local Ray cluster (a head without sandbox, two sandbox nodes of one CPU each, token
authentication on): node A on this machine's Docker engine, node B on a second, private
dockerd (tests/second_dockerd.py). The same distinct jobs (no cache hits) run:

* directly on A alone and on B alone (`Sandbox`, 1 slot): their rates, summed;
* directly on A and B at once (one `Sandbox` over both engines, 1 slot each);
* through the fleet (`RaySandbox`, 1 slot per node, cache off).

Router overhead per job: (fleet wall - direct A+B wall) / jobs, and the router actor's own
CPU seconds per job (from /proc). Rounds are interleaved; medians are printed with the
date and machine. Needs root (dockerd) and ``proctor[ray]``.

    .venv/bin/python bench/sandbox_fleet.py --jobs 200 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(16))   # before Ray reads them

from second_dockerd import SecondEngine  # noqa: E402

from proctor.sandbox import Job, Sandbox  # noqa: E402
from proctor.sandbox.engine import connect  # noqa: E402
from proctor.sandbox.images import require_image  # noqa: E402

MAIN = "unix:///var/run/docker.sock"


def jobs(n: int, salt: str) -> list[Job]:
    return [Job(language="python", code=f"print({i})  # {salt}\n", tests=f"assert {i} >= 0\n") for i in range(n)]


def timed(run, batch: list[Job]) -> float:
    t0 = time.perf_counter()
    results = run(batch)
    wall = time.perf_counter() - t0
    bad = [r for r in results if r.status != "passed"]
    if bad:
        raise SystemExit(f"{len(bad)} jobs were not passed: {bad[0].status} {bad[0].error[:300]}")
    return wall


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--prefetch", type=int, default=None, help="the fleet's prefetch (default: its own)")
    args = ap.parse_args()
    import ray
    from ray.cluster_utils import Cluster

    from proctor.sandbox.fleet import RaySandbox

    engine = SecondEngine().start()
    cluster = None
    try:
        engine.load_images([require_image(connect(), "python")])
        cluster = Cluster(initialize_head=True, head_node_args=dict(num_cpus=0, include_dashboard=False))
        cluster.add_node(num_cpus=1, resources={"sandbox": 1})
        cluster.add_node(num_cpus=1, resources={"sandbox": 1}, env_vars={"DOCKER_HOST": engine.url})
        ray.init(address=cluster.address, log_to_driver=False)
        a, b = Sandbox(hosts=[MAIN], slots=1), Sandbox(hosts=[engine.url], slots=1)
        both = Sandbox(hosts=[MAIN, engine.url], slots=1)
        fleet = RaySandbox(address=cluster.address, cache=False, slots_per_node=1, prefetch=args.prefetch)
        router_pid = ray.get(fleet._router.__ray_call__.remote(lambda self: os.getpid()))
        for sb in (a, b, both):
            sb.warmup(["python"])
        fleet.warmup(["python"])
        timed(fleet.run_many, jobs(20, "warm"))
        rows: dict[str, list[float]] = {"A": [], "B": [], "A+B at once": [], "fleet": [], "router cpu ms/job": []}
        for r in range(args.rounds):
            n = args.jobs
            rows["A"].append(n / timed(a.run_many, jobs(n, f"a{r}")))
            rows["B"].append(n / timed(b.run_many, jobs(n, f"b{r}")))
            rows["A+B at once"].append(n / timed(both.run_many, jobs(n, f"ab{r}")))
            c0 = cpu_s(router_pid)
            rows["fleet"].append(n / timed(fleet.run_many, jobs(n, f"f{r}")))
            rows["router cpu ms/job"].append((cpu_s(router_pid) - c0) / n * 1000)
        med = {k: statistics.median(v) for k, v in rows.items()}
        summed = med["A"] + med["B"]
        print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {platform.node()}, {os.cpu_count()} CPUs, "
              f"{args.jobs} python jobs x {args.rounds} rounds, medians")
        for k, v in rows.items():
            print(f"{k:22s} median {med[k]:8.2f}   rounds {', '.join(f'{x:.2f}' for x in v)}")
        print(f"fleet / (A + B run apart, summed) = {med['fleet'] / summed:.3f}")
        print(f"fleet / (A + B at once)           = {med['fleet'] / med['A+B at once']:.3f}")
        print(f"added wall per job vs A+B at once = {(1 / med['fleet'] - 1 / med['A+B at once']) * 1000:.3f} ms")
        for sb in (a, b, both, fleet):
            sb.close()
    finally:
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
        engine.stop()


if __name__ == "__main__":
    main()
