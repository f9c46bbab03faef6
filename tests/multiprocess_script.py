"""Run by tests/test_resume_multiprocess.py and tests/test_fsdp_cpu.py under
`torchrun --nproc_per_node 2` on CPU (gloo). Each rank writes, per run, the task ids its
PromptDrawer drew (step by step) and its final weights, for the test to compare.

  resume OUT   three runs in turn: 3 steps straight (OUT/straight); 2 steps (OUT/split);
               the same directory resumed for step 3. Pass-rate memory skipping is on (every
               group solved, 5 tasks), so the drawer's RNGs and its memory both matter.
  fsdp OUT     3 steps unsharded (data parallel, OUT/ddp), then 3 steps with the policy
               sharded by FSDP2 (OUT/fsdp): generation and updates on sharded parameters,
               2 steps, a sharded checkpoint, and the third step after a resume.
  fsdp-server OUT URL   2 sharded steps sampling from the `proctor serve` at URL, which only
               rank 0 pushes the gathered weights to.
  decide-ddp OUT   2 steps, data parallel, where only rank 0's verifier fails (infra errors):
               every process must skip the same steps, or one waits in the all-reduce forever.
  decide-fsdp OUT  2 steps with the policy sharded by FSDP2, DAPO dynamic sampling where only
               rank 0's groups lack signal (so only it would resample), and an evaluation after
               every step (generation on a sharded model is a collective: every rank joins).
  decide-zero3 OUT 2 steps under DeepSpeed ZeRO-3 with an evaluation after every step.
  ds-ddp | zero2 | zero3 OUT   3 steps, 4 micro-batches each: data parallel, DeepSpeed ZeRO-2,
               or ZeRO-3, then its step 3 resumed from step 2's checkpoint (one launch each: accelerate's
               state, DeepSpeed or not, is fixed for the process).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

from proctor.envs import EnvSuite, ListSource, Task, VerifiableEnv, Verdict, Verifier
from proctor.trainer.config import GRPOConfig
from proctor.trainer.grpo import GRPOTrainer
from proctor.trainer.rollout.weights import is_sharded, policy_weights
from proctor.tiny_model import tiny_model_path


class DigitShare(Verifier):
    def verify(self, task, completion):
        share = sum(c.isalnum() for c in completion) / max(1, len(completion))
        return Verdict(reward=share, parts={"correct": share}, correct=share > 0.5)


SERVER_PROMPTS = [[1, 2, 3, 4], [5, 6, 7]]


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


class FailsOnRank0(DigitShare):
    """Rank 0's sandbox is down (every verdict infra); rank 1's judges."""

    def verify(self, task, completion):
        return Verdict.infra("sandbox unreachable (injected on rank 0)") if rank() == 0 else super().verify(task, completion)


class FlatOnRank0(DigitShare):
    """Rank 0's groups all get one reward (no signal: dynamic sampling resamples them); rank 1's vary."""

    def verify(self, task, completion):
        return Verdict(reward=0.0, parts={"correct": 0.0}, correct=False) if rank() == 0 else super().verify(task, completion)


class SolvedAlways(DigitShare):
    """The same dense reward, but every group counts as solved: the pass-rate memory then
    predicts each seen prompt zero-signal and the drawer skips it by chance (its RNG)."""

    def verify(self, task, completion):
        verdict = super().verify(task, completion)
        return Verdict(reward=verdict.reward, parts=verdict.parts, correct=True)


def make_trainer(out_dir: Path, max_steps: int, verifier: Verifier = DigitShare(), n_tasks: int = 12,
                 evaluate: bool = False, **extra: Any) -> GRPOTrainer:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = tiny_model_path(pretrain_steps=0)
    tasks = [Task(id=f"t{i}", prompt=[{"role": "user", "content": f"What is {i} + 1?"}], answer=str(i + 1))
             for i in range(n_tasks)]
    suite = EnvSuite({"digits": VerifiableEnv(ListSource(tasks), verifier)})
    cfg = GRPOConfig.from_flat(model=str(path), prompts_per_step=2, group_size=4, max_new_tokens=6,
                               max_steps=max_steps, learning_rate=1e-3, output_dir=str(out_dir),
                               **{"micro_batch_size": 8, **extra})
    eval_suite = EnvSuite({"digits": VerifiableEnv(ListSource(tasks[:5]), DigitShare())}) if evaluate else None
    return GRPOTrainer(cfg, suite, AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path),
                       eval_suite=eval_suite)


def run(trainer: GRPOTrainer, out: Path, name: str, steps: int = 0) -> None:
    """Train (``trainer.train()``, or ``steps`` bare steps without checkpoints), recording each
    draw's task ids; then write them and the (gathered) weights."""
    drawn: list[list[str]] = []
    draw = trainer.parts.drawer.draw

    def recording(n: int) -> list:
        items = draw(n)
        drawn.append([item.task.id for item in items])
        return items

    trainer.parts.drawer.draw = recording   # instrumentation only: the draw itself is the real one
    rows = [trainer.step(step) for step in range(1, steps + 1)] if steps else trainer.train()
    weights = dict(policy_weights(trainer.model))   # full tensors on every rank, sharded or not
    rank = trainer.accelerator.process_index
    torch.save({k: v.detach().clone() for k, v in weights.items()}, out / f"{name}-weights-{rank}.pt")
    memory = trainer.parts.drawer.memory
    keys = ("reward_mean", "tokens_generated", "loss", "skipped_infra", "dynamic_sampling_rounds", "eval_greedy_pass_rate")
    (out / f"{name}-drawn-{rank}.json").write_text(json.dumps({"drawn": drawn, "skipped": memory.skipped, "rows": [
        {k: row[k] for k in keys if k in row} for row in rows]}))
    trainer.accelerator.wait_for_everyone()


