#!/usr/bin/env python3
"""Learner peak memory of one log-prob forward + backward: proctor's ``token_logps`` before and
after the chunked rewrite, beside TRL's two recipes, on the same batch.

Model: a random-weight Qwen2 (1 layer, hidden 64) with a big vocabulary, built here from a
config (no hub), so the logits dominate everything else. Batch: rollouts of random tokens with
prompts and completions of different lengths, padded by ``build_batch`` as the trainer does;
row 0 has the longest prompt and the longest completion, so TRL's layout (prompts left-padded,
completions right-padded) has the same width L. Temperature 0.7. The loss is the policy term
``sum(logp * mask * advantage) / tokens`` (plus ``0.01 * mean entropy`` where the entropy is in the loss).

  old            the previous ``token_logps``: logits at every position, ``.float()``, ``/ T``,
                 ``log_softmax``, gather; entropy with grad (as the trainer called it).
  new            ``token_logps(..., with_entropy=True)``: logits only from the first completion
                 column (``logits_to_keep``), chunked fp32 log-softmax, gradient written over the
                 logits; the entropy a metric (``entropy_grad=False``).
  new+entropy    the same with ``entropy_grad=True`` and the entropy in the loss.
  trl-selective  TRL's ``_get_per_token_logps_and_entropies`` recipe before its fused head
                 (trl <= 0.2x), rebuilt from TRL's own functions: ``logits_to_keep = C + 1``,
                 ``[:, :-1]``, ``[:, -C:]``, ``/ T``, ``trl.trainer.utils.selective_log_softmax``,
                 entropy by ``entropy_from_logits`` under ``no_grad``.
  trl-fused      what the installed TRL's ``GRPOTrainer`` runs: ``add_fused_lm_head(model, T,
                 outputs=("log_probs", "entropy"))`` and ``model(..., labels, fused_lm_head=True)``
                 with the labels of TRL's ``_get_per_token_logps_and_entropies``. On a CPU it takes
                 TRL's torch fallback (no Triton): every position scored, tiles of 4096 tokens x 32768
                 vocabulary entries. Its GPU kernels score only completion positions; not measured here.
  calibration    no model: one fp32 [B, L, V] tensor filled with ones. Checks the method (expect 1.00).

How peak memory is measured: each variant runs in a fresh process with
``MALLOC_MMAP_THRESHOLD_=65536`` (glibc then serves every buffer above 64 KiB with its own mmap
and returns it to the kernel on free, so resident memory follows the live tensors) and
``OMP_NUM_THREADS=1``. After one warm-up step (parameters' ``.grad`` exist, lazy set-up done),
the process writes ``5`` to ``/proc/self/clear_refs`` (the kernel resets the peak resident set
``VmHWM`` to the current one), runs forward + loss + backward, and reports ``VmHWM - VmRSS``
before the step: the bytes the step added at its worst moment, as the kernel counted pages.

    .venv/bin/python bench/logp_memory.py                 # both shapes, ~1-2 min on 2 cores
    .venv/bin/python bench/logp_memory.py --shape qwen-vocab --json /tmp/logp.json

Goal (issue 11): ``new`` at most 1.5x one fp32 [B, L, V] logits tensor, and at or below TRL's.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import contextlib
import gc
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, ContextManager

from machine import cpu_model, memory_gib  # bench/machine.py: run as `python bench/...`

TEMPERATURE = 0.7
ENTROPY_COEF = 0.01
GOAL_RATIO = 1.5
VARIANTS = ("calibration", "old", "new", "new+entropy", "trl-selective", "trl-fused", "old@bf16-mixed",
            "new@bf16-mixed")


@dataclass(frozen=True)
class Shape:
    vocab: int
    hidden: int
    rows: int
    prompt: tuple[int, int]        # shortest, longest prompt
    completion: tuple[int, int]    # shortest, longest completion

    @classmethod
    def from_dict(cls, d: dict) -> "Shape":
        return cls(d["vocab"], d["hidden"], d["rows"], tuple(d["prompt"]), tuple(d["completion"]))

    @property
    def width(self) -> int:
        return self.prompt[1] + self.completion[1]

    def logits_bytes(self) -> int:
        """One fp32 [B, L, V] logits tensor: the unit of the table."""
        return 4 * self.rows * self.width * self.vocab


SHAPES = {
    "32k-vocab": Shape(vocab=32768, hidden=64, rows=8, prompt=(48, 96), completion=(64, 160)),
    "qwen-vocab": Shape(vocab=151936, hidden=64, rows=2, prompt=(48, 96), completion=(64, 160)),
}


# ------------------------------------------------------------------------------------ worker side
def _rollouts(shape: Shape, seed: int = 0) -> list:
    import torch

    from proctor.trainer.rollout import Rollout

    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(shape.rows):
        # Row 0 has the longest prompt and completion; the others spread over both ranges.
        p = shape.prompt[1] - i * (shape.prompt[1] - shape.prompt[0]) // max(shape.rows - 1, 1)
        c = shape.completion[1] - (i * 37) % shape.rows * (shape.completion[1] - shape.completion[0]) \
            // max(shape.rows - 1, 1)
        ids = torch.randint(0, shape.vocab, (p + c,), generator=g).tolist()
        out.append(Rollout(prompt_ids=tuple(ids[:p]), completion_ids=tuple(ids[p:]), logprobs=(0.0,) * c,
                           text="", finish_reason="stop"))
    return out


def _config(shape: Shape):
    from transformers import Qwen2Config

    return Qwen2Config(vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=2 * shape.hidden,
                       num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False)


def _model(shape: Shape):
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(_config(shape), dtype=torch.float32)


def _old_token_logps(model, batch, temperature: float):
    """The previous ``token_logps``, verbatim apart from the name (with_entropy=True)."""
    import torch

    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1].float()
    logits = logits / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, batch.targets.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def _trl_layout(rollouts: list, shape: Shape):
    """TRL's batch: prompts left-padded to the longest, completions right-padded after them."""
    import torch

    p_max, c_max = shape.prompt[1], shape.completion[1]
    ids = torch.zeros((len(rollouts), p_max + c_max), dtype=torch.long)
    attn = torch.zeros_like(ids)
    completion_mask = torch.zeros((len(rollouts), c_max))
    for i, r in enumerate(rollouts):
        p, c = len(r.prompt_ids), len(r.completion_ids)
        ids[i, p_max - p:p_max] = torch.tensor(r.prompt_ids)
        ids[i, p_max:p_max + c] = torch.tensor(r.completion_ids)
        attn[i, p_max - p:p_max + c] = 1
        completion_mask[i, :c] = 1
    return ids, attn, completion_mask


