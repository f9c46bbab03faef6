"""Trainer features beyond the core loop: the infra guard, checkpoint retention, learning-rate
schedules, TRL's batch semantics, dynamic-sampling accounting, reward functions."""

from __future__ import annotations

import math
import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch = pytest.importorskip("torch")

from test_grpo_trainer import DigitShare, fresh_accelerator_state, tiny, trainer_for  # noqa: E402,F401

from proctor.envs import Verdict, Verifier  # noqa: E402


class MostlyUnjudged(DigitShare):
    """The sandbox is down for 3 of every 4 completions."""

    def __init__(self) -> None:
        self.calls = 0

    def verify(self, task, completion):
        self.calls += 1
        if self.calls % 4:
            return Verdict.infra("engine unreachable (simulated)")
        return super().verify(task, completion)


def test_a_step_mostly_not_judged_is_not_taken_and_the_run_stops(tiny, tmp_path):
    trainer = trainer_for(tiny, tmp_path, MostlyUnjudged(), max_steps=6, max_infra_frac=0.5, max_infra_steps=2)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    with pytest.raises(RuntimeError, match=r"2 steps in a row had more than 50% .* not judged") as info:
        trainer.train()
    assert "checkpoint" in str(info.value) and "engine unreachable" not in str(info.value)
    for name, p in trainer.model.named_parameters():   # no update on a batch the machinery could not judge
        assert torch.equal(p, before[name]), name
    rows = trainer.parts.log.rows
    assert [r["skipped_infra"] for r in rows] == [1]   # the stopping step raises before it is logged
    assert rows[0]["loss"] is None                      # NaN: no loss was computed
    assert list((tmp_path / "run" / "checkpoints").iterdir())


def test_a_few_unjudged_completions_still_train(tiny, tmp_path):
    trainer = trainer_for(tiny, tmp_path, MostlyUnjudged(), max_steps=1, max_infra_frac=0.8)
    row = trainer.step(1)
    assert row["skipped_infra"] == 0 and row["infra_dropped"] > 0 and math.isfinite(row["loss"])


class Constant(Verifier):
    def verify(self, task, completion):
        return Verdict(reward=1.0, parts={"correct": 1.0}, correct=True)


def test_dynamic_sampling_counts_the_tokens_of_every_round_and_logs_before_filtering(tiny, tmp_path):
    trainer = trainer_for(tiny, tmp_path, Constant(), dynamic_sampling=True, max_resample_rounds=2)
    calls: list[int] = []
    runner = trainer.parts.rollouts
    original = runner.__call__

    def counting(items, watch, sizes=None):
        scored = original(items, watch, sizes)
        calls.append(sum(sum(r.learned()) for r in scored.rollouts))
        return scored

    trainer.parts.rollouts = counting
    row = trainer.step(1)
    assert len(calls) == 3 and row["dynamic_sampling_rounds"] == 2
    assert row["tokens_generated"] == sum(calls)                 # all three rounds, not the last batch only
    assert row["zero_signal_tokens"] == sum(calls)                # every group was all-right: nothing taught
    assert row["tokens_cumulative"] == sum(calls)
    assert row["reward_mean"] == 1.0 and row["pass_rate"] == 1.0  # over every scored group
    assert row["reward_mean_filtered"] == 1.0                     # what the update saw, under its own name
    records = trainer.parts.drawer.memory.records                  # every scored group updated the memory
    assert sum(r.trials for r in records.values()) == pytest.approx(3 * 3 * 4, rel=0.05)


def _keys(trainer) -> list[str]:
    """The pass-rate memory's key of every task in the trainer's suite, in source order."""
    from proctor.envs import SuiteItem
    from proctor.trainer.sampling import memory_key

    return [memory_key(SuiteItem(name, env.source[i])) for name, env in trainer.suite.envs.items()
            for i in range(len(env.source))]


def test_skip_reweight_weighs_a_kept_skippable_prompt_by_one_over_its_keep_probability(tiny, tmp_path):
    trainer = trainer_for(tiny, tmp_path, DigitShare(), skip_predicted_zero_signal=True, skip_reweight=True)
    memory, drawer = trainer.parts.drawer.memory, trainer.parts.drawer
    for key in _keys(trainer)[:6]:                     # half the prompts solved 40 times: predicted zero-signal
        memory.update(key, [True] * 40, step=0)
    items: list = []
    while {drawer.weight_of(it) for it in items} != {1.0, 1 / memory.retry_prob}:
        items = drawer.draw(4)
    raw = torch.tensor([drawer.weight_of(it) for it in items for _ in range(trainer.cfg.rollout.group_size)])
    from proctor.trainer.metrics import Stopwatch
    scored = trainer.rollout(items, Stopwatch())
    plain_cfg_adv, _ = trainer_for(tiny, tmp_path / "plain", DigitShare())._advantages(scored)
    weighted, _ = trainer._advantages(scored)
    # a kept skippable prompt weighs 1 / retry_prob against an unskippable one; the batch's mean weight is 1,
    # so the expected gradient scale (the step size) is that of the unweighted run
    factor = raw / raw.mean()
    assert factor.mean() == pytest.approx(1.0) and factor.max() / factor.min() == pytest.approx(1 / memory.retry_prob)
    assert torch.allclose(weighted.advantages, plain_cfg_adv.advantages * factor)


