"""The tool-use demo, 3 seeds: GRPO over python-tool episodes raises held-out success with tools.

    python bench/tool_demo.py [--config examples/train/python_tool_tiny.yaml] [--seeds 0 1 2] [--steps N]

Each seed trains ``examples/train/python_tool_tiny.yaml`` (the tiny-tools model on
proctor/PythonToolMath-v0, every python call in a sandbox session of its own) and evaluates the
held-out questions with tools before step 1 and every ``eval.every`` steps. Printed and written
to ``bench/tool_demo_summary.json``: per seed, held-out greedy success with tools at the start and
at the end (and its rise), sampled pass@1, how often the model called the tool, and the time.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine import cpu_model, usable_cpus

HERE = Path(__file__).resolve().parent
KEYS = ("eval_greedy_pass_rate", "eval_pass@1", "eval_greedy_tool_use_frac", "eval_greedy_tool_calls_per_episode",
        "eval_greedy_tool_errors_per_episode")


def run(config: dict, seed: int, steps: int | None, out: Path) -> dict:
    from accelerate.state import AcceleratorState
    from proctor.trainer.build import build_trainer
    from proctor.trainer.config import GRPOConfig

    AcceleratorState._reset_state(reset_partial_state=True)
    cfg = dict(config, seed=seed, output_dir=str(out / f"seed{seed}"))
    if steps is not None:
        cfg["max_steps"] = steps
    t0 = time.perf_counter()
    rows = build_trainer(GRPOConfig.from_dict(cfg)).train()   # train() closes the trainer
    evals = [r for r in rows if "eval_greedy_pass_rate" in r]
    train = [r for r in rows if "tool_use_frac" in r]
    first, last = evals[0], evals[-1]
    return {"seed": seed, "steps": cfg["max_steps"], "minutes": round((time.perf_counter() - t0) / 60, 1),
            "start": {k: first.get(k) for k in KEYS}, "end": {k: last.get(k) for k in KEYS},
            "rise_greedy": last["eval_greedy_pass_rate"] - first["eval_greedy_pass_rate"],
            "rise_pass@1": (last.get("eval_pass@1") or 0.0) - (first.get("eval_pass@1") or 0.0),
            "train_tool_use_first_last": [train[0]["tool_use_frac"], train[-1]["tool_use_frac"]] if train else None,
            "train_reward_with_without_tools_last": [train[-1].get("reward_with_tools"),
                                                     train[-1].get("reward_without_tools")] if train else None,
            "tool_time_s_per_step": round(sum(r["tool_time_s"] for r in train) / max(1, len(train)), 2),
            "eval_steps": [r["step"] for r in evals],
            "eval_greedy_pass_rate": [round(r["eval_greedy_pass_rate"], 3) for r in evals]}


def table(results: list[dict]) -> str:
    """The per-seed table (markdown): held-out success with tools at the start and the end."""
    rows = ["| seed | greedy start | greedy end | rise | pass@1 start | pass@1 end | rise | tool use (greedy, end) | minutes |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in results:
        s, e = r["start"], r["end"]
        rows.append(f"| {r['seed']} | {s['eval_greedy_pass_rate']:.2f} | {e['eval_greedy_pass_rate']:.2f} "
                    f"| {r['rise_greedy']:+.2f} | {s['eval_pass@1'] or 0:.2f} | {e['eval_pass@1'] or 0:.2f} "
                    f"| {r['rise_pass@1']:+.2f} | {e['eval_greedy_tool_use_frac'] or 0:.2f} | {r['minutes']} |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default=str(HERE.parent / "examples/train/python_tool_tiny.yaml"))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--out", default="runs/tool-demo")
    ap.add_argument("--summary", default=str(HERE / "tool_demo_summary.json"))
    args = ap.parse_args()
    config = yaml.safe_load(Path(args.config).read_text())
    results = []
    for seed in args.seeds:
        results.append(run(config, seed, args.steps, Path(args.out)))
        print(json.dumps(results[-1]), flush=True)
    summary = {"config": args.config, "model": config["model"], "cores": len(os.sched_getaffinity(0)),
               "seeds": results, "min_rise_greedy": min(r["rise_greedy"] for r in results),
               "mean_rise_greedy": sum(r["rise_greedy"] for r in results) / len(results)}
    summary.update(date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="minutes"),
                   machine=f"{cpu_model()}, {usable_cpus()} CPUs")
    Path(args.summary).write_text(json.dumps(summary, indent=2) + "\n")
    print(table(results))
    print(json.dumps({k: v for k, v in summary.items() if k != "seeds"}))


if __name__ == "__main__":
    main()
