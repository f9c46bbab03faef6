"""Run by tests/test_grpo_ddp.py under `torchrun --nproc_per_node 2` (ACCELERATE_USE_CPU=1):
one GRPO step with a dense reward (two, generating from a shared `proctor serve` when a
URL is given), then each rank writes a checksum of its weights."""

from __future__ import annotations

import json
import sys

import torch

from proctor.envs import EnvSuite, ListSource, Task, VerifiableEnv, Verdict, Verifier
from proctor.trainer.config import GRPOConfig
from proctor.trainer.grpo import GRPOTrainer
from proctor.tiny_model import tiny_model_path


class DigitShare(Verifier):
    def verify(self, task, completion):
        share = sum(c.isalnum() for c in completion) / max(1, len(completion))
        return Verdict(reward=share, parts={"correct": share}, correct=share > 0.5)


def main(out_dir: str, server_url: str = "") -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = tiny_model_path(pretrain_steps=0)
    tasks = [Task(id=f"t{i}", prompt=[{"role": "user", "content": f"What is {i} + 1?"}], answer=str(i + 1))
             for i in range(12)]
    suite = EnvSuite({"digits": VerifiableEnv(ListSource(tasks), DigitShare())})
    server = dict(rollout_backend="vllm_server", vllm_server_urls=[server_url], max_steps=2) if server_url else {}
    cfg = GRPOConfig.from_flat(**{**dict(model=str(path), prompts_per_step=2, group_size=4, max_new_tokens=6, max_steps=1,
                               learning_rate=1e-3, micro_batch_size=8, output_dir=out_dir), **server})
    trainer = GRPOTrainer(cfg, suite, AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path))
    start = sum(float(p.double().sum()) for p in trainer.model.parameters())
    rows = trainer.train()
    end = sum(float(p.double().sum()) for p in trainer.model.parameters())
    rank = trainer.accelerator.process_index
    with open(f"{out_dir}/checksum-{rank}.json", "w") as f:
        json.dump({"start": start, "end": end, "rows": rows}, f)
    torch.distributed.barrier() if torch.distributed.is_initialized() else None


if __name__ == "__main__":
    main(*sys.argv[1:3])
