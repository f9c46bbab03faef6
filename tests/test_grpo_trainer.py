"""The GRPO loop end to end on the tiny model: metrics, learning, unjudged samples, dynamic sampling."""

from __future__ import annotations

import json
import math
import os
import random

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch = pytest.importorskip("torch")

from proctor.envs import EnvSuite, ListSource, Task, VerifiableEnv, Verdict, Verifier  # noqa: E402
from proctor.trainer.batch import build_batch, token_logps  # noqa: E402
from proctor.trainer.config import GRPOConfig  # noqa: E402
from proctor.trainer.grpo import GRPOTrainer  # noqa: E402
from proctor.trainer.select.passrate import PassRateMemory  # noqa: E402
from proctor.trainer.rollout import SamplingParams, TransformersGenerator  # noqa: E402

TASKS = [Task(id=f"t{i}", prompt=[{"role": "user", "content": f"What is {i} + 1?"}], answer=str(i + 1))
         for i in range(12)]


class DigitShare(Verifier):
    """A dense reward (share of letters and digits): even a random model gets groups with signal."""

    def verify(self, task, completion):
        share = sum(c.isalnum() for c in completion) / max(1, len(completion))
        return Verdict(reward=share, parts={"correct": share}, correct=share > 0.5)


class SometimesUnjudged(DigitShare):
    def verify(self, task, completion):
        if len(completion) % 3 == 0:
            return Verdict.infra("sandbox gone (simulated)")
        return super().verify(task, completion)


class Constant(Verifier):
    def verify(self, task, completion):
        return Verdict(reward=1.0, parts={"correct": 1.0}, correct=True)