def test_skip_reweight_keeps_the_step_size_when_every_prompt_is_skippable(tiny, tmp_path):
    trainer = trainer_for(tiny, tmp_path, DigitShare(), skip_predicted_zero_signal=True, skip_reweight=True)
    for key in _keys(trainer):                         # every prompt predicted zero-signal: each weighs 10 raw
        trainer.parts.drawer.memory.update(key, [True] * 40, step=0)
    from proctor.trainer.metrics import Stopwatch
    scored = trainer.rollout(trainer.parts.drawer.draw(3), Stopwatch())
    plain_cfg_adv, _ = trainer_for(tiny, tmp_path / "plain", DigitShare())._advantages(scored)
    weighted, _ = trainer._advantages(scored)
    assert torch.allclose(weighted.advantages, plain_cfg_adv.advantages)   # not 10x: the same step


@pytest.mark.parametrize("kind", ["constant", "linear", "cosine"])
def test_learning_rate_schedules_with_warmup(tiny, tmp_path, kind):
    trainer = trainer_for(tiny, tmp_path, DigitShare(), max_steps=4, lr_scheduler=kind, warmup_steps=2,
                          learning_rate=1e-3)
    lrs = [row["lr"] for row in trainer.train()]   # the rate each step's update applied
    after_warmup = {"constant": [1e-3, 1e-3], "linear": [1e-3, 5e-4], "cosine": [1e-3, 5e-4]}[kind]
    assert lrs == pytest.approx([0.0, 5e-4] + after_warmup)   # transformers' schedules: warmup from 0


def test_save_total_limit_keeps_the_newest_checkpoints(tiny, tmp_path):
    trainer = trainer_for(tiny, tmp_path, DigitShare(), max_steps=4, save_every=1, save_total_limit=2)
    trainer.train()
    kept = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    assert kept == ["step-3", "step-4"]


def test_trl_reward_functions_from_the_config_add_to_the_env_reward(tmp_path):
    from proctor.trainer.build import build_suite
    from proctor.trainer.config import GRPOConfig

    funcs = tmp_path / "my_rewards.py"
    funcs.write_text("def brevity(prompts, completions, **columns):\n"
                     "    assert 'answer' in columns and len(prompts) == len(completions)\n"
                     "    return [1.0 if len(c) < 5 else 0.0 for c in completions]\n")
    envs = {"arith": {"id": "proctor/Arithmetic-v0", "kwargs": {"level": 1, "n": 20,
                                                                "prompt_template": "What is {expr}?"}}}
    cfg = GRPOConfig.from_dict({"data": {"envs": envs, "reward_funcs": [f"{funcs}:brevity"], "reward_weights": [0.5]}})
    suite = build_suite(cfg)
    item = suite.sample(1, __import__("numpy").random.default_rng(0))[0]
    right, long_wrong = suite.score_batch([item, item], [item.task.answer, "no idea at all"])
    assert right.reward == pytest.approx(1.0 + 0.5) and right.correct     # env 1 + 0.5 * brevity 1
    assert long_wrong.reward == pytest.approx(0.0) and not long_wrong.correct


def test_reward_functions_as_callables_and_not_twice(tiny, tmp_path):
    from proctor.trainer.build import build_suite
    from proctor.trainer.config import GRPOConfig

    def shout(prompts, completions, **columns):
        return [float(c.isupper()) for c in completions]

    envs = {"arith": {"id": "proctor/Arithmetic-v0", "kwargs": {"level": 1, "n": 20}}}
    suite = build_suite(GRPOConfig.from_dict({"data": {"envs": envs}}), [shout], [2.0])
    item = suite.sample(1, __import__("numpy").random.default_rng(0))[0]
    assert suite.score_batch([item], ["ABC"])[0].reward == pytest.approx(2.0)
    both = GRPOConfig.from_dict({"data": {"envs": envs, "reward_funcs": ["x:y"]}})
    with pytest.raises(ValueError, match="both in the config"):
        build_suite(both, [shout])