def _policy_loss(logp, mask, adv, entropy=None):
    loss = (logp * mask * adv[:, None]).sum() / mask.sum()
    return loss if entropy is None else loss - ENTROPY_COEF * (entropy * mask).sum() / mask.sum()


def _step_fn(variant: str, shape: Shape) -> Callable[[], object]:
    """A closure running one forward + loss + backward of ``variant`` (model and batch built here)."""
    import torch

    from proctor.trainer.batch import build_batch, token_logps

    rollouts = _rollouts(shape)
    adv = torch.tensor([1.0 if i % 2 else -1.0 for i in range(shape.rows)])
    if variant == "calibration":
        return lambda: torch.ones((shape.rows, shape.width, shape.vocab))
    model = _model(shape)
    batch = build_batch(rollouts, adv.tolist(), [True] * shape.rows, pad_id=0)
    assert batch.input_ids.shape[1] == shape.width
    name, _, precision = variant.partition("@")
    autocast: Callable[[], ContextManager] = contextlib.nullcontext
    if precision == "bf16-mixed":     # as the trainer runs it: accelerate's autocast and fp32 outputs
        from accelerate import Accelerator

        accelerator = Accelerator(mixed_precision="bf16", cpu=True)
        model, autocast = accelerator.prepare(model), accelerator.autocast
    if name == "old":
        def run():
            with autocast():
                logp, _ = _old_token_logps(model, batch, TEMPERATURE)
            _policy_loss(logp, batch.mask, adv).backward()
    elif name in ("new", "new+entropy"):
        in_loss = name == "new+entropy"

        def run():
            with autocast():
                logp, entropy = token_logps(model, batch, TEMPERATURE, with_entropy=True, entropy_grad=in_loss)
            _policy_loss(logp, batch.mask, adv, entropy if in_loss else None).backward()
    else:
        run = _trl_step(variant, model, rollouts, shape, adv)
    return run


