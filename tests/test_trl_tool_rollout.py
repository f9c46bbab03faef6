"""A Proctor tool env inside TRL's GRPOTrainer (``proctor.trainer.trl_rollout.ToolRollout``): TRL trains on
the episodes' ids with tool results masked (``env_mask``), rewards are the env's verdicts (None where a tool's
infrastructure failed), and the tool columns reach TRL's logs."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

pytest.importorskip("trl")

from proctor.envs import ListSource, Task, Verifier, exact_verdict  # noqa: E402
from proctor.envs.adapters import to_hf_dataset  # noqa: E402
from proctor.envs.tools import HermesParser, Tool, ToolEnv, ToolOutput  # noqa: E402
from proctor.trainer.rollout import Rollout  # noqa: E402

CALL = HermesParser().format_call


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


class Broken(Tool):
    name, description = "broken", "down"
    parameters = {"type": "object", "properties": {}}

    def call(self, arguments, context):
        return ToolOutput("engine unreachable", "infra_error")


class Answer(Verifier):
    def verify(self, task, completion):
        return exact_verdict(completion.strip() == task.answer)


class Scripted:
    """Question i: call add (i == 1: the broken tool), then answer i + 40, every other time wrongly (a
    group with signal)."""

    weight_version = 0
    answers = 0

    def __init__(self, model, tok) -> None:
        self.tok, self.end = tok, tok.convert_tokens_to_ids("<|im_end|>")

    def one(self, prompt):
        text = self.tok.decode(prompt)
        i = int(re.findall(r"What is (\d+) \+ 40", text)[-1])
        first = text.count("<|im_start|>assistant") == 1
        if not first:
            Scripted.answers += 1
        reply = (CALL("broken", {}) if i == 1 else CALL("add", {"a": i, "b": 40})) if first else \
            str(i + 40 + Scripted.answers % 2)
        ids = tuple(self.tok.encode(reply, add_special_tokens=False)) + (self.end,)
        return Rollout(tuple(prompt), ids, (-0.3,) * len(ids), reply, "stop")

    def generate(self, prompts, params):
        return [[self.one(p) for _ in range(params.n)] for p in prompts]


@pytest.mark.filterwarnings("ignore:.*gradient_checkpointing.*:FutureWarning")
@pytest.mark.filterwarnings("ignore:.*rollout_func.*:UserWarning")
def test_trl_grpo_trains_on_proctor_tool_episodes(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import torch
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from proctor.tiny_model import tiny_model_path
    from proctor.tiny_tools import TOOLS_CHAT_TEMPLATE
    from proctor.trainer.trl_rollout import ToolRollout

    monkeypatch.setenv("TRL_EXPERIMENTAL_SILENCE", "1")
    torch.set_num_threads(1)
    model_dir = tiny_model_path(cache_dir=tmp_path_factory.getbasetemp() / "model-cache", layers=2)
    tok = AutoTokenizer.from_pretrained(model_dir)
    tok.chat_template = TOOLS_CHAT_TEMPLATE
    tasks = [Task(f"q{i}", [{"role": "user", "content": f"What is {i} + 40?"}], str(i + 40)) for i in range(4)]
    env = ToolEnv(ListSource(tasks), Answer(), tools=[add, Broken()])
    rollout = ToolRollout(env, tok, make_generator=Scripted)
    seen: list[dict] = []
    real_call = ToolRollout.__call__

    def spy(self, prompts, trainer):
        out = real_call(self, prompts, trainer)
        seen.append(out)
        return out

    monkeypatch.setattr(ToolRollout, "__call__", spy)
    config = GRPOConfig(
        output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=4, num_generations=4,
        max_completion_length=48, learning_rate=1e-3, logging_steps=1, report_to=[], save_strategy="no",
        use_cpu=True, bf16=False, fp16=False, seed=0, disable_tqdm=True, dataloader_num_workers=0,
        gradient_checkpointing=False)
    trainer = GRPOTrainer(model=str(model_dir), reward_funcs=[rollout.reward], rollout_func=rollout, args=config,
                          train_dataset=to_hf_dataset(env), processing_class=tok)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    assert any(not before[n].equal(p.detach()) for n, p in trainer.model.named_parameters())
    assert seen and all(len(out["completion_ids"]) == 4 for out in seen)   # one episode per prompt TRL drew
    for out in seen:
        for ids, mask, reward in zip(out["completion_ids"], out["env_mask"], out["proctor_reward"]):
            assert len(ids) == len(mask)
            tool_text = tok.decode([t for t, m in zip(ids, mask) if not m])
            if reward is None:                       # the broken tool: not judged, never a 0
                assert tool_text == ""
            else:
                assert "<|im_start|>tool" in tool_text and "<tool_call>" not in tool_text
    rewards = [r for out in seen for r in out["proctor_reward"]]
    assert None in rewards and 1.0 in rewards and 0.0 in rewards
    logged = [row for row in trainer.state.log_history if "tools/tool_calls_per_episode" in row]
    assert logged and all(row["tools/tool_calls_per_episode"] == 1.0 for row in logged)
    assert all(not math.isnan(row["tools/tool_use_frac"]) for row in logged)
