"""Rollout backends side by side on CPU, and what overlapping scoring with generation hides.

Part 1: GRPO steps with the transformers backend, the colocated vLLM engine and a
`proctor serve` engine in its own process, each synchronous and (vLLM) with async
generation (max_staleness 1), each run in its own process: generated tokens per second
and seconds per step (the tiny model with random weights, so completions run to the token
limit and every step generates the same count).
Part 2: a suite with code tasks (HumanEval through the sandbox; every completion is sent to
the sandbox as a program), scored after all generation vs. chunk by chunk while the next
chunk generates: the scoring time left exposed.

    .venv/bin/python bench/rollout_backends.py [--steps 4] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def child(mode: str, steps: int) -> dict:
    from proctor.trainer.build import build_trainer
    from proctor.trainer.config import GRPOConfig

    with tempfile.TemporaryDirectory() as out:
        if mode not in ("serial", "overlap"):
            backend, _, pipelined = mode.partition("+")
            cfg = GRPOConfig.from_flat(model="tiny:0", rollout_backend=backend, prompts_per_step=8, group_size=8,
                             max_new_tokens=64, max_steps=steps, output_dir=out, log_every=10**6,
                             generation_batch_size=64, async_generation=bool(pipelined), max_staleness=1)
        else:   # overlap on / off, code suite
            cfg = GRPOConfig.from_flat(model="tiny:0", prompts_per_step=16, group_size=8, max_new_tokens=48, max_steps=steps,
                             output_dir=out, log_every=10**6, generation_batch_size=16,
                             overlap_scoring=(mode == "overlap"),
                             envs={"code": {"id": "proctor/HumanEval-v0", "kwargs": {"extract_fallback": "whole"}}})
        rows = build_trainer(cfg).train()
    timed = rows[1:] or rows
    mean = lambda key: sum(r.get(key, 0.0) for r in timed) / len(timed)  # noqa: E731
    return {"mode": mode, "s_per_step": mean("time_step_s"), "generate_s": mean("time_generate_s"),
            "score_s": mean("time_score_s"), "score_exposed_s": mean("time_score_exposed_s"),
            "tokens_per_step": mean("tokens_generated"), "sync_s": mean("time_sync_s"),
            "wait_s": mean("time_rollout_wait_s"), "learn_s": mean("time_learn_s"),
            "tokens_per_s": mean("tokens_generated") / mean("time_generate_s")}


def run(mode: str, steps: int) -> dict:
    proc = subprocess.run([sys.executable, __file__, "--child", mode, "--steps", str(steps)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{mode} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--json", default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.steps)))
        return
    backends = ("transformers", "vllm", "vllm_server", "vllm+async", "vllm_server+async")
    results = {m: run(m, args.steps) for m in (*backends, "serial", "overlap")}
    t = results["transformers"]
    print(f"Part 1: GRPO on CPU, tiny model (random weights), 8 prompts x 8 completions x 64 tokens, "
          f"{args.steps} steps (step 1 left out), OMP_NUM_THREADS=1\n")
    print("| backend | tokens/s (generating) | generate s | learn s | sync s | waited for rollouts s | s/step "
          "| s/step vs transformers |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for m in backends:
        r = results[m]
        print(f"| {m} | {r['tokens_per_s']:,.0f} | {r['generate_s']:.3f} | {r['learn_s']:.3f} | {r['sync_s']:.3f} | "
              f"{r['wait_s']:.3f} | {r['s_per_step']:.3f} | {r['s_per_step'] / t['s_per_step']:.2f}x |")
    v = results["vllm"]
    print(f"\nvLLM / transformers: tokens/s {v['tokens_per_s'] / t['tokens_per_s']:.2f}x, "
          f"s/step {v['s_per_step'] / t['s_per_step']:.2f}x")
    s, o = results["serial"], results["overlap"]
    print("\nPart 2: HumanEval suite through the sandbox, 16 prompts x 8, 48 tokens, generation in chunks of 2 prompts\n")
    print("| scoring | generate s | scoring s (total) | scoring left exposed s | s/step |")
    print("|---|---:|---:|---:|---:|")
    for r, label in ((s, "after all generation"), (o, "overlapped, chunk by chunk")):
        exposed = r["score_exposed_s"]
        print(f"| {label} | {r['generate_s']:.3f} | {r['score_s']:.3f} | {exposed:.3f} | {r['s_per_step']:.3f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
