"""The GPU check of the trainer issues, for a lent GPU machine (one short run per setting).

Makes a model of a real small-LLM shape (default Qwen2.5-0.5B: hidden 896, 24 layers, 14
heads, 2 KV heads, MLP 4864, vocabulary 151,936; ``--shape 1.5b`` for Qwen2.5-1.5B) with
random weights (no hub there) and the tiny model's tokenizer, then runs 4 GRPO steps with
gradient checkpointing off and on, each in its own process (clean CUDA peak counters),
with the colocated vLLM engine and sleep/wake when vLLM is there (else the transformers
backend, and it says so). Records per setting:

* what the machine has (torch, CUDA, vLLM);
* per step: peak allocated memory, tokens/s, the time split (generate, score, learn, sync);
* `proctor plan -c run.yaml` for the same run config beside the measured peak.

    python bench/gpu_check.py --out DIR [--steps 4] [--shape 0.5b|1.5b]
    python bench/gpu_check.py --out /tmp/x --cpu --shape cpu-check     # the same path on CPU, small

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

SHAPES = {   # hidden, layers, heads, kv_heads, intermediate, vocab
    "0.5b": (896, 24, 14, 2, 4864, 151936),
    "1.5b": (1536, 28, 12, 2, 8960, 151936),
    "cpu-check": (256, 2, 4, 2, 768, 8192),
}


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


def make_shaped_model(out: Path, shape: str) -> Path:
    """A random-weight model of ``shape`` with the tiny model's tokenizer (its ids are a prefix)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from proctor.tiny_model import tiny_model_path

    model_dir = out / f"model-{shape}"
    if (model_dir / "config.json").exists():
        return model_dir
    tiny = tiny_model_path(pretrain_steps=0)
    hidden, layers, heads, kv_heads, inter, vocab = SHAPES[shape]
    config = AutoConfig.from_pretrained(tiny)
    config.update(dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                       num_key_value_heads=kv_heads, intermediate_size=inter, vocab_size=vocab,
                       head_dim=hidden // heads, max_position_embeddings=4096,
                       layer_types=["full_attention"] * layers))
    AutoModelForCausalLM.from_config(config).save_pretrained(model_dir, safe_serialization=True)
    AutoTokenizer.from_pretrained(tiny).save_pretrained(model_dir)
    return model_dir


def digit_share(prompts, completions, **columns):
    """A dense reward beside the arithmetic env, so random weights still give groups with
    signal and the learner runs (a memory check that skipped every row would measure nothing)."""
    texts = [c if isinstance(c, str) else c[-1]["content"] for c in completions]
    return [sum(ch.isalnum() for ch in t) / max(1, len(t)) for t in texts]


def run_config(model_dir: Path, out: Path, backend: str, gpu: bool, checkpointing: bool, steps: int) -> dict:
    return {
        "model": str(model_dir), "max_steps": steps, "output_dir": str(out),
        "data": {"prompts_per_step": 8, "reward_funcs": [f"{Path(__file__).resolve()}:digit_share"]},
        "rollout": {"backend": backend, "group_size": 8, "max_new_tokens": 256, "generation_batch_size": 64,
                    "vllm": {"sleep": "on" if (gpu and backend == "vllm") else "off"}},
        "optim": {"micro_batch_size": 8, "mixed_precision": "bf16" if gpu else "no",
                  "gradient_checkpointing": checkpointing},
    }


def one_setting(args: argparse.Namespace) -> None:
    """In a fresh process: train ``args.steps`` steps of one setting; write its JSON."""
    import yaml

    from proctor.trainer.build import build_trainer
    from proctor.trainer.config import GRPOConfig

    out = Path(args.out) / f"ckpt-{args.one}"
    out.mkdir(parents=True, exist_ok=True)
    data = json.loads(Path(args.config).read_text())
    (out / "run.yaml").write_text(yaml.safe_dump(data))
    t0 = time.perf_counter()
    trainer = build_trainer(GRPOConfig.from_dict(data, where=str(out / "run.yaml")))
    build_s = time.perf_counter() - t0
    rows = trainer.train()
    keys = ("step", "tokens_generated", "tokens_per_s", "time_step_s", "time_generate_s", "time_learn_s",
            "time_sync_s", "memory_kind", "peak_memory_bytes", "completion_len_mean")
    prompt_len = 32   # the arithmetic prompts through the chat template: about this many tokens
    plan = subprocess.run([sys.executable, "-m", "proctor.cli.app", "plan", "-c", str(out / "run.yaml"),
                           "--algorithm", "grpo", "--prompt-len", str(prompt_len), "--json"],
                          capture_output=True, text=True)
    result = {"build_s": build_s, "steps": [{k: r.get(k) for k in keys} for r in rows],
              "plan": json.loads(plan.stdout) if plan.returncode == 0 else {"error": plan.stderr[-800:]}}
    (out / "result.json").write_text(json.dumps(result, indent=2, default=str))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--shape", choices=sorted(SHAPES), default="0.5b")
    ap.add_argument("--cpu", action="store_true", help="run the same path on CPU (a check of this script)")
    ap.add_argument("--one", choices=["on", "off"], help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        return one_setting(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result: dict = {"facts": facts(), "shape": args.shape}
    print(json.dumps(result["facts"], indent=2), flush=True)
    gpu = result["facts"]["cuda"] and not args.cpu
    backend = "vllm" if result["facts"]["vllm"] and gpu else "transformers"
    result["backend"] = backend
    model_dir = make_shaped_model(out, args.shape)
    from proctor.tiny_model import count_parameters

    result["params"] = count_parameters(model_dir)
    for setting in ("off", "on"):
        config = out / f"config-{setting}.json"
        config.write_text(json.dumps(run_config(model_dir, out / f"ckpt-{setting}" / "run", backend, gpu,
                                                setting == "on", args.steps)))
        done = subprocess.run([sys.executable, __file__, "--out", str(out), "--one", setting, "--config", str(config)])
        path = out / f"ckpt-{setting}" / "result.json"
        result[setting] = json.loads(path.read_text()) if path.exists() else {"error": f"exit {done.returncode}"}
    (out / "gpu_check.json").write_text(json.dumps(result, indent=2, default=str))
    report(result)


def report(result: dict) -> None:
    print(f"\n{result['params'] / 1e6:.0f}M parameters ({result['shape']} shape), backend {result['backend']}")
    print("| checkpointing | step | tokens | tokens/s | s/step | learn s | peak GiB | plan GiB (grpo) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for setting in ("off", "on"):
        res = result[setting]
        if "steps" not in res:
            print(f"| {setting} | failed: {res} |")
            continue
        planned = res.get("plan", {}).get("grpo", {}).get("per_gpu_bytes")
        for r in res["steps"]:
            print(f"| {setting} | {r['step']} | {r['tokens_generated']} | {r['tokens_per_s'] or 0:,.0f} | "
                  f"{r['time_step_s']:.2f} | {r['time_learn_s'] or 0:.2f} | {r['peak_memory_bytes'] / 2**30:.2f} | "
                  f"{planned / 2**30 if planned else float('nan'):.2f} |")


if __name__ == "__main__":
    main()
