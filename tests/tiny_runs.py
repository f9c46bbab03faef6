"""A short GRPO run on procedural arithmetic with the untrained tiny model, for tests of what a run logs and saves."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator


@contextmanager
def arithmetic_trainer(tmp_path: Path, **settings: Any) -> Iterator[Any]:
    """A ``GRPOTrainer`` of 2 steps, B=4, G=4, on arithmetic level 1 (the env named ``arith``),
    with ``settings`` as flat config fields; accelerate's process state reset around it."""
    from accelerate.state import AcceleratorState
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from proctor.envs import EnvSuite, make_env
    from proctor.tiny_model import tiny_model_path
    from proctor.trainer.config import GRPOConfig
    from proctor.trainer.grpo import GRPOTrainer

    AcceleratorState._reset_state(reset_partial_state=True)
    path = tiny_model_path(pretrain_steps=0)
    env = make_env("proctor/Arithmetic-v0", level=1, numbers=[0, 50], n=200, prompt_template="What is {expr}?")
    config = GRPOConfig.from_flat(model=str(path), prompts_per_step=4, group_size=4, max_new_tokens=4, max_steps=2,
                                  micro_batch_size=16, output_dir=str(tmp_path / "run"), **settings)
    try:
        yield GRPOTrainer(config, EnvSuite({"arith": env}), AutoModelForCausalLM.from_pretrained(path),
                          AutoTokenizer.from_pretrained(path))
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)


def ppo_trainer(tmp_path: Path, **settings: Any) -> Any:
    """A ``PPOTrainer`` on 8 chat prompts ("What is i + 1?") with the untrained tiny model and a
    dense reward (the share of alphanumeric characters), ``settings`` as flat config fields."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from proctor.envs import EnvSuite, ListSource, Task, VerifiableEnv, Verdict, Verifier
    from proctor.tiny_model import tiny_model_path
    from proctor.trainer.config import GRPOConfig
    from proctor.trainer.ppo import PPOTrainer, ValueModel

    class AlnumShare(Verifier):
        def verify(self, task, completion):
            share = sum(c.isalnum() for c in completion) / max(1, len(completion))
            return Verdict(reward=share, parts={"correct": share}, correct=share > 0.5)

    path = tiny_model_path(pretrain_steps=0)
    tasks = [Task(id=f"t{i}", prompt=[{"role": "user", "content": f"What is {i} + 1?"}], answer=str(i + 1))
             for i in range(8)]
    cfg = GRPOConfig.from_flat(model=str(path), algorithm="ppo", group_size=1, output_dir=str(tmp_path), **settings)
    return PPOTrainer(cfg, EnvSuite({"a": VerifiableEnv(ListSource(tasks), AlnumShare())}),
                      AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path),
                      ValueModel.from_pretrained(path))