@pytest.fixture(autouse=True)
def fresh_accelerator_state():
    """accelerate keeps one process-wide state; each trainer here sets its own precision."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


@pytest.fixture(scope="module")
def tiny():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from proctor.tiny_model import tiny_model_path

    path = tiny_model_path(pretrain_steps=0)
    return path, AutoTokenizer.from_pretrained(path), AutoModelForCausalLM


def trainer_for(tiny, tmp_path, verifier, **cfg) -> GRPOTrainer:
    path, tok, auto = tiny
    env = VerifiableEnv(ListSource(TASKS), verifier)
    settings = dict(model=str(path), prompts_per_step=3, group_size=4, max_new_tokens=6, max_steps=2,
                    learning_rate=1e-3, micro_batch_size=6, output_dir=str(tmp_path / "run"))
    config = GRPOConfig.from_flat(**{**settings, **cfg})
    return GRPOTrainer(config, EnvSuite({"digits": env}), auto.from_pretrained(path), tok)


def test_training_runs_learns_and_writes_everything(tiny, tmp_path):
    trainer = trainer_for(tiny, tmp_path, DigitShare(), beta=0.04, num_iterations=2)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    rows = trainer.train()
    assert len(rows) == 2
    changed = any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())
    assert changed, "two steps with non-zero advantages must move the weights"
    row = rows[-1]
    for key in ("reward_mean", "pass_rate", "zero_signal_frac", "completion_len_mean", "completion_truncated_frac",
                "kl", "clip_low", "clip_high", "entropy", "grad_norm", "lr", "tokens_generated", "tokens_per_s",
                "time_generate_s", "time_score_s", "time_learn_s", "time_reference_s", "memory_peak_gb",
                "env_digits_reward"):
        assert key in row, key
    assert row["weight_version"] == 2 and row["tokens_generated"] > 0
    assert row["sampler_logp_diff_max"] < 1e-3        # transformers sampled with the learner's own weights
    run = tmp_path / "run"
    lines = (run / "metrics.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]
    assert (run / "reward.png").stat().st_size > 0 and (run / "samples.jsonl").exists()


def test_unjudged_samples_are_dropped_not_scored(tiny, tmp_path):
    trainer = trainer_for(tiny, tmp_path, SometimesUnjudged())
    row = trainer.step(1)
    assert row["infra_dropped"] > 0
    assert not math.isnan(row["reward_mean"]) and 0.0 <= row["reward_mean"] <= 1.0


def test_all_equal_rewards_are_zero_signal_and_dynamic_sampling_tries_again(tiny, tmp_path):
    trainer = trainer_for(tiny, tmp_path, Constant(), dynamic_sampling=True, max_resample_rounds=2)
    row = trainer.step(1)
    assert row["zero_signal_frac"] == 1.0 and row["dynamic_sampling_rounds"] == 2
    assert row["tokens_learned"] == 0 and row["grad_norm"] == 0.0


def test_batch_masks_completion_tokens_and_learner_agrees_with_sampler(tiny):
    path, tok, auto = tiny
    model = auto.from_pretrained(path)
    gen = TransformersGenerator(model, tok)
    prompt = tok.apply_chat_template(TASKS[0].prompt, add_generation_prompt=True, tokenize=True)
    prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
    rollouts = gen.generate([prompt, prompt[:-2]], SamplingParams(n=2, max_new_tokens=5, temperature=0.8))
    flat = [r for g in rollouts for r in g]
    batch = build_batch(flat, [1.0, -1.0, 0.5, 0.0], [True, True, True, False], tok.pad_token_id)
    assert batch.mask[3].sum() == 0                        # not judged: no tokens
    for i, r in enumerate(flat[:3]):
        assert int(batch.mask[i].sum()) == len(r.completion_ids)
        assert batch.targets[i][batch.mask[i] > 0].tolist() == list(r.completion_ids)
    with torch.no_grad():
        logp, _ = token_logps(model, batch, temperature=0.8)
    assert torch.allclose(logp * batch.mask, batch.sampler_logp, atol=1e-4)


def test_pass_rate_memory_predicts_zero_signal_and_skips():
    memory = PassRateMemory(group_size=8, skip_threshold=0.9, retry_prob=0.0)
    for step in range(5):
        memory.update("easy", [True] * 8, step)
        memory.update("mixed", [True, False] * 4, step)
    assert memory.zero_signal_prob("easy") > 0.9 > 0.1 > memory.zero_signal_prob("mixed")
    assert memory.zero_signal_prob("never-seen") is None
    rng = random.Random(0)
    assert memory.should_skip("easy", rng) and not memory.should_skip("mixed", rng)
    memory.note_skip(8 * 20)
    assert memory.tokens_saved == 160 and memory.skipped == 1


def test_config_names_bad_fields():
    with pytest.raises(ValueError, match="group_size"):
        GRPOConfig.from_flat(group_size=1)
    with pytest.raises(ValueError, match="unknown field"):
        GRPOConfig.from_dict({"grup_size": 4})


def test_lora_trains_adapters_only_and_uses_the_base_as_reference(tiny, tmp_path):
    trainer = trainer_for(tiny, tmp_path, DigitShare(), lora_rank=4, beta=0.04)
    assert trainer.ref_model is None                     # no second model in memory
    named = dict(trainer.model.named_parameters())
    lora = {n for n, p in named.items() if p.requires_grad}
    assert lora and all("lora_" in n for n in lora)
    before = {n: p.detach().clone() for n, p in named.items()}
    row = trainer.step(1)
    assert not math.isnan(row["kl"])
    moved = {n for n, p in trainer.model.named_parameters() if not torch.equal(before[n], p)}
    assert moved and moved <= lora


def test_gradient_checkpointing_step_runs(tiny, tmp_path):
    trainer = trainer_for(tiny, tmp_path, DigitShare(), gradient_checkpointing=True)
    assert trainer.step(1)["grad_norm"] >= 0.0


def test_tensorboard_tracker_receives_the_metrics(tiny, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    trainer = trainer_for(tiny, tmp_path, DigitShare(), report_to=["tensorboard"])
    trainer.train()
    events = list((tmp_path / "run").rglob("events.out.tfevents.*"))
    assert events, "accelerate's TensorBoard tracker wrote no event file"
    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    assert "reward_mean" in acc.Tags()["scalars"] and len(acc.Scalars("reward_mean")) == 2


REQUIRED_KEYS = ("step", "reward_mean", "zero_signal_frac", "tokens_generated", "peak_memory_bytes",
                 "time_generate_s", "time_score_s", "time_learn_s")


def test_proctor_train_cli_writes_the_documented_metrics(tmp_path):
    from typer.testing import CliRunner

    from proctor.cli.app import app

    config = tmp_path / "run.yaml"
    config.write_text("data: {prompts_per_step: 2}\nrollout: {group_size: 2, max_new_tokens: 4}\n")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["train", "--config", str(config), "--model", "tiny:0", "--max-steps", "2",
                                      "--output-dir", str(out)])
    assert result.exit_code == 0, result.output
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for key in REQUIRED_KEYS:
        assert all(key in r for r in rows), key
    assert rows[0]["peak_memory_bytes"] > 0 and (out / "reward.png").exists()


def test_proctor_train_bad_config_names_the_field(tmp_path):
    from typer.testing import CliRunner

    from proctor.cli.app import app

    config = tmp_path / "bad.yaml"
    config.write_text("rollout: {group_size: many}\n")
    result = CliRunner(env={"COLUMNS": "400"}).invoke(app, ["train", "--config", str(config)])
    assert result.exit_code == 2 and "rollout.group_size" in result.output and "bad.yaml" in result.output


def test_resume_continues_exactly(tiny, tmp_path):
    straight = trainer_for(tiny, tmp_path / "a", DigitShare(), max_steps=3)
    rows_a = straight.train()
    first = trainer_for(tiny, tmp_path / "b", DigitShare(), max_steps=2)
    first.train()                                   # ends with a checkpoint after step 2
    resumed = trainer_for(tiny, tmp_path / "b", DigitShare(), max_steps=3, resume_from="latest")
    assert resumed.start_step == 2
    rows_b = resumed.train()
    assert [r["step"] for r in rows_b] == [1, 2, 3]  # metrics.jsonl continues, not restarts
    for key in ("reward_mean", "loss", "grad_norm", "tokens_generated", "zero_signal_frac"):
        assert rows_b[-1][key] == rows_a[-1][key], key
    for (name, a), (_, b) in zip(straight.model.named_parameters(), resumed.model.named_parameters()):
        assert torch.equal(a, b), name
    saved = tmp_path / "b" / "run" / "model"
    assert (saved / "model.safetensors").exists() and (saved / "tokenizer_config.json").exists()


def test_non_finite_updates_are_skipped_then_stop_the_run_with_a_checkpoint(tiny, tmp_path):
    trainer = trainer_for(tiny, tmp_path, DigitShare(), max_steps=5, max_nonfinite_steps=2)
    # Fault injection: the learner's forward (grad enabled) yields NaN logits; sampling
    # (no grad) stays sound, as when a bad batch overflows in training only.
    def poison(module, args, out):
        if torch.is_grad_enabled():
            out.logits = out.logits + float("nan")
        return out

    trainer.model.register_forward_hook(poison)
    with pytest.raises(RuntimeError, match="non-finite") as info:
        trainer.train()
    assert "checkpoint" in str(info.value)
    assert list((tmp_path / "run" / "checkpoints").iterdir())


def test_skipping_zero_advantage_rows_gives_the_same_update(tiny, tmp_path):
    from proctor.trainer.metrics import Stopwatch

    a = trainer_for(tiny, tmp_path / "a", DigitShare())
    b = trainer_for(tiny, tmp_path / "b", DigitShare())
    b._zero_rows_are_inert = lambda: False           # the full backward, for comparison
    scored = a.rollout(a.draw_prompts(3), Stopwatch())
    adv = [1.0, -1.0, 0.0, 0.0, 0.5, 0.0, -0.5, 0.0, 0.0, 0.0, 0.0, 0.0]
    batch = build_batch(scored.rollouts, adv, [True] * len(adv), a.tokenizer.pad_token_id)
    grads: dict[str, list] = {"a": [], "b": []}
    for key, trainer in (("a", a), ("b", b)):
        params = list(trainer.model.parameters())
        trainer.optimizer.optimizer.register_step_pre_hook(
            lambda opt, args, kwargs, key=key, params=params: grads[key].extend(p.grad.clone() for p in params))
    out_a, out_b = a.learn(batch, Stopwatch()), b.learn(batch, Stopwatch())
    assert out_a["learned_rows"] == 4 and out_b["learned_rows"] == 12
    # The gradients agree (float32 sums in another order); Adam's first step is sign-like,
    # so compare what goes into the optimizer, not what comes out.
    for ga, gb in zip(grads["a"], grads["b"]):
        assert torch.allclose(ga, gb, rtol=1e-4, atol=1e-7)


def test_bf16_mixed_precision_step_runs(tiny, tmp_path):
    trainer = trainer_for(tiny, tmp_path, DigitShare(), mixed_precision="bf16")
    row = trainer.step(1)
    assert math.isfinite(row["loss"]) and row["tokens_generated"] > 0


@pytest.mark.parametrize("passes", [1, 3])
def test_a_batch_that_teaches_nothing_makes_no_update_at_any_mu(tiny, tmp_path, passes):
    """Every group zero-signal (uniform sampling does this): the inert rows are all left out, and
    the μ passes, π_old included, run over an empty batch without touching the weights."""
    from proctor.trainer.metrics import Stopwatch

    trainer = trainer_for(tiny, tmp_path, DigitShare(), num_iterations=passes)
    scored = trainer.rollout(trainer.draw_prompts(2), Stopwatch())
    n = len(scored.rollouts)
    batch = build_batch(scored.rollouts, [0.0] * n, [True] * n, trainer.tokenizer.pad_token_id)
    before = [p.detach().clone() for p in trainer.model.parameters()]
    out = trainer.learn(batch, Stopwatch())
    assert out["learned_rows"] == 0
    assert all(torch.equal(a, b) for a, b in zip(before, trainer.model.parameters()))
