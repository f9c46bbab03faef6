"""Checks that need a vLLM engine of their own, run one per process by
test_vllm_colocated_more.py (a second in-process engine breaks the first). Prints JSON."""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import torch  # noqa: E402
from engine_reference import hf_greedy  # noqa: E402


def lora_adapter() -> dict:
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from proctor.trainer.rollout.vllm_colocated import VLLMColocatedGenerator
    from proctor.tiny_model import tiny_model_path

    path = str(tiny_model_path(pretrain_steps=0))
    tok = AutoTokenizer.from_pretrained(path)
    lora = get_peft_model(AutoModelForCausalLM.from_pretrained(path),
                          LoraConfig(r=4, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM"))
    g = torch.Generator().manual_seed(1)
    b_params = [p for n, p in lora.named_parameters() if "lora_B" in n]
    with torch.no_grad():
        for p in b_params:
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    gen = VLLMColocatedGenerator(path, lora, tok, dtype="float32", max_model_len=256)
    prompts = [list(tok(q)["input_ids"]) for q in ("What is 2 + 3?", "What is 11 - 4?")]
    out = {"adapter_sync": gen.adapter_sync, "kind": gen.snapshot().kind,
           "before_equal": gen.greedy(prompts, 8) == hf_greedy(lora, tok, prompts)}
    before = gen.greedy(prompts, 8)
    with torch.no_grad():
        for p in b_params:
            p.copy_(torch.randn(p.shape, generator=g) * 0.3)
    out["synced"] = gen.sync_weights()
    after = gen.greedy(prompts, 8)
    out.update(after_equal=after == hf_greedy(lora, tok, prompts), changed=after != before,
               version=gen.weight_version)
    return out


def train(**kw) -> dict:
    from proctor.trainer.build import build_trainer
    from proctor.trainer.config import GRPOConfig

    cfg = GRPOConfig.from_flat(model="tiny:0", rollout_backend="vllm", prompts_per_step=2, group_size=4, max_new_tokens=6,
                     output_dir=sys.argv[2], **kw)
    rows = build_trainer(cfg).train()
    keys = ("weight_version", "staleness_max", "sampler_logp_diff_max", "is_weight_mean", "tokens_generated",
            "time_rollout_wait_s", "time_sync_s")
    return {"rows": [{k: r.get(k) for k in keys} for r in rows]}


CHECKS = {
    "lora_adapter": lora_adapter,
    "async_train": lambda: train(async_generation=True, max_staleness=1, max_steps=3),
    "lora_train": lambda: train(lora_rank=4, learning_rate=1e-2, max_steps=2),
}

if __name__ == "__main__":
    result = CHECKS[sys.argv[1]]()
    print("RESULT " + json.dumps(result))
