"""Multi-turn rollouts, token in / token out: env tokens are context, sampled ids are learned as sampled."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch = pytest.importorskip("torch")

from proctor.envs import EnvSuite, ListSource, Task, VerifiableEnv, Verdict, Verifier  # noqa: E402
from proctor.trainer.batch import build_batch, token_logps  # noqa: E402
from proctor.trainer.config import GRPOConfig  # noqa: E402
from proctor.trainer.grpo import GRPOTrainer  # noqa: E402
from proctor.trainer.metrics import Stopwatch  # noqa: E402


class NeverRight(Verifier):
    """Always wrong, always with feedback: every episode runs all its turns."""

    def verify(self, task, completion):
        share = sum(c.isalnum() for c in completion) / max(1, len(completion))
        return Verdict(reward=share, parts={"correct": share}, correct=False,
                       feedback=f"Not quite: {task.answer} was expected.")


@pytest.fixture(autouse=True)
def fresh_accelerator_state():
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


def test_feedback_turns_are_masked_and_sampled_ids_learned_exactly(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from proctor.tiny_model import tiny_model_path

    path = tiny_model_path(pretrain_steps=0)
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    # The eos logit is pushed up so answers end (stop) and earn another turn.
    head = model.get_output_embeddings()
    bias = torch.zeros(head.weight.shape[0])
    bias[tok.eos_token_id] = 8.0
    head.register_forward_hook(lambda m, i, o: o + bias)
    tasks = [Task(id=f"t{i}", prompt=[{"role": "user", "content": f"What is {i} + 1?"}], answer=str(i + 1))
             for i in range(4)]
    env = VerifiableEnv(ListSource(tasks), NeverRight(), max_turns=3)
    cfg = GRPOConfig.from_flat(model=str(path), prompts_per_step=2, group_size=4, max_new_tokens=5, max_steps=1,
                     output_dir=str(tmp_path))
    trainer = GRPOTrainer(cfg, EnvSuite({"fix": env}), model, tok)
    scored = trainer.rollout(trainer.draw_prompts(2), Stopwatch())
    multi = [r for r in scored.rollouts if r.extra.get("turns", 1) > 1]
    assert multi, "some episodes must have continued after feedback"
    for r in multi:
        learned = r.learned()
        assert len(learned) == len(r.completion_ids) == len(r.logprobs) and 0 in learned
        env_tokens = [t for t, keep in zip(r.completion_ids, learned) if not keep]
        assert "Not quite" in tok.decode(env_tokens)            # the env's turn, as tokens
    batch = build_batch(scored.rollouts, [1.0] * len(scored.rollouts), [True] * len(scored.rollouts),
                        tok.pad_token_id)
    for i, r in enumerate(scored.rollouts):
        sampled = [t for t, keep in zip(r.completion_ids, r.learned()) if keep]
        # No re-tokenization: the ids learned on are the ids that were generated.
        assert batch.targets[i][batch.mask[i] > 0].tolist() == sampled
    with torch.no_grad():
        logp, _ = token_logps(trainer.model, batch, cfg.rollout.temperature)
    assert torch.allclose(logp * batch.mask, batch.sampler_logp, atol=1e-4)
    row = trainer.step(1)
    assert row["turns_max"] >= 2 and row["tokens_generated"] > 0
    # dr_grpo's constant normaliser is the longest learned part a completion can have: every turn's.
    learned = max(sum(r.learned()) for r in scored.rollouts)
    assert trainer.spec.max_completion_length == 3 * 5 >= learned
