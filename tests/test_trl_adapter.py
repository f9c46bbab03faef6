"""The TRL bridge: a reward function over an env's verifier, a dataset of its tasks, and a real
GRPOTrainer run on CPU with the tiny model."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Sequence

os.environ.setdefault("OMP_NUM_THREADS", "1")   # a shared 2-core box slows >10x with 2 threads

import pytest

from proctor.envs.adapters import as_reward_func, completion_text, to_hf_dataset
from proctor.envs.core.env import VerifiableEnv
from proctor.envs.core.sources import ListSource
from proctor.envs.core.types import Task, Verdict
from proctor.envs.core.verifier import Part, Rubric, Verifier, exact_verdict

SUMS = [(2, 3), (4, 1), (6, 2), (3, 3), (7, 1), (5, 4)]


class ContainsAnswer(Verifier):
    """Correct when the completion contains the answer; counts batches and records what it saw.
    A completion containing "BOOM" stands for a sandbox failure (infra_error)."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []     # task ids per verify_batch call
        self.completions: list[str] = []

    def verify(self, task: Task, completion: str) -> Verdict:
        if "BOOM" in completion:
            return Verdict.infra("sandbox went away")
        return exact_verdict(task.answer is not None and task.answer in completion)

    def verify_batch(self, tasks: Sequence[Task], completions: Sequence[str]) -> list[Verdict]:
        self.batches.append([t.id for t in tasks])
        self.completions.extend(completions)
        return super().verify_batch(tasks, completions)


def make_env(chat: bool = True) -> tuple[VerifiableEnv, ContainsAnswer]:
    tasks = [Task(id=f"sum-{a}-{b}", prompt=[{"role": "user", "content": f"What is {a} + {b}?"}], answer=str(a + b))
             for a, b in SUMS]
    verifier = ContainsAnswer()
    return VerifiableEnv(ListSource(tasks, name="sums"), verifier, chat=chat), verifier


def test_str_completions_score_in_one_batch() -> None:
    env, verifier = make_env()
    reward = as_reward_func(env)
    ids = ["sum-2-3", "sum-2-3", "sum-4-1", "sum-6-2"]
    out = reward(prompts=["p"] * 4, completions=["5", "six", "the answer is 5", "8"], task_id=ids,
                 completion_ids=[[1]] * 4, trainer_state=None)
    assert out == [1.0, 0.0, 1.0, 1.0]
    assert verifier.batches == [ids]                     # the whole batch, one call


def test_conversational_completions() -> None:
    env, verifier = make_env()
    reward = as_reward_func(env)
    completions = [[{"role": "assistant", "content": "5"}], [{"role": "assistant", "content": "no idea"}],
                   [{"role": "assistant", "content": [{"type": "text", "text": "it is 5"}]}]]
    prompts = [[{"role": "user", "content": "What is 2 + 3?"}]] * 3
    assert reward(prompts, completions, task_id=["sum-2-3"] * 3) == [1.0, 0.0, 1.0]
    assert verifier.completions == ["5", "no idea", "it is 5"]
    assert completion_text("plain") == "plain"


def test_infra_error_is_none_not_zero() -> None:
    env, _ = make_env()
    out = as_reward_func(env)(["p"] * 3, ["5", "BOOM", "x"], task_id=["sum-2-3"] * 3)
    assert out == [1.0, None, 0.0]


def test_unknown_task_id_names_the_id_and_env() -> None:
    env, verifier = make_env()
    with pytest.raises(KeyError, match=r"nope-1.*VerifiableEnv.*to_hf_dataset"):
        as_reward_func(env)(["p"], ["5"], task_id=["nope-1"])
    assert verifier.batches == []                          # nothing scored on a bad batch


def test_missing_task_id_column_says_what_to_do() -> None:
    env, _ = make_env()
    with pytest.raises(KeyError, match="remove_unused_columns"):
        as_reward_func(env, task_id_column="tid")(["p"], ["5"], task_id=["sum-2-3"])


def test_name_is_env_id_or_class_name() -> None:
    import gymnasium as gym

    env, _ = make_env()
    assert as_reward_func(env).__name__ == "VerifiableEnv"
    gym.register(id="proctor-test/Sums-v0", entry_point=lambda: make_env()[0])
    try:
        wrapped = gym.make("proctor-test/Sums-v0", disable_env_checker=True)
        assert as_reward_func(wrapped).__name__ == "proctor-test/Sums-v0"
        assert as_reward_func(wrapped)(["p"], ["5"], task_id=["sum-2-3"]) == [1.0]
    finally:
        gym.registry.pop("proctor-test/Sums-v0", None)


def test_to_hf_dataset_chat_text_and_n() -> None:
    env, _ = make_env()
    ds = to_hf_dataset(env)
    assert ds.column_names == ["prompt", "task_id"] and len(ds) == len(SUMS)
    assert ds[0] == {"prompt": [{"role": "user", "content": "What is 2 + 3?"}], "task_id": "sum-2-3"}
    text_env, _ = make_env(chat=False)
    small = to_hf_dataset(text_env, n=2)
    assert small["task_id"] == ["sum-2-3", "sum-4-1"] and small["prompt"][0] == "user: What is 2 + 3?"


def digit_share(task: Task, completion: str) -> float:
    """A dense part: random weights almost never write the answer, and a reward that is 0 for
    every sample gives GRPO no advantage, so no gradient; this one varies within a group."""
    return sum(ch.isdigit() for ch in completion) / max(1, len(completion))


# TRL 1.16 itself still uses transformers' old gradient-checkpointing names.
@pytest.mark.filterwarnings("ignore:.*gradient_checkpointing.*:FutureWarning")
def test_grpo_trainer_runs_on_cpu_with_env_rewards(tmp_path: Path,
                                                   tmp_path_factory: pytest.TempPathFactory) -> None:
    import torch
    from trl import GRPOConfig, GRPOTrainer

    from proctor.tiny_model import tiny_model_path

    torch.set_num_threads(1)
    model_dir = tiny_model_path(cache_dir=tmp_path_factory.getbasetemp() / "model-cache", layers=2)
    env, verifier = make_env()
    env.rubric = Rubric(verifier, parts=[Part("digits", digit_share, weight=0.5)])
    reward = as_reward_func(env)
    config = GRPOConfig(
        output_dir=str(tmp_path / "out"), max_steps=2, per_device_train_batch_size=4, num_generations=4,
        max_completion_length=8, learning_rate=1e-3, logging_steps=1, report_to=[], save_strategy="no",
        use_cpu=True, bf16=False, fp16=False, seed=0, disable_tqdm=True, dataloader_num_workers=0,
        gradient_checkpointing=False,
    )
    trainer = GRPOTrainer(model=str(model_dir), reward_funcs=[reward], args=config, train_dataset=to_hf_dataset(env))
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()

    assert trainer.state.global_step >= 1
    after = dict(trainer.model.named_parameters())
    assert any(not before[n].equal(after[n].detach()) for n in before), "no optimizer step changed the weights"
    env_ids = {f"sum-{a}-{b}" for a, b in SUMS}
    assert verifier.batches and all(set(batch) <= env_ids for batch in verifier.batches)
    assert all(len(batch) == 4 for batch in verifier.batches)     # one call per generation batch of 4
    logged = [row["rewards/VerifiableEnv/mean"] for row in trainer.state.log_history
              if "rewards/VerifiableEnv/mean" in row]
    assert logged and all(math.isnan(r) or 0.0 <= r <= 1.0 for r in logged)
