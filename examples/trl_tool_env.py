"""Proctor's python-tool env trained by TRL's GRPOTrainer: TRL runs the update, Proctor the tool episodes.

    python examples/trl_tool_env.py [--model tiny-tools:2500] [--steps 4]

Each prompt TRL draws is played out as a Proctor tool episode (proctor.trainer.trl_rollout):
the policy's calls run in sandbox sessions, their results are appended as tokens TRL does not
train on (env_mask), and the verdict of the final answer is the reward (None, TRL's "not
applicable", when a tool's infrastructure failed). Tool columns appear in TRL's logs as tools/*.
"""

import argparse
import os

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")   # rollout_func is marked experimental in TRL

from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from proctor.envs import make_env  # noqa: E402
from proctor.envs.adapters import to_hf_dataset  # noqa: E402
from proctor.tiny_model import resolve_model_path  # noqa: E402
from proctor.tiny_tools import TINY_SHAPES  # noqa: E402
from proctor.trainer.trl_rollout import ToolRollout  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="tiny-tools:2500", help="a path, hub id or tiny-tools:STEPS")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--output-dir", default="runs/trl-python-tool")
    args = ap.parse_args()
    path = resolve_model_path(args.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    # the tiny-tools model's own kinds of question (its corpus's); drop shapes= for a real model
    env = make_env("proctor/PythonToolMath-v0", partition="train", n=512, shapes=TINY_SHAPES, train_within=0.5,
                   limits={"max_turns": 3})
    rollout = ToolRollout(env, tokenizer)
    config = GRPOConfig(output_dir=args.output_dir, max_steps=args.steps, per_device_train_batch_size=8,
                        num_generations=8, max_completion_length=32, learning_rate=3e-4, logging_steps=1,
                        report_to=[], save_strategy="no", use_cpu=True, bf16=False, seed=0)
    trainer = GRPOTrainer(model=AutoModelForCausalLM.from_pretrained(path), reward_funcs=[rollout.reward],
                          rollout_func=rollout, args=config, train_dataset=to_hf_dataset(env),
                          processing_class=tokenizer)
    try:
        trainer.train()
    finally:
        env.close()
    for row in trainer.state.log_history:
        if "tools/tool_calls_per_episode" in row:
            print({k: round(v, 3) for k, v in row.items() if k in ("step", "reward", "tools/tool_use_frac",
                                                                   "tools/tool_calls_per_episode",
                                                                   "tools/reward_with_tools")})


if __name__ == "__main__":
    main()