def _trl_step(variant: str, model, rollouts: list, shape: Shape, adv) -> Callable[[], None]:
    import torch
    from trl.trainer.utils import add_fused_lm_head, entropy_from_logits, selective_log_softmax

    ids, attn, cmask = _trl_layout(rollouts, shape)
    keep = cmask.shape[1]
    if variant == "trl-selective":
        def run():
            logits = model(input_ids=ids, attention_mask=attn, logits_to_keep=keep + 1).logits
            logits = logits[:, :-1, :][:, -keep:, :] / TEMPERATURE
            logp = selective_log_softmax(logits, ids[:, -keep:])
            with torch.no_grad():
                entropy_from_logits(logits)
            _policy_loss(logp, cmask, adv).backward()
        return run
    add_fused_lm_head(model, temperature=TEMPERATURE, outputs=("log_probs", "entropy"))
    labels = ids.masked_fill(attn == 0, -100)
    labels[:, :-keep] = -100

    def run_fused():
        out = model(input_ids=ids, attention_mask=attn, labels=labels, fused_lm_head=True)
        _policy_loss(out.log_probs[:, -keep:], cmask, adv).backward()
    return run_fused


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith(field + ":"))


def worker(variant: str, shape: Shape) -> dict:
    run = _step_fn(variant, shape)
    run()                                             # warm-up: .grad buffers, lazy initialisation
    gc.collect()
    before = _status_kib("VmRSS")
    with open("/proc/self/clear_refs", "w") as fh:    # VmHWM := VmRSS now
        fh.write("5")
    t0 = time.perf_counter()
    run()
    seconds = time.perf_counter() - t0
    peak = _status_kib("VmHWM") - before
    return {"variant": variant, "peak_bytes": peak * 1024, "seconds": seconds, "config": _config(shape).to_dict()}


# ------------------------------------------------------------------------------------ driver side
def measure(variant: str, shape_name: str) -> dict:
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, __file__, "--worker", variant, "--shape", shape_name],
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"{variant} on {shape_name} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def table(shape_name: str, rows: list[dict]) -> tuple[str, dict]:
    shape = SHAPES[shape_name]
    unit = shape.logits_bytes()
    trl_best = min(r["peak_bytes"] for r in rows if r["variant"].startswith("trl"))
    lines = [f"{shape_name}: B={shape.rows} L={shape.width} V={shape.vocab} hidden={shape.hidden}; prompts "
             f"{shape.prompt[0]}-{shape.prompt[1]}, completions {shape.completion[0]}-{shape.completion[1]} tokens; "
             f"one fp32 [B, L, V] = {unit / 2**20:.1f} MiB",
             f"| variant | peak MiB | x fp32 [B, L, V] | x best TRL | step s |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['variant']} | {r['peak_bytes'] / 2**20:.1f} | {r['peak_bytes'] / unit:.2f} | "
                     f"{r['peak_bytes'] / trl_best:.2f} | {r['seconds']:.2f} |")
    new = next(r for r in rows if r["variant"] == "new")["peak_bytes"]
    verdict = {"shape": shape_name, "new_ratio": new / unit, "new_vs_best_trl": new / trl_best,
               "goal_met": new / unit <= GOAL_RATIO and new <= trl_best}
    return "\n".join(lines), verdict


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), action="append")
    ap.add_argument("--worker", choices=VARIANTS, help=argparse.SUPPRESS)
    ap.add_argument("--shape-json", help="with --worker: a Shape's fields as JSON instead of --shape")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.worker:
        shape = Shape.from_dict(json.loads(args.shape_json)) if args.shape_json else SHAPES[args.shape[0]]
        print(json.dumps(worker(args.worker, shape)))
        return 0
    print(f"machine: {cpu_model()}, {memory_gib():.0f} GiB; OMP_NUM_THREADS=1, MALLOC_MMAP_THRESHOLD_=65536")
    results = []
    for name in args.shape or sorted(SHAPES):
        rows = [measure(v, name) for v in VARIANTS]
        text, verdict = table(name, rows)
        print(text)
        print(f"goal (new <= {GOAL_RATIO}x and <= best TRL): {'met' if verdict['goal_met'] else 'NOT met'}\n")
        results.append({"shape": asdict(SHAPES[name]), "rows": rows, **verdict})
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