def test_epochs_visit_every_task_once_per_epoch_in_a_fresh_order():
    import numpy as np

    from proctor.envs import EnvSuite, ListSource, Task, VerifiableEnv
    from proctor.trainer.sampling import EpochOrder

    tasks = [Task(id=f"t{i}", prompt=f"q{i}", answer="a") for i in range(10)]
    suite = EnvSuite({"a": VerifiableEnv(ListSource(tasks[:6]), DigitShare()),
                      "b": VerifiableEnv(ListSource(tasks[6:]), DigitShare())})
    order = EpochOrder(suite, shuffle=True, seed=3)
    first, second = order.sample(10), order.sample(10)
    assert sorted(i.task.id for i in first) == sorted(t.id for t in tasks) == sorted(i.task.id for i in second)
    assert [i.task.id for i in first] != [i.task.id for i in second] and order.epoch == 1
    plain = EpochOrder(suite, shuffle=False)
    assert [i.task.id for i in plain.sample(10)] == [t.id for t in tasks]
    shares = [EpochOrder(suite, True, seed=3, rank=r, world=2).sample(5) for r in (0, 1)]
    ids = [i.task.id for share in shares for i in share]
    assert sorted(ids) == sorted(t.id for t in tasks)          # two processes: disjoint halves of one epoch
    resumed = EpochOrder(suite, True, seed=99)
    order2 = EpochOrder(suite, True, seed=3)
    order2.sample(4)
    resumed.load_state_dict(order2.state_dict())
    assert [i.task.id for i in resumed.sample(8)] == [i.task.id for i in order2.sample(8)]
    assert np.isclose(order2.progress(), 1.2)


def test_a_run_in_epochs_mode_draws_without_replacement(tiny, tmp_path):
    trainer = trainer_for(tiny, tmp_path, DigitShare(), order="epochs")
    ids = [it.task.id for it in trainer.draw_prompts(12)]
    assert sorted(ids) == sorted(f"t{i}" for i in range(12))


def test_steps_per_generation_one_generation_several_optimizer_steps(tiny, tmp_path):
    trainer = trainer_for(tiny, tmp_path, DigitShare(), steps_per_generation=2, max_steps=4)
    calls = []
    generate = trainer.generator.generate
    trainer.generator.generate = lambda prompts, params: calls.append(len(prompts)) or generate(prompts, params)
    steps = []
    optimizer_step = trainer.optimizer.step
    trainer.optimizer.step = lambda *a, **k: steps.append(1) or optimizer_step(*a, **k)
    rows = trainer.train()
    assert calls == [6, 6]                        # B=3 prompts per step, 2 steps per generation
    assert len(steps) == 4 and len(rows) == 4
    assert [r["weight_version"] for r in rows] == [0, 1, 1, 2]   # synced once per generation
    assert [r["tokens_generated"] for r in rows] == [3 * 4 * 6] * 4   # each step reports its own share
    # step 2 trains on rollouts sampled before step 1's update: π_old is fixed, the ratio moved
    assert rows[1]["clip_low"] is not None and trainer.generation.old_logp is not None


def test_steps_per_generation_resumes_mid_generation_exactly(tiny, tmp_path):
    straight = trainer_for(tiny, tmp_path / "a", DigitShare(), steps_per_generation=2, max_steps=3)
    rows_a = straight.train()
    first = trainer_for(tiny, tmp_path / "b", DigitShare(), steps_per_generation=2, max_steps=1)
    first.train()                                   # stops in the middle of its generation batch
    resumed = trainer_for(tiny, tmp_path / "b", DigitShare(), steps_per_generation=2, max_steps=3,
                          resume_from="latest")
    rows_b = resumed.train()
    for key in ("loss", "reward_mean", "grad_norm"):
        assert rows_b[-1][key] == pytest.approx(rows_a[-1][key], rel=1e-5, abs=1e-7), key
    for (name, a), (_, b) in zip(straight.model.named_parameters(), resumed.model.named_parameters()):
        assert torch.allclose(a, b, atol=1e-6), name


def test_an_env_by_factory_loads_in_train_as_in_envs_check(tmp_path):
    """`proctor envs check path.py:factory` and data.envs {id: path.py:factory} take one loader."""
    from pathlib import Path

    from typer.testing import CliRunner

    from proctor.cli.app import app
    from proctor.trainer.build import build_suite
    from proctor.trainer.config import GRPOConfig

    example = Path(__file__).resolve().parent.parent / "examples" / "envs" / "palindrome_env.py"
    checked = CliRunner().invoke(app, ["envs", "check", f"{example}:make_env"])
    assert checked.exit_code == 0, checked.output
    suite = build_suite(GRPOConfig.from_dict({"data": {"envs": {"pal": {"id": f"{example}:make_env"}}}}))
    assert type(suite.envs["pal"]).__name__ == "VerifiableEnv" and len(suite.envs["pal"].source) > 0
    bad = GRPOConfig.from_dict({"data": {"envs": {"pal": {"id": f"{example}:no_such_factory"}}}})
    with pytest.raises(ValueError, match=r"config data.envs.pal: .*no_such_factory"):
        build_suite(bad)
