#!/usr/bin/env python3
"""Generation alone, side by side: proctor's ``TransformersGenerator`` vs. the ``generate`` call TRL makes.

Same process, same model object, same 32 prompts (4 Arithmetic-v0 level-1 prompts x 8, chat
format, left-padded), every completion forced to exactly ``--tokens`` new tokens
(``min_new_tokens`` = ``max_new_tokens``: EOS cannot be drawn before the end), temperature 1,
no top-k/top-p/min-p, ``OMP_NUM_THREADS=1``:

  trl      what ``trl.GRPOTrainer._generate_single_turn`` does on its transformers path:
           ``GenerationConfig(max_new_tokens, do_sample=True, pad/bos/eos ids, temperature=1.0, top_p=1.0,
           top_k=0, min_p=None, repetition_penalty=1.0, cache_implementation=None, min_new_tokens,
           disable_compile=True)``, ``model.generate(input_ids, attention_mask, generation_config=...)`` under
           ``torch.no_grad()``, then the completion ids cut at the first EOS, as lists;
  proctor  ``TransformersGenerator(model, tokenizer).generate(prompts, SamplingParams(n=8, ...))``: rollouts
           with their sampler log-probs, texts and finish reasons;
  proctor_plain  the same with ``fast_decode = False`` (transformers' own cache and attention under
           ``no_grad``: what proctor did before the CPU decoding fast paths), with ``--plain``.

The two alternate ``--reps`` times (after one warm-up each); the table gives the median seconds
per call, tokens/s and the ratio. ``--profile`` adds a cProfile of one call of each (top functions
by own time), ``--torch-profile`` a torch.profiler table.

    .venv/bin/python bench/generation_profile.py --tokens 256 --reps 5
    .venv/bin/python bench/generation_profile.py --tokens 256 --reps 2 --profile
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _prompts(tokenizer: Any, count: int) -> list[list[int]]:
    """The first ``count`` prompts of the bench's env, through the chat template (as both trainers do)."""
    import gymnasium as gym

    import proctor.envs  # noqa: F401 - registers the envs
    from proctor.envs.adapters import to_hf_dataset

    env = gym.make("proctor/Arithmetic-v0", level=1, n=2000, prompt_template="What is {expr}?")
    rows = to_hf_dataset(env).select(range(count))
    return [list(tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=True,
                                               return_dict=False)) for r in rows]