def main(mode: str, out_dir: str, url: str = "") -> None:
    out = Path(out_dir)
    if mode == "resume":
        memory = dict(verifier=SolvedAlways(), n_tasks=5, skip_predicted_zero_signal=True, skip_threshold=0.5)
        run(make_trainer(out / "straight", 3, **memory), out, "straight")
        run(make_trainer(out / "split", 2, **memory), out, "first")
        run(make_trainer(out / "split", 3, resume_from="latest", **memory), out, "resumed")
    elif mode == "fsdp":
        run(make_trainer(out / "ddp", 3), out, "ddp")
        os.environ["ACCELERATE_USE_FSDP"] = "true"   # what `accelerate launch` with an FSDP config sets
        os.environ["FSDP_VERSION"] = "2"
        sharded = make_trainer(out / "fsdp", 2)
        assert is_sharded(sharded.model), "the FSDP run's policy is not sharded"
        run(sharded, out, "fsdp-first")
        run(make_trainer(out / "fsdp", 3, resume_from="latest"), out, "fsdp")
    elif mode == "fsdp-server":
        os.environ["ACCELERATE_USE_FSDP"] = "true"
        os.environ["FSDP_VERSION"] = "2"
        fsdp_server(out, url)
    elif mode == "decide-ddp":
        run(make_trainer(out / mode, 2, verifier=FailsOnRank0(), max_infra_frac=0.25), out, mode)
    elif mode == "decide-fsdp":
        os.environ["ACCELERATE_USE_FSDP"] = "true"
        os.environ["FSDP_VERSION"] = "2"
        trainer = make_trainer(out / mode, 2, verifier=FlatOnRank0(), dynamic_sampling=True, max_resample_rounds=2,
                               evaluate=True, eval_every=1, eval_split=0.5, eval_k=[2])
        assert is_sharded(trainer.model), "the FSDP run's policy is not sharded"
        run(trainer, out, mode)
    elif mode == "decide-zero3":
        os.environ.pop("ACCELERATE_USE_CPU", None)
        os.environ.update(ACCELERATE_USE_DEEPSPEED="true", ACCELERATE_DEEPSPEED_ZERO_STAGE="3",
                          ACCELERATE_GRADIENT_ACCUMULATION_STEPS="1")
        trainer = make_trainer(out / mode, 2, evaluate=True, eval_every=1, eval_split=0.5, **DS_RUN)
        assert is_sharded(trainer.model), "the ZeRO-3 run's policy is not sharded"
        run(trainer, out, mode)
    elif mode in DEEPSPEED:
        deepspeed(mode, out)
    else:
        raise SystemExit(f"unknown mode {mode!r}: resume, fsdp, fsdp-server, {', '.join(DEEPSPEED)}")


# 4 micro-batches per update on each rank (the bug this catches: an engine step per micro-batch),
# and a decaying learning rate (the schedule reaches the engine's optimizer).
DEEPSPEED = {"ds-ddp": None, "zero2": "2", "zero3": "3"}
DS_RUN = dict(micro_batch_size=2, lr_scheduler="linear")


def deepspeed(mode: str, out: Path) -> None:
    """3 steps data parallel (ds-ddp), under DeepSpeed ZeRO-2 (zero2), or under ZeRO-3 with a
    checkpoint each step, then the third step again resumed from step 2's (zero3). The
    environment is what `accelerate launch` with a DeepSpeed config sets, on CPU processes."""
    stage = DEEPSPEED[mode]
    if stage is not None:
        os.environ.pop("ACCELERATE_USE_CPU", None)   # accelerate runs DeepSpeed only when not told "CPU"
        os.environ.update(ACCELERATE_USE_DEEPSPEED="true", ACCELERATE_DEEPSPEED_ZERO_STAGE=stage,
                          ACCELERATE_GRADIENT_ACCUMULATION_STEPS="1")
    if mode == "zero3":
        straight = make_trainer(out / mode, 3, save_every=1, **DS_RUN)
        assert is_sharded(straight.model), "the ZeRO-3 run's policy is not sharded"
        run(straight, out, mode)
        step_2 = out / mode / "checkpoints" / "step-2"
        run(make_trainer(out / f"{mode}-resumed", 3, resume_from=str(step_2), **DS_RUN), out, f"{mode}-resumed")
    else:
        run(make_trainer(out / mode, 3, **DS_RUN), out, mode)


def fsdp_server(out: Path, url: str) -> None:
    """2 steps sharded, sampling from one shared `proctor serve` that only rank 0 pushes to;
    then the greedy answers of a plain model given the gathered weights (the test asks the
    server for its own)."""
    from transformers import AutoModelForCausalLM

    from proctor.trainer.rollout.hf import TransformersGenerator

    prompts = SERVER_PROMPTS
    trainer = make_trainer(out / "run", 2, rollout_backend="vllm_server", vllm_server_urls=[url])
    assert is_sharded(trainer.model), "the FSDP run's policy is not sharded"
    trainer.train()
    full = dict(policy_weights(trainer.model))          # a collective: every rank joins
    plain = AutoModelForCausalLM.from_pretrained(tiny_model_path(pretrain_steps=0))
    initial = TransformersGenerator(plain, trainer.tokenizer).greedy(prompts, 8)
    missing, unexpected = plain.load_state_dict(full, strict=False)
    assert not unexpected and all(k in plain._tied_weights_keys for k in missing), (missing, unexpected)
    local = TransformersGenerator(plain, trainer.tokenizer).greedy(prompts, 8)
    rank = trainer.accelerator.process_index
    (out / f"server-{rank}.json").write_text(json.dumps({"local": local, "initial": initial}))
    trainer.accelerator.wait_for_everyone()


if __name__ == "__main__":
    main(*sys.argv[1:4])
