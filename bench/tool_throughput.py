"""Python tool calls per second through the sandbox's sessions, as tool episodes make them.

    python bench/tool_throughput.py --episodes 32 --calls 8 --workers 8

Each episode is a real ``ToolEpisode`` with the built-in ``python`` tool: its first call opens a
session (a container of its own), every call is one cell in it (state kept: each cell adds to a
variable the episode's earlier cells set), and the episode's end closes it. ``workers`` episodes
run at once, as the trainer's tool pool runs a batch's. Two rates are reported: every call over
the whole wall time (session starts and closes included), and the calls of warm sessions only
(each episode's first call, which starts its session, left out, as is closing).
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


def episode(tool: PythonTool, index: int, calls: int) -> dict[str, float]:
    """One episode of ``calls`` python calls; its times: the first call (with the session start),
    the rest, the close."""
    ep = ToolEpisode({"python": tool}, HermesParser(), ToolLimits(max_turns=calls + 1, max_calls=calls),
                     Task(f"bench-{index}", "bench"))
    times = []
    for n in range(calls):
        t0 = time.perf_counter()
        step = ep.act(CALL("python", {"code": f"total = globals().get('total', 0) + {n}\ntotal * 2"}))
        times.append(time.perf_counter() - t0)
        want = str(n * (n + 1))   # 2 * (0 + 1 + ... + n): the state was kept
        if step.final or step.messages[0]["content"] != want:
            raise RuntimeError(f"episode {index} call {n}: {step}")
    t0 = time.perf_counter()
    ep.close()
    return {"first_s": times[0], "warm_s": sum(times[1:]), "close_s": time.perf_counter() - t0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=32)
    ap.add_argument("--calls", type=int, default=8, help="python calls per episode")
    ap.add_argument("--workers", type=int, default=8, help="episodes at once")
    args = ap.parse_args()
    tool = PythonTool()
    try:
        tool.sandbox   # started before the clock
        episode(tool, -1, 2)   # the image's first container start is not what is measured
        t0 = time.perf_counter()
        with ThreadPoolExecutor(args.workers) as pool:
            results = list(pool.map(lambda i: episode(tool, i, args.calls), range(args.episodes)))
        wall = time.perf_counter() - t0
    finally:
        tool.close()
    calls = args.episodes * args.calls
    warm_calls = args.episodes * (args.calls - 1)
    warm_busy = sum(r["warm_s"] for r in results)
    out = {"episodes": args.episodes, "calls_per_episode": args.calls, "workers": args.workers,
           "cores": len(os.sched_getaffinity(0)), "wall_s": round(wall, 3),
           "calls_per_s": round(calls / wall, 1),
           # warm calls per second of wall time with `workers` of them in flight at once
           "warm_calls_per_s": round(warm_calls / warm_busy * args.workers, 1) if warm_busy else None,
           "warm_call_ms": round(1000 * warm_busy / warm_calls, 2) if warm_calls else None,
           "session_start_ms": round(1000 * sum(r["first_s"] for r in results) / args.episodes, 1),
           "session_close_ms": round(1000 * sum(r["close_s"] for r in results) / args.episodes, 1),
           "load_average": os.getloadavg()}
    print(json.dumps(out))


if __name__ == "__main__":
    main()