def trl_call(model: Any, tokenizer: Any, tokens: int) -> Callable[[list[list[int]], int], Any]:
    """TRL 1.16's transformers generation path, without the trainer around it."""
    import torch
    from transformers import GenerationConfig

    eos = [tokenizer.eos_token_id]
    config = GenerationConfig(max_new_tokens=tokens, do_sample=True, pad_token_id=tokenizer.pad_token_id,
                              bos_token_id=tokenizer.bos_token_id, eos_token_id=eos, temperature=1.0, top_p=1.0,
                              top_k=0, min_p=None, repetition_penalty=1.0, cache_implementation=None,
                              min_new_tokens=tokens, disable_compile=True)

    def call(prompts: list[list[int]], seed: int) -> Any:
        torch.manual_seed(seed)
        width = max(map(len, prompts))
        ids = torch.tensor([[tokenizer.pad_token_id] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, generation_config=config)
        completion = out[:, width:]
        is_eos = torch.isin(completion, torch.tensor(eos))
        eos_idx = torch.full((is_eos.size(0),), is_eos.size(1), dtype=torch.long)
        eos_idx[is_eos.any(1)] = is_eos.int().argmax(1)[is_eos.any(1)]
        keep = torch.arange(is_eos.size(1)).expand(is_eos.size(0), -1) <= eos_idx.unsqueeze(1)
        return [c[m].tolist() for c, m in zip(completion, keep)]
    return call


def proctor_call(model: Any, tokenizer: Any, tokens: int, group: int, fast: bool = True
                 ) -> Callable[[list[list[int]], int], Any]:
    from proctor.trainer.rollout import SamplingParams
    from proctor.trainer.rollout.hf import TransformersGenerator

    gen = TransformersGenerator(model, tokenizer, batch_size=64)
    gen.min_new_tokens = tokens
    gen.fast_decode = fast
    params = SamplingParams(n=group, temperature=1.0, max_new_tokens=tokens)

    def call(prompts: list[list[int]], seed: int) -> Any:
        return gen.generate(prompts[::group], replace(params, seed=seed))
    return call


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--model-steps", type=int, default=800)
    ap.add_argument("--profile", action="store_true", help="cProfile one call of each")
    ap.add_argument("--torch-profile", action="store_true", help="torch.profiler one call of each")
    ap.add_argument("--plain", action="store_true", help="also time proctor with fast_decode off")
    ap.add_argument("--prompt-lengths", choices=("dataset", "varied"), default="dataset",
                    help="the env's first prompts (dataset), or prompts of 4 different lengths "
                         "(varied: a padding mask)")
    ap.add_argument("--only", choices=("trl", "proctor"), help="time one side only")
    ap.add_argument("--json", metavar="PATH")
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from proctor.tiny_model import tiny_model_path

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    path = str(tiny_model_path(pretrain_steps=args.model_steps))
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    if args.prompt_lengths == "varied":
        questions = ["What is 6 - 2?", "What is 13 + 48?", "What is 117 * 3 + 5?", "Compute 7 - 1 + 2 * 9 - 4."]
        base = [list(tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                                   tokenize=True, return_dict=False))
                for q in (questions * args.prompts)[:args.prompts]]
    else:
        base = _prompts(tokenizer, args.prompts)
    prompts = [p for p in base for _ in range(args.group)]
    calls = {"trl": trl_call(model, tokenizer, args.tokens),
             "proctor": proctor_call(model, tokenizer, args.tokens, args.group)}
    if args.plain:
        calls["proctor_plain"] = proctor_call(model, tokenizer, args.tokens, args.group, fast=False)
    if args.only:
        calls = {args.only: calls[args.only]}
    times: dict[str, list[float]] = {k: [] for k in calls}
    for name, call in calls.items():   # warm-up
        call(prompts, 0)
    for rep in range(args.reps):
        order = list(calls) if rep % 2 == 0 else list(calls)[::-1]
        for name in order:
            t0 = time.perf_counter()
            calls[name](prompts, rep + 1)
            times[name].append(time.perf_counter() - t0)
    n_tokens = len(prompts) * args.tokens
    print(f"\n{len(prompts)} sequences x {args.tokens} forced new tokens (prompt lengths "
          f"{sorted({len(p) for p in prompts})}), {args.reps} reps, "
          f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}, load {os.getloadavg()[0]:.2f}")
    med = {k: statistics.median(v) for k, v in times.items()}
    for name, t in med.items():
        print(f"  {name:<8} {t:.3f} s/call (min {min(times[name]):.3f})  {n_tokens / t:,.0f} tokens/s  "
              f"{1000 * t / args.tokens:.2f} ms/decode step")
    for name in med:
        if name != "trl" and "trl" in med:
            print(f"  {name}/trl {med[name] / med['trl']:.3f}x")
    if args.profile:
        for name, call in calls.items():
            prof = cProfile.Profile()
            prof.enable()
            call(prompts, 99)
            prof.disable()
            buf = io.StringIO()
            pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(25)
            print(f"\n===== cProfile {name} (by own time)\n" + buf.getvalue())
    if args.torch_profile:
        from torch.profiler import ProfilerActivity, profile

        for name, call in calls.items():
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                call(prompts, 99)
            print(f"\n===== torch.profiler {name}\n"
                  + prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "times": times, "median": med}, indent=1))


if __name__ == "__main__":
    main()
