"""Python tool calls per second through the sandbox's sessions, as tool episodes make them.

    python bench/tool_throughput.py --episodes 32 --calls 8 --workers 8

Each episode is a real ``ToolEpisode`` with the built-in ``python`` tool: its first call opens a
session (a container of its own), every call is one cell in it (state kept: each cell adds to a
variable the episode's earlier cells set), and the episode's end closes it. ``workers`` episodes
run at once, as the trainer's tool pool runs a batch's, in three timed phases: every episode's
first call (it starts the session), the other calls (warm sessions), the closes. Reported: calls
per second of warm sessions, sessions started and closed per second, and every call over the
three phases' time (what an episode of ``calls`` calls costs, its session included).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ThreadPoolExecutor

from proctor.envs import Task
from proctor.envs.tools import HermesParser, PythonTool, ToolEpisode, ToolLimits

CALL = HermesParser().format_call


def call(ep: ToolEpisode, index: int, n: int) -> None:
    """The episode's n-th python call: its cell adds n to what its earlier cells left."""
    step = ep.act(CALL("python", {"code": f"total = globals().get('total', 0) + {n}\ntotal * 2"}))
    want = str(n * (n + 1))   # 2 * (0 + 1 + ... + n): the state was kept
    if step.final or step.messages[0]["content"] != want:
        raise RuntimeError(f"episode {index} call {n}: {step}")


def phases(tool: PythonTool, episodes: int, calls: int, workers: int) -> dict[str, float]:
    """Seconds of each phase, all episodes at once (``workers`` at a time): the first call (it opens
    the session), the other calls (warm sessions), the close."""
    eps = [ToolEpisode({"python": tool}, HermesParser(), ToolLimits(max_turns=calls + 1, max_calls=calls),
                       Task(f"bench-{i}", "bench")) for i in range(episodes)]
    out = {}
    with ThreadPoolExecutor(workers) as pool:
        t0 = time.perf_counter()
        list(pool.map(lambda i: call(eps[i], i, 0), range(episodes)))
        out["start_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        list(pool.map(lambda i: [call(eps[i], i, n) for n in range(1, calls)], range(episodes)))
        out["warm_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        list(pool.map(lambda e: e.close(), eps))
        out["close_s"] = time.perf_counter() - t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--calls", type=int, default=8, help="python calls per episode")
    ap.add_argument("--workers", type=int, default=8, help="episodes at once")
    args = ap.parse_args()
    tool = PythonTool()
    try:
        tool.sandbox   # started before the clock
        phases(tool, 2, 2, 2)   # the image's first container start is not what is measured
        t = phases(tool, args.episodes, args.calls, args.workers)
    finally:
        tool.close()
    calls, warm = args.episodes * args.calls, args.episodes * (args.calls - 1)
    wall = t["start_s"] + t["warm_s"] + t["close_s"]
    print(json.dumps({
        "episodes": args.episodes, "calls_per_episode": args.calls, "workers": args.workers,
        "cores": len(os.sched_getaffinity(0)), "wall_s": round(wall, 3),
        "calls_per_s": round(calls / wall, 1),                 # every call, session starts and closes included
        "warm_calls_per_s": round(warm / t["warm_s"], 1),      # calls in open sessions
        "sessions_started_per_s": round(args.episodes / t["start_s"], 1),
        "sessions_closed_per_s": round(args.episodes / t["close_s"], 1),
        "load_average": [round(x, 2) for x in os.getloadavg()]}))


if __name__ == "__main__":
    main()
