#!/usr/bin/env python3
"""proctor's GRPOTrainer vs. TRL's GRPOTrainer on CPU: time per optimizer step and peak memory.

Both trainers run the same job, side by side in one invocation:

* model: the tiny offline model, ``tiny_model_path(pretrain_steps=800)`` (fp32, 3.3 M parameters);
* prompts: ``proctor/Arithmetic-v0`` level 1 (n=2000, ``prompt_template="What is {expr}?"``), chat format;
* each optimizer step: B=4 prompts x G=8 completions = 32 completions, at most 32 new tokens,
  temperature 1.0, one generate call, one forward/backward over the 32 sequences, one optimizer step;
* learning rate 2e-4 (constant), beta 0 (no reference model), loss ``dapo``, one pass per batch
  (num_iterations=1), max_grad_norm 1.0, fp32, no gradient checkpointing, ``OMP_NUM_THREADS=1``.

  trl      ``trl.GRPOTrainer(model=path, reward_funcs=[as_reward_func(env)], train_dataset=to_hf_dataset(env))``
           with a ``trl.GRPOConfig`` set to the job above; a ``TrainerCallback`` timestamps every
           ``on_step_end``; the trainer's ``_generate`` / ``_calculate_rewards`` /
           ``_generate_and_score_completions`` are wrapped with timers (wrappers only, no behaviour change)
           to split a step into generate / score / learn.
  proctor  ``proctor.trainer.build.build_trainer(GRPOConfig.from_flat(...))``, ``.train()``; ``trainer.step`` is wrapped
           to timestamp the end of every step the same way; the split comes from the rows' ``time/*_s``.

s/step is the wall time between consecutive step ends (the first step: from its start), so it holds
everything a step costs in either trainer: data, generation, scoring, loss, backward, optimizer,
the previous step's logging. Step 1 (warm-up) is left out of the mean and median.

Each framework runs in its own subprocess, so its peak RSS (``ru_maxrss`` of that process at its end)
and its imports are its own; the order alternates over ``--rounds`` to spread machine noise. Round r
samples with seed SEED + r in both trainers: what a step costs depends on what was sampled (proctor
leaves rows with zero advantage out of the backward, so a step whose groups carry more signal costs
more), and one seed is one draw of that (measured 2026-12-01: 0.43x-0.83x over seeds 0-3).

Fixed realistic lengths (``--forced-tokens 128 256``): the same job once per length N, every
completion exactly N new tokens in both trainers (``max_new_tokens`` = ``min_new_tokens`` = N:
transformers' ``MinNewTokensLengthLogitsProcessor`` masks the stop token until N tokens, TRL given
it through ``GRPOConfig.generation_kwargs``, proctor through ``TransformersGenerator.min_new_tokens``;
the reward function unchanged). The table per length gives s/step, generation s/step and tokens/s,
learn s/step, peak RSS and proctor/TRL for each (defaults there: 5 steps, 2 rounds).

    .venv/bin/python bench/grpo_vs_trl.py                          # 4 rounds (seeds 0-3), ~2 min on 2 cores
    .venv/bin/python bench/grpo_vs_trl.py --rounds 1 --steps 4     # smoke run
    .venv/bin/python bench/grpo_vs_trl.py --json /tmp/grpo_vs_trl.json
    .venv/bin/python bench/grpo_vs_trl.py --forced-tokens 128 256 --json /tmp/grpo_vs_trl_forced.json

Goal (the issue): proctor at most 0.7x TRL's time per step and no more memory. Exit status 0 either
way; the verdict is printed and in the JSON.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")   # before numpy/torch could read it

import argparse
import datetime as _dt
import json
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Optional
from machine import cpu_model, memory_gib  # bench/machine.py: run as `python bench/...`

FRAMEWORKS = ("trl", "proctor")
ENV_ID = "proctor/Arithmetic-v0"
ENV_KWARGS = {"level": 1, "n": 2000, "prompt_template": "What is {expr}?"}
GOAL_TIME_RATIO = 0.7
GOAL_MEM_RATIO = 1.0


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0   # Linux: KiB


def _now_rss_mib() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return float("nan")


def _norm(row: dict[str, Any]) -> dict[str, Any]:
    """Row keys in underscore style whichever style the trainer logged (``reward/mean`` or ``reward_mean``)."""
    return {str(k).replace("/", "_"): v for k, v in row.items()}


def _num(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and value is not None else float("nan")


# ============================================================================ workers (one per subprocess)
def _load_env() -> Any:
    import gymnasium as gym

    import proctor.envs  # noqa: F401 - registers the envs

    return gym.make(ENV_ID, **ENV_KWARGS)


def run_trl(args: argparse.Namespace, model_path: str, out_dir: str) -> dict[str, Any]:
    import torch
    import trl
    from transformers import TrainerCallback

    from proctor.envs.adapters import as_reward_func, to_hf_dataset

    env = _load_env()
    dataset = to_hf_dataset(env)
    reward = as_reward_func(env)
    config = trl.GRPOConfig(
        output_dir=out_dir,
        per_device_train_batch_size=args.prompts * args.group,   # 32 completions = 4 prompts x 8 per step
        num_generations=args.group,
        gradient_accumulation_steps=1,                             # -> steps_per_generation 1: one generate per step
        max_completion_length=args.max_new_tokens,
        temperature=1.0, top_p=1.0, top_k=0,
        max_steps=args.steps,
        learning_rate=args.lr,
        lr_scheduler_type="constant",                              # proctor: constant (warmup 0); TRL's default decays
        warmup_steps=0,
        weight_decay=0.0,
        max_grad_norm=1.0,
        beta=0.0,
        loss_type="dapo",
        epsilon=0.2, epsilon_high=0.28,                            # proctor's defaults (irrelevant at num_iterations=1)
        num_iterations=1,
        scale_rewards="group",
        use_cpu=True, bf16=False, gradient_checkpointing=False,
        report_to=[], logging_steps=1, save_strategy="no",
        seed=args.seed, dataloader_num_workers=0,
        disable_tqdm=True,
        generation_kwargs={"min_new_tokens": args.min_new_tokens} if args.min_new_tokens else None,
    )
    split = {"generate": 0.0, "score": 0.0, "rollout": 0.0}
    tokens = {"generated": 0}

    class StepClock(TrainerCallback):
        def __init__(self) -> None:
            self.first_begin: Optional[float] = None
            self.begins: list[float] = []
            self.ends: list[float] = []
            self.splits: list[dict[str, float]] = []
            self.rss_after_last_step = float("nan")

        def on_step_begin(self, a, state, control, **kw):  # noqa: ANN001
            now = time.perf_counter()
            self.first_begin = self.first_begin or now
            self.begins.append(now)

        def on_step_end(self, a, state, control, **kw):  # noqa: ANN001
            now = time.perf_counter()
            self.ends.append(now)
            self.splits.append({**split, "inner": now - self.begins[-1], "tokens": tokens["generated"]})
            for k in split:
                split[k] = 0.0
            tokens["generated"] = 0
            self.rss_after_last_step = _peak_rss_mib()

    clock = StepClock()
    t0 = time.perf_counter()
    trainer = trl.GRPOTrainer(model=model_path, reward_funcs=[reward], args=config, train_dataset=dataset,
                              callbacks=[clock])
    init_s = time.perf_counter() - t0

    def timed(name: str, fn: Any, count_tokens: bool = False) -> Any:
        def wrapper(*a: Any, **kw: Any) -> Any:
            start = time.perf_counter()
            out = fn(*a, **kw)
            split[name] += time.perf_counter() - start
            if count_tokens:   # _generate returns (prompt_ids, completion_ids, ...)
                tokens["generated"] += sum(len(c) for c in out[1])
            return out
        return wrapper

    trainer._generate = timed("generate", trainer._generate, count_tokens=True)
    trainer._calculate_rewards = timed("score", trainer._calculate_rewards)
    trainer._generate_and_score_completions = timed("rollout", trainer._generate_and_score_completions)
    rss_before = _peak_rss_mib()
    t0 = time.perf_counter()
    trainer.train()
    train_s = time.perf_counter() - t0

    logs = [r for r in trainer.state.log_history if "reward" in r]
    steps = []
    prev = clock.first_begin
    for i, (end, sp) in enumerate(zip(clock.ends, clock.splits)):
        row = logs[i] if i < len(logs) else {}
        steps.append({
            "step": i + 1,
            "wall_s": end - prev,
            "inner_s": sp["inner"],
            "generate_s": sp["generate"],
            "score_s": sp["score"],
            "rollout_other_s": sp["rollout"] - sp["generate"] - sp["score"],
            "learn_s": sp["inner"] - sp["rollout"],             # forward/backward/clip/optimizer
            "tokens": sp["tokens"],
            "reward": _num(row.get("reward")),
            "completion_len_mean": _num(row.get("completions/mean_length")),
            "zero_signal_frac": _num(row.get("frac_reward_zero_std")),
            "trl_step_time": _num(row.get("step_time")),
        })
        prev = end
    return {
        "framework": "trl", "version": trl.__version__, "torch_threads": torch.get_num_threads(),
        "init_s": init_s, "train_s": train_s, "steps": steps,
        "rss_before_train_mib": rss_before, "peak_rss_after_last_step_mib": clock.rss_after_last_step,
        "resolved": {k: str(getattr(config, k)) for k in ("loss_type", "generation_batch_size", "steps_per_generation",
                                                           "optim", "lr_scheduler_type", "beta", "num_generations",
                                                           "max_completion_length", "temperature")},
        "log_history": trainer.state.log_history,
    }


def run_proctor(args: argparse.Namespace, model_path: str, out_dir: str) -> dict[str, Any]:
    import torch

    from proctor.trainer.build import build_trainer
    from proctor.trainer.config import GRPOConfig

    cfg = GRPOConfig.from_flat(
        model=model_path,
        envs={"arithmetic": {"id": ENV_ID, "kwargs": dict(ENV_KWARGS)}},
        prompts_per_step=args.prompts, group_size=args.group, max_new_tokens=args.max_new_tokens,
        max_steps=args.steps, learning_rate=args.lr, loss_type="dapo", beta=0.0,
        micro_batch_size=args.prompts * args.group, seed=args.seed, output_dir=out_dir,
    )
    t0 = time.perf_counter()
    trainer = build_trainer(cfg)
    init_s = time.perf_counter() - t0
    if args.min_new_tokens:   # the same transformers processor TRL is given (generation_kwargs)
        trainer.generator.min_new_tokens = args.min_new_tokens
    marks: dict[str, Any] = {"first_begin": None, "ends": [], "rss_after_last_step": float("nan")}
    inner_step = trainer.step

    def timed_step(step: int) -> Any:
        marks["first_begin"] = marks["first_begin"] or time.perf_counter()
        row = inner_step(step)
        marks["ends"].append(time.perf_counter())
        marks["rss_after_last_step"] = _peak_rss_mib()
        return row

    trainer.step = timed_step
    rss_before = _peak_rss_mib()
    t0 = time.perf_counter()
    rows = trainer.train()
    train_s = time.perf_counter() - t0

    steps = []
    prev = marks["first_begin"]
    for i, end in enumerate(marks["ends"]):
        row = _norm(rows[i]) if i < len(rows) else {}
        split = {k[len("time_"):]: _num(v) for k, v in row.items() if k.startswith("time_") and k.endswith("_s")}
        inner = split.pop("step_s", float("nan"))
        steps.append({
            "step": i + 1,
            "wall_s": end - prev,
            "inner_s": inner,
            "generate_s": split.get("generate_s", float("nan")),
            "score_s": split.get("score_s", float("nan")),                  # in a thread, overlaps generation
            "score_exposed_s": split.get("score_exposed_s", float("nan")),  # the part generation did not hide
            "learn_s": split.get("learn_s", float("nan")),
            "split": split,
            "tokens": _num(row.get("tokens_generated")),
            "reward": _num(row.get("reward_mean")),
            "completion_len_mean": _num(row.get("completion_len_mean")),
            "zero_signal_frac": _num(row.get("zero_signal_frac")),
        })
        prev = end
    return {
        "framework": "proctor", "torch_threads": torch.get_num_threads(),
        "init_s": init_s, "train_s": train_s, "steps": steps,
        "rss_before_train_mib": rss_before, "peak_rss_after_last_step_mib": marks["rss_after_last_step"],
        "rows": rows,
    }


def worker_main(args: argparse.Namespace) -> None:
    from proctor.tiny_model import tiny_model_path

    model_path = str(tiny_model_path(pretrain_steps=args.model_steps))
    with tempfile.TemporaryDirectory(prefix=f"grpo_vs_trl_{args.worker}_") as out_dir:
        result = (run_trl if args.worker == "trl" else run_proctor)(args, model_path, out_dir)
    result["model"] = model_path
    result["peak_rss_mib"] = _peak_rss_mib()   # the whole process, at its end
    Path(args.result).write_text(json.dumps(result, default=str))


# ============================================================================ the driver
def _machine() -> dict[str, Any]:
    return {"nproc": os.cpu_count(), "cpu": cpu_model() or platform.processor(), "mem_gib": round(memory_gib(), 1), "python": platform.python_version(),
            "platform": platform.platform(), "loadavg_start": os.getloadavg()}


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("torch", "trl", "transformers", "accelerate", "datasets", "proctor"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "-"
    return out


def _run_worker(framework: str, args: argparse.Namespace, work: Path, round_no: int) -> dict[str, Any]:
    work.mkdir(parents=True, exist_ok=True)
    result = work / f"{framework}_{round_no}.json"
    log = work / f"{framework}_{round_no}.log"
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", framework, "--result", str(result),
           "--steps", str(args.steps), "--prompts", str(args.prompts), "--group", str(args.group),
           "--max-new-tokens", str(args.max_new_tokens), "--lr", str(args.lr), "--seed", str(args.seed + round_no),
           "--model-steps", str(args.model_steps), "--min-new-tokens", str(args.min_new_tokens)]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "MKL_NUM_THREADS": str(args.threads),
           "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1", "COLUMNS": "160"}
    print(f"[round {round_no + 1}/{args.rounds}] {framework} ... (load {os.getloadavg()[0]:.2f})",
          file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    with log.open("w") as f:
        rc = subprocess.call(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    wall = time.perf_counter() - t0
    if rc != 0 or not result.exists():
        tail = log.read_text()[-4000:]
        raise SystemExit(f"{framework} worker failed (exit {rc}); its log ends:\n{tail}")
    out = json.loads(result.read_text())
    out["process_wall_s"] = wall
    out["round"] = round_no + 1
    out["log_tail"] = log.read_text()[-3000:]
    print(f"    done in {wall:.1f} s: train {out['train_s']:.1f} s, peak RSS {out['peak_rss_mib']:.0f} MiB",
          file=sys.stderr, flush=True)
    return out


def _mean(xs: list[float]) -> float:
    xs = [x for x in xs if x == x]
    return sum(xs) / len(xs) if xs else float("nan")


def summarize(runs: list[dict[str, Any]], skip: int = 1) -> dict[str, Any]:
    timed = [s for r in runs for s in r["steps"][skip:]]
    walls = [s["wall_s"] for s in timed]
    tokens = [sum(_num(s["tokens"]) for s in r["steps"]) for r in runs]
    summary = {
        "rounds": len(runs),
        "steps_timed": len(walls),
        "s_per_step_median": statistics.median(walls) if walls else float("nan"),
        "s_per_step_mean": _mean(walls),
        "s_per_step_min": min(walls) if walls else float("nan"),
        "s_per_step_max": max(walls) if walls else float("nan"),
        "s_per_step_mean_by_round": [_mean([s["wall_s"] for s in r["steps"][skip:]]) for r in runs],
        "step1_s_mean": _mean([r["steps"][0]["wall_s"] for r in runs if r["steps"]]),
        "peak_rss_mib": max(r["peak_rss_mib"] for r in runs),
        "peak_rss_mib_by_round": [r["peak_rss_mib"] for r in runs],
        "peak_rss_after_last_step_mib": max(r["peak_rss_after_last_step_mib"] for r in runs),
        "rss_before_train_mib": max(r["rss_before_train_mib"] for r in runs),
        "tokens_generated_mean": _mean(tokens),
        "tokens_generated_by_round": tokens,
        "ms_per_token_timed": 1000 * sum(walls) / max(1.0, sum(_num(s["tokens"]) for s in timed)),
        "final_reward_mean": _mean([r["steps"][-1]["reward"] for r in runs if r["steps"]]),
        "reward_mean_all_steps": _mean([s["reward"] for r in runs for s in r["steps"]]),
        "completion_len_mean": _mean([s["completion_len_mean"] for s in timed]),
        "zero_signal_frac_mean": _mean([s["zero_signal_frac"] for r in runs for s in r["steps"]]),
        "init_s_mean": _mean([r["init_s"] for r in runs]),
        "process_wall_s_mean": _mean([r["process_wall_s"] for r in runs]),
    }
    split_keys = sorted({k for s in timed for k in s if k.endswith("_s") and k not in ("wall_s",)})
    summary["split_mean_s"] = {k[:-2]: _mean([_num(s.get(k)) for s in timed]) for k in split_keys}
    gen_s = sum(_num(s["generate_s"]) for s in timed)
    summary["generate_s_per_step"] = summary["split_mean_s"].get("generate", float("nan"))
    summary["learn_s_per_step"] = summary["split_mean_s"].get("learn", float("nan"))
    summary["gen_tokens_per_s"] = sum(_num(s["tokens"]) for s in timed) / gen_s if gen_s > 0 else float("nan")
    summary["tokens_per_step"] = _mean([_num(s["tokens"]) for s in timed])
    return summary


def _fmt(x: float, spec: str = ".3f") -> str:
    return "-" if x != x else format(x, spec)


def print_report(summary: dict[str, dict[str, Any]], args: argparse.Namespace, meta: dict[str, Any]) -> dict[str, Any]:
    t, p = summary["trl"], summary["proctor"]
    ratio = {
        "s_per_step_median": p["s_per_step_median"] / t["s_per_step_median"],
        "s_per_step_mean": p["s_per_step_mean"] / t["s_per_step_mean"],
        "peak_rss": p["peak_rss_mib"] / t["peak_rss_mib"],
        "ms_per_token": p["ms_per_token_timed"] / t["ms_per_token_timed"],
    }
    print(f"\nGRPO on CPU: B={args.prompts} prompts x G={args.group} completions, {args.max_new_tokens} new tokens, "
          f"{args.steps} steps, OMP_NUM_THREADS={args.threads}, {args.rounds} round(s); steps 2..{args.steps} timed")
    print(f"machine: {meta['machine']['nproc']} cores, {meta['machine']['cpu']}, {meta['machine']['mem_gib']} GiB; "
          f"torch {meta['versions']['torch']}, trl {meta['versions']['trl']}, "
          f"transformers {meta['versions']['transformers']}\n")
    rows = [
        ("s/step median", "s_per_step_median", ".3f", "s_per_step_median"),
        ("s/step mean", "s_per_step_mean", ".3f", "s_per_step_mean"),
        ("s/step min / max", None, None, None),
        ("step 1 (warm-up) s", "step1_s_mean", ".2f", None),
        ("peak RSS MiB", "peak_rss_mib", ".0f", "peak_rss"),
        ("  RSS before train MiB", "rss_before_train_mib", ".0f", None),
        ("  peak RSS at last step MiB", "peak_rss_after_last_step_mib", ".0f", None),
        ("tokens generated (per run)", "tokens_generated_mean", ".0f", None),
        ("completion length mean", "completion_len_mean", ".1f", None),
        ("ms per generated token", "ms_per_token_timed", ".2f", "ms_per_token"),
        ("zero-signal groups (frac)", "zero_signal_frac_mean", ".2f", None),
        ("final reward mean", "final_reward_mean", ".3f", None),
        ("reward mean, all steps", "reward_mean_all_steps", ".3f", None),
        ("trainer init s", "init_s_mean", ".2f", None),
        ("process wall s", "process_wall_s_mean", ".1f", None),
    ]
    print(f"| {'':<30} | {'TRL':>10} | {'proctor':>10} | {'proctor/TRL':>11} |")
    print(f"|{'-' * 32}|{'-' * 11}:|{'-' * 11}:|{'-' * 12}:|")
    for label, key, spec, rkey in rows:
        if key is None:
            tv = f"{t['s_per_step_min']:.2f} / {t['s_per_step_max']:.2f}"
            pv = f"{p['s_per_step_min']:.2f} / {p['s_per_step_max']:.2f}"
            print(f"| {label:<30} | {tv:>10} | {pv:>10} | {'':>11} |")
            continue
        r = f"{ratio[rkey]:.2f}x" if rkey else ""
        print(f"| {label:<30} | {_fmt(t[key], spec):>10} | {_fmt(p[key], spec):>10} | {r:>11} |")
    by_round = [f"seed {args.seed + i}: {pm / tm:.2f}x" for i, (tm, pm)
                in enumerate(zip(t["s_per_step_mean_by_round"], p["s_per_step_mean_by_round"]))]
    print("\nproctor/TRL mean s/step by round: " + ", ".join(by_round))
    print("\nwhere a timed step goes (mean s):")
    print("  TRL     " + "  ".join(f"{k} {v:.3f}" for k, v in t["split_mean_s"].items()))
    print("  proctor " + "  ".join(f"{k} {v:.3f}" for k, v in p["split_mean_s"].items()))
    print("  (TRL: inner = on_step_begin..on_step_end; learn = inner - rollout; proctor: inner = time/step_s; "
          "score runs in a thread, score_exposed is what generation did not hide)")
    time_ok = ratio["s_per_step_median"] <= GOAL_TIME_RATIO
    mem_ok = ratio["peak_rss"] <= GOAL_MEM_RATIO
    print(f"\ngoal: proctor/TRL s/step <= {GOAL_TIME_RATIO} -> {ratio['s_per_step_median']:.2f} "
          f"({'met' if time_ok else 'MISSED'}); peak RSS <= TRL -> {ratio['peak_rss']:.2f} "
          f"({'met' if mem_ok else 'MISSED'})")
    return {"ratio": ratio, "goal": {"time_ratio_max": GOAL_TIME_RATIO, "time_met": time_ok,
                                     "mem_ratio_max": GOAL_MEM_RATIO, "mem_met": mem_ok}}


FORCED_ROWS = (   # label, summary key, format, whether a proctor/TRL ratio is shown
    ("s/step mean", "s_per_step_mean", ".3f", True),
    ("s/step median", "s_per_step_median", ".3f", True),
    ("generation s/step", "generate_s_per_step", ".3f", True),
    ("generation tokens/s", "gen_tokens_per_s", ",.0f", True),
    ("learn s/step", "learn_s_per_step", ".3f", True),
    ("peak RSS MiB", "peak_rss_mib", ".0f", True),
    ("tokens per step", "tokens_per_step", ".0f", False),
    ("zero-signal groups (frac)", "zero_signal_frac_mean", ".2f", False),
)


def print_forced_report(summaries: dict[int, dict[str, dict[str, Any]]], args: argparse.Namespace,
                        meta: dict[str, Any]) -> dict[str, Any]:
    """One table per forced length; the goal: s/step <= GOAL_TIME_RATIO x TRL's, generation no slower."""
    print(f"\nGRPO on CPU, fixed lengths: B={args.prompts} prompts x G={args.group} completions, every one exactly "
          f"N new tokens, {args.steps} steps, OMP_NUM_THREADS={args.threads}, {args.rounds} round(s); "
          f"steps 2..{args.steps} timed")
    print(f"machine: {meta['machine']['nproc']} cores, {meta['machine']['cpu']}, {meta['machine']['mem_gib']} GiB; "
          f"torch {meta['versions']['torch']}, trl {meta['versions']['trl']}, "
          f"transformers {meta['versions']['transformers']}")
    verdicts: dict[int, Any] = {}
    for n, summary in summaries.items():
        t, p = summary["trl"], summary["proctor"]
        print(f"\nN = {n} forced new tokens\n")
        print(f"| {'':<26} | {'TRL':>10} | {'proctor':>10} | {'proctor/TRL':>11} |")
        print(f"|{'-' * 28}|{'-' * 11}:|{'-' * 11}:|{'-' * 12}:|")
        ratio = {}
        for label, key, spec, show in FORCED_ROWS:
            ratio[key] = p[key] / t[key] if t[key] else float("nan")
            r = f"{ratio[key]:.2f}x" if show else ""
            print(f"| {label:<26} | {_fmt(t[key], spec):>10} | {_fmt(p[key], spec):>10} | {r:>11} |")
        by_round = [f"seed {args.seed + i}: {pm / tm:.2f}x" for i, (tm, pm)
                    in enumerate(zip(t["s_per_step_mean_by_round"], p["s_per_step_mean_by_round"]))]
        print("\nproctor/TRL mean s/step by round: " + ", ".join(by_round))
        time_ok = ratio["s_per_step_mean"] <= GOAL_TIME_RATIO
        gen_ok = ratio["generate_s_per_step"] <= 1.0
        print(f"goal: s/step <= {GOAL_TIME_RATIO}x TRL -> {ratio['s_per_step_mean']:.2f}x "
              f"({'met' if time_ok else 'MISSED'}); generation no slower -> {ratio['generate_s_per_step']:.2f}x "
              f"({'met' if gen_ok else 'MISSED'})")
        verdicts[n] = {"ratio": ratio, "time_met": time_ok, "generation_met": gen_ok}
    return {"goal": {"time_ratio_max": GOAL_TIME_RATIO, "generation_ratio_max": 1.0}, "by_length": verdicts}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, help="optimizer steps per run (10; with --forced-tokens 5)")
    ap.add_argument("--rounds", type=int,
                    help="runs per framework, order alternating, round r with seed SEED + r for both "
                         "(4; with --forced-tokens 2)")
    ap.add_argument("--forced-tokens", type=int, nargs="+", metavar="N",
                    help="fixed lengths: one job per N, every completion exactly N new tokens in both trainers")
    ap.add_argument("--json", metavar="PATH", help="write config, machine, every step and the summary here")
    ap.add_argument("--prompts", type=int, default=4, help="prompts per step, B (4)")
    ap.add_argument("--group", type=int, default=8, help="completions per prompt, G (8)")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--seed", type=int, default=0, help="round r uses SEED + r (0)")
    ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of the workers (1)")
    ap.add_argument("--model-steps", type=int, default=800, help="tiny model's pretraining steps (800, cached)")
    ap.add_argument("--min-new-tokens", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--worker", choices=FRAMEWORKS, help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker_main(args)
        return
    forced = bool(args.forced_tokens)
    args.steps = args.steps if args.steps is not None else (5 if forced else 10)
    args.rounds = args.rounds if args.rounds is not None else (2 if forced else 4)
    if args.steps < 2:
        ap.error("--steps must be >= 2: step 1 is warm-up and not timed")

    meta = {"date": _dt.datetime.now().astimezone().isoformat(timespec="seconds"), "machine": _machine(),
            "versions": _versions(), "args": vars(args), "env": {"id": ENV_ID, "kwargs": ENV_KWARGS}}
    if forced:
        main_forced(args, meta)
        return
    runs: dict[str, list[dict[str, Any]]] = {f: [] for f in FRAMEWORKS}
    with tempfile.TemporaryDirectory(prefix="grpo_vs_trl_") as tmp:
        for r in range(args.rounds):
            order = FRAMEWORKS if r % 2 == 0 else FRAMEWORKS[::-1]
            for framework in order:
                runs[framework].append(_run_worker(framework, args, Path(tmp), r))
    meta["machine"]["loadavg_end"] = os.getloadavg()
    summary = {f: summarize(runs[f]) for f in FRAMEWORKS}
    verdict = print_report(summary, args, meta)
    if args.json:
        Path(args.json).write_text(json.dumps({**meta, "summary": summary, **verdict, "runs": runs},
                                              indent=1, default=str))
        print(f"\nwrote {args.json}", file=sys.stderr)


def main_forced(args: argparse.Namespace, meta: dict[str, Any]) -> None:
    """Every length N in --forced-tokens: the job with max_new_tokens = min_new_tokens = N, rounds alternating."""
    runs: dict[int, dict[str, list[dict[str, Any]]]] = {}
    with tempfile.TemporaryDirectory(prefix="grpo_vs_trl_") as tmp:
        for n in args.forced_tokens:
            runs[n] = {f: [] for f in FRAMEWORKS}
            job = argparse.Namespace(**{**vars(args), "max_new_tokens": n, "min_new_tokens": n})
            print(f"== {n} forced new tokens", file=sys.stderr, flush=True)
            for r in range(args.rounds):
                order = FRAMEWORKS if r % 2 == 0 else FRAMEWORKS[::-1]
                for framework in order:
                    runs[n][framework].append(_run_worker(framework, job, Path(tmp) / str(n), r))
    meta["machine"]["loadavg_end"] = os.getloadavg()
    summaries = {n: {f: summarize(runs[n][f]) for f in FRAMEWORKS} for n in runs}
    verdict = print_forced_report(summaries, args, meta)
    if args.json:
        Path(args.json).write_text(json.dumps({**meta, "mode": "forced_tokens", "summary": summaries, **verdict,
                                               "runs": runs}, indent=1, default=str))
        print(f"\nwrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
