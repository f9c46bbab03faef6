"""The token ledger adds up: every generated token has exactly one fate, per step and over the run."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch = pytest.importorskip("torch")

from test_grpo_trainer import TASKS, DigitShare, fresh_accelerator_state, tiny  # noqa: E402,F401

from proctor.envs import EnvSuite, ListSource, VerifiableEnv, Verdict, Verifier  # noqa: E402
from proctor.trainer.grpo import GRPOTrainer  # noqa: E402
from proctor.trainer.config import GRPOConfig  # noqa: E402
from proctor.trainer.metrics import read_metrics, train_rows  # noqa: E402
from proctor.trainer.records import Ledger, Scored  # noqa: E402
from proctor.trainer.rollout import Rollout  # noqa: E402
from proctor.trainer.step_row import step_ledger, with_eval_tokens  # noqa: E402
from proctor.trainer.ledger_view import ledger_table  # noqa: E402
from proctor.trainer.report import build_report  # noqa: E402
from rich.console import Console  # noqa: E402

FATES = ("tokens_learned", "tokens_zero_signal_kept", "tokens_dropped", "tokens_unused")


class HalfConstant(DigitShare):
    """Tasks t0-t5 always score 1 (zero signal: dropped or kept), the rest the dense DigitShare reward."""

    def verify(self, task, completion):
        if int(task.id[1:]) < 6:
            return Verdict(reward=1.0, parts={"correct": 1.0}, correct=True)
        return super().verify(task, completion)


def counting(fn, tally: list[int]):
    """``fn`` (generate or greedy_rollouts), adding the sampled tokens of what it returns to ``tally``."""
    def wrapped(*args, **kwargs):
        out = fn(*args, **kwargs)
        flat = [r for x in out for r in (x if isinstance(x, list) else [x])]
        tally.append(sum(sum(r.learned()) for r in flat))
        return out
    return wrapped


def test_every_generated_token_has_one_fate(tiny, tmp_path):
    path, tok, auto = tiny
    env = VerifiableEnv(ListSource(TASKS), HalfConstant())
    config = GRPOConfig.from_flat(
        model=str(path), prompts_per_step=3, group_size=4, max_new_tokens=6, max_steps=4, learning_rate=1e-3,
        micro_batch_size=6, output_dir=str(tmp_path / "run"), dynamic_sampling=True, max_resample_rounds=1,
        skip_predicted_zero_signal=True)
    config = GRPOConfig.from_dict({**config.to_dict(), "eval": {"split": 0.5, "every": 2, "k": [2]}})
    eval_suite = EnvSuite({"digits": VerifiableEnv(ListSource(TASKS[6:9]), DigitShare())})
    trainer = GRPOTrainer(config, EnvSuite({"digits": env}), auto.from_pretrained(path), tok, eval_suite=eval_suite)
    tally: list[int] = []
    trainer.generator.generate = counting(trainer.generator.generate, tally)
    trainer.generator.greedy_rollouts = counting(trainer.generator.greedy_rollouts, tally)
    trainer.train()

    rows = read_metrics(tmp_path / "run")
    steps = train_rows(rows)
    assert [r["step"] for r in steps] == [1, 2, 3, 4]
    for r in steps:                                     # each step: its fates are its rollout tokens
        assert sum(r[k] for k in FATES) == r["tokens_generated"] > 0
        assert r["zero_signal_tokens"] == r["tokens_zero_signal_kept"] + r["tokens_dropped"]
    last = rows[-1]
    cumulative = [sum(r[k] for r in steps) for k in FATES]
    assert cumulative == [last[f"{k}_cumulative"] for k in FATES]
    assert sum(cumulative) == last["tokens_cumulative"] == sum(r["tokens_generated"] for r in steps)
    evals = [r for r in rows if "tokens_eval" in r]
    assert [r["step"] for r in evals] == [0, 2, 4] and all(r["tokens_eval"] > 0 for r in evals)
    assert last["tokens_eval_cumulative"] == sum(r["tokens_eval"] for r in evals)
    # and the whole ledger is every token the generator produced, counted outside it
    assert last["tokens_all_cumulative"] == last["tokens_cumulative"] + last["tokens_eval_cumulative"] == sum(tally)
    assert last["tokens_learned_cumulative"] > 0 and last["tokens_zero_signal_kept_cumulative"] > 0
    assert last["tokens_dropped_cumulative"] > 0                     # t0-t5 groups were dropped and replaced
    assert trainer.totals.generated == sum(tally)
    # shown: tokens.png (against rollout tokens), the console table, proctor report
    assert (tmp_path / "run" / "tokens.png").stat().st_size > 0
    console = Console(record=True, width=120)
    console.print(ledger_table(rows))
    text = console.export_text()
    assert f"{sum(tally):,}" in text and "dropped by dynamic sampling" in text and "evaluation" in text
    rep = build_report(tmp_path / "run", plots=False)
    assert rep.tokens_all == sum(tally) and rep.tokens_eval == last["tokens_eval_cumulative"] > 0
    assert rep.tokens_dropped == last["tokens_dropped_cumulative"]


def _scored(lengths: list[int]) -> Scored:
    rollouts = [Rollout((1,), (7,) * n, (0.0,) * n, "x" * n, "stop") for n in lengths]
    return Scored.uniform([None] * len(lengths), rollouts, [Verdict(reward=0.0, parts={}, correct=False)] * len(lengths), 1)


def test_step_ledger_fates():
    kept, dropped = _scored([3, 4, 5, 6]), _scored([2, 2])
    assert step_ledger(kept, [0.5, -0.5, 0.0, 0.0], dropped, True, skipped_estimate=9) == Ledger(
        learned=7, zero_signal=11, dropped=4, skipped_estimate=9)
    # an update not taken: what would have been learned is unused
    assert step_ledger(kept, [0.5, -0.5, 0.0, 0.0], None, False) == Ledger(unused=7, zero_signal=11)
    with pytest.raises(ValueError, match="3 row weights for 4 rollouts"):
        step_ledger(kept, [0.0] * 3, None, True)
    values, totals = with_eval_tokens({"eval_greedy_pass_rate": 0.5, "tokens_eval": 12}, Ledger(learned=5))
    assert totals == Ledger(learned=5, eval=12) and totals.generated == 17
    assert values["tokens_eval_cumulative"] == 12 and values["tokens_all_cumulative"] == 17
    # a checkpoint from before the ledger keeps its counts
    assert Ledger.from_state({"tokens_generated": 10, "tokens_learned": 6, "tokens_zero_signal": 4}).rollouts == 10
