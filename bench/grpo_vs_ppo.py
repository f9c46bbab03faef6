"""GRPO beside PPO on the same env and prompts: measured, next to what `proctor plan` predicts.

One run of each algorithm in its own process (so peak RSS is its own), the tiny model on CPU,
equal prompts per step. Reported: seconds per step, peak RSS, training-state bytes actually
held (parameters + gradients + optimizer state, actor and critic), rollout tokens per step,
and the planner's training-state bytes and rollout tokens for the same settings.

    .venv/bin/python bench/grpo_vs_ppo.py [--steps 8] [--prompts 8] [--group 8] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile

os.environ.setdefault("OMP_NUM_THREADS", "1")

MODEL_STEPS = 800


def _state_bytes(modules_and_optimizers) -> int:
    import torch

    total = 0
    for module, optimizer in modules_and_optimizers:
        for p in module.parameters():
            if p.requires_grad:
                total += p.numel() * p.element_size()
                total += p.numel() * p.element_size()   # its gradient (fp32 here, the same size)
        for state in optimizer.state.values():
            total += sum(t.numel() * t.element_size() for t in state.values() if torch.is_tensor(t) and t.dim() > 0)
    return total


def child(algorithm: str, steps: int, prompts: int, group: int) -> dict:
    from proctor.trainer.build import build_trainer
    from proctor.trainer.config import GRPOConfig

    with tempfile.TemporaryDirectory() as out:
        cfg = GRPOConfig.from_flat(model=f"tiny:{MODEL_STEPS}", algorithm=algorithm, prompts_per_step=prompts,
                         group_size=group if algorithm == "grpo" else 1, max_new_tokens=8, max_steps=steps,
                         output_dir=out, log_every=10**6)
        trainer = build_trainer(cfg)
        rows = trainer.train()
        pairs = [(trainer.model, trainer.optimizer.optimizer)]
        if algorithm == "ppo":
            pairs.append((trainer.critic, trainer.critic_optimizer.optimizer))
        timed = rows[1:] or rows
        return {
            "algorithm": algorithm,
            "s_per_step": sum(r["time_step_s"] for r in timed) / len(timed),
            "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "training_state_bytes": _state_bytes(pairs),
            "rollouts_per_step": prompts * (group if algorithm == "grpo" else 1),
            "tokens_per_step": sum(r["tokens_generated"] for r in rows) / len(rows),
            "completion_len_mean": sum(r["completion_len_mean"] for r in rows) / len(rows),
            "reward_mean": sum(r["reward_mean"] for r in rows) / len(rows),
            "model_path": str(trainer.accelerator.unwrap_model(trainer.model).name_or_path),
        }


def predicted(model_path: str, prompts: int, group: int, completion_len: float) -> dict:
    from proctor.plan import PlanInput, plan

    result = plan(PlanInput(model=model_path, algorithm="both", precision="fp32", optimizer="adamw", kl=False,
                            group_size=group, batch_size=prompts, prompt_len=16,
                            completion_len=max(1, round(completion_len)), gradient_checkpointing=False))
    return {name: {"training_state_bytes": a.training_state_bytes, "rollout_tokens_per_step": a.rollout_tokens_per_step,
                   "total_bytes": a.total_bytes}
            for name, a in result.algorithms.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--json", default=None)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.steps, args.prompts, args.group)))
        return
    runs = {}
    for algorithm in ("grpo", "ppo"):
        proc = subprocess.run([sys.executable, __file__, "--child", algorithm, "--steps", str(args.steps),
                               "--prompts", str(args.prompts), "--group", str(args.group)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"{algorithm} run failed:\n{proc.stderr[-3000:]}")
        runs[algorithm] = json.loads(proc.stdout.strip().splitlines()[-1])
    plans = {a: predicted(runs[a]["model_path"], args.prompts, args.group, runs[a]["completion_len_mean"])[a]
             for a in runs}
    mib = lambda b: f"{b / 2**20:,.1f} MiB"  # noqa: E731
    print(f"GRPO vs PPO on CPU: tiny model (pretrained {MODEL_STEPS} steps), {args.prompts} prompts/step, "
          f"GRPO G={args.group}, PPO 1 sample/prompt, {args.steps} steps, fp32 AdamW, OMP_NUM_THREADS=1\n")
    header = f"| {'':38} | {'GRPO':>16} | {'PPO':>16} | {'PPO / GRPO':>10} |"
    print(header)
    print("|" + "-" * 40 + "|" + "-" * 18 + "|" + "-" * 18 + "|" + "-" * 12 + "|")
    lines = [
        ("s/step (steps 2..)", "s_per_step", lambda v: f"{v:.3f}"),
        ("peak RSS", "peak_rss_bytes", mib),
        ("training state held (measured)", "training_state_bytes", mib),
        ("rollouts per step", "rollouts_per_step", lambda v: f"{v:,}"),
        ("rollout tokens per step (measured)", "tokens_per_step", lambda v: f"{v:,.0f}"),
    ]
    for label, key, fmt in lines:
        g, p = runs["grpo"][key], runs["ppo"][key]
        print(f"| {label:38} | {fmt(g):>16} | {fmt(p):>16} | {p / g if g else float('nan'):>9.2f}x |")
    for label, key, fmt in (("training state (proctor plan)", "training_state_bytes", mib),
                            ("rollout tokens per step (proctor plan)", "rollout_tokens_per_step", lambda v: f"{v:,}")):
        g, p = plans["grpo"][key], plans["ppo"][key]
        print(f"| {label:38} | {fmt(g):>16} | {fmt(p):>16} | {p / g if g else float('nan'):>9.2f}x |")
    for a in ("grpo", "ppo"):
        ratio = runs[a]["training_state_bytes"] / plans[a]["training_state_bytes"]
        print(f"\n{a}: measured / planned training state = {ratio:.4f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "plans": plans, "args": vars(args)}, f, indent=2)


if __name__ == "__main__":
    main()
