"""The GPU check of the rollout and cost issues, for a lent GPU machine (one short run).

Makes a ~200M-parameter model of the tiny model's family (random weights: no hub there),
then runs a few GRPO steps with the colocated vLLM engine and sleep/wake around every
update (or, where vLLM is absent, the transformers backend, and says so). Records:

* what the machine has (torch, CUDA, vLLM);
* the GPU memory the engine frees when it sleeps, and gets back when it wakes;
* per step: peak allocated memory, tokens/s, the time split (generate, score, learn, sync);
* `proctor plan`'s prediction for the same run beside the measured peak.

    python bench/gpu_check.py --out DIR [--steps 4] [--hidden 1024 --layers 16]
    python bench/gpu_check.py --out /tmp/x --cpu --hidden 256 --layers 2   # the same path on CPU

Writes DIR/gpu_check.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")


def facts() -> dict:
    import torch

    out = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.cuda.is_available()}
    if out["cuda"]:
        out["device"] = torch.cuda.get_device_name(0)
        out["gpu_total_gib"] = torch.cuda.get_device_properties(0).total_memory / 2**30
    try:
        import vllm

        out["vllm"] = vllm.__version__
    except Exception as exc:  # noqa: BLE001 - what is missing is the finding
        out["vllm"] = None
        out["vllm_missing"] = f"{type(exc).__name__}: {exc}"[:300]
    return out


def free_gib() -> float:
    import torch

    return torch.cuda.mem_get_info()[0] / 2**30 if torch.cuda.is_available() else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=16)
    ap.add_argument("--cpu", action="store_true", help="run the same path on CPU (a check of this script)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result: dict = {"facts": facts()}
    print(json.dumps(result["facts"], indent=2), flush=True)
    gpu = result["facts"]["cuda"] and not args.cpu
    backend = "vllm" if result["facts"]["vllm"] else "transformers"
    result["backend"] = backend
    if backend == "transformers":
        print("vLLM is not importable here: the transformers backend runs instead", flush=True)

    from proctor.trainer.build import build_trainer
    from proctor.trainer.config import GRPOConfig
    from proctor.tiny_model import HEAD_DIM, count_parameters, make_tiny_model

    model_dir = out / "model"
    if not (model_dir / "config.json").exists():
        heads = args.hidden // HEAD_DIM
        make_tiny_model(model_dir, hidden=args.hidden, layers=args.layers, heads=heads, kv_heads=max(1, heads // 4))
    result["params"] = count_parameters(model_dir)
    cfg = GRPOConfig.from_flat(model=str(model_dir), rollout_backend=backend, prompts_per_step=8, group_size=8,
                     max_new_tokens=128, max_steps=args.steps, output_dir=str(out / "run"),
                     mixed_precision="bf16" if gpu else "no", vllm_sleep="on" if (gpu and backend == "vllm") else "off",
                     generation_batch_size=64, micro_batch_size=16)
    t0 = time.perf_counter()
    trainer = build_trainer(cfg)
    result["build_s"] = time.perf_counter() - t0
    if trainer.sleeping:   # what sleeping frees, measured before training starts
        before = free_gib()
        trainer.generator.sleep()
        asleep = free_gib()
        trainer.generator.wake_up()
        result["sleep"] = {"free_gib_awake": before, "free_gib_asleep": asleep, "freed_gib": asleep - before,
                           "free_gib_after_wake": free_gib()}
    rows = trainer.train()
    keys = ("step", "tokens_generated", "tokens_per_s", "time_step_s", "time_generate_s", "time_score_s",
            "time_learn_s", "time_sync_s", "memory_kind", "peak_memory_bytes", "weight_version",
            "sampler_logp_diff_max", "reward_mean")
    result["steps"] = [{k: r.get(k) for k in keys} for r in rows]
    plan = subprocess.run([sys.executable, "-m", "proctor.cli.app", "plan", "--model", str(model_dir),
                           "--algorithm", "grpo", "--precision", "bf16-mixed" if gpu else "fp32", "--json"],
                          capture_output=True, text=True)
    result["plan"] = json.loads(plan.stdout) if plan.returncode == 0 else {"error": plan.stderr[-500:]}
    (out / "gpu_check.json").write_text(json.dumps(result, indent=2, default=str))

    print(f"\n{result['params'] / 1e6:.0f}M parameters, backend {backend}, sleep/wake {'on' if trainer.sleeping else 'off'}")
    if "sleep" in result:
        s = result["sleep"]
        print(f"sleep frees {s['freed_gib']:.2f} GiB (free {s['free_gib_awake']:.2f} -> {s['free_gib_asleep']:.2f}, "
              f"after wake {s['free_gib_after_wake']:.2f})")
    print("| step | tokens | tokens/s | s/step | generate | learn | sync | peak GiB |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in result["steps"]:
        print(f"| {r['step']} | {r['tokens_generated']} | {r['tokens_per_s']:,.0f} | {r['time_step_s']:.2f} | "
              f"{r['time_generate_s'] or 0:.2f} | {r['time_learn_s'] or 0:.2f} | {r['time_sync_s'] or 0:.2f} | "
              f"{r['peak_memory_bytes'] / 2**30:.2f} |")


if __name__ == "__main__":
    main()
