"""The answer probe: the policy's own probability of a task's reference reply as its predicted pass rate."""

from __future__ import annotations

import collections
import re
import warnings

import numpy as np
import pytest
import torch
from rich.console import Console

from proctor.envs import EnvSuite, ListSource, SuiteItem, Task, VerifiableEnv, make_env
from proctor.envs.text.verifiers import ExactMatchVerifier
from proctor.trainer.config import GRPOConfig
from proctor.trainer.ledger_view import ledger_table
from proctor.trainer.select.passrate import PassRateMemory
from proctor.trainer.select.probe import AnswerProbe, answer_reference, signal_chance
from proctor.trainer.parts import build_probe, selection_rules, tokenize
from proctor.trainer.sampling import PromptDrawer
from proctor.trainer.select.frontier import SelectionRules
from tiny_runs import arithmetic_trainer


def _probe(model, tok, temperature=1.0, template="{answer}"):
    suite = EnvSuite({"arith": make_env("proctor/Arithmetic-v0", level=1, numbers=[0, 50], n=20,
                                        prompt_template="What is {expr}?")})
    return AnswerProbe(model, tok, lambda item: tokenize(suite, tok, item), answer_reference(template),
                       temperature, batch_size=3), suite


def _by_hand(model, prompt: list[int], reply: list[int], temperature: float) -> float:
    """The reply's probability one token at a time, each position its own forward pass."""
    total = 0.0
    with torch.no_grad():
        for t, token in enumerate(reply):
            logits = model(input_ids=torch.tensor([prompt + reply[:t]])).logits[0, -1] / temperature
            total += float(torch.log_softmax(logits.float(), -1)[token])
    return float(np.exp(total))


@pytest.mark.parametrize("temperature", [1.0, 0.5])
def test_the_probe_is_the_probability_of_the_reference_reply_then_eos(model_and_tokenizer, temperature):
    model, tok = model_and_tokenizer
    probe, suite = _probe(model, tok, temperature)
    items = [SuiteItem("arith", suite.envs["arith"].source[i]) for i in range(7)]   # 3 batches, padded
    rates = probe.pass_rates(items)
    for item, rate in zip(items, rates):
        reply = tok(item.task.answer, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        assert rate == pytest.approx(_by_hand(model, tokenize(suite, tok, item), reply, temperature), rel=1e-4)
    prompts = sum(len(tokenize(suite, tok, it)) + len(tok(it.task.answer)["input_ids"]) + 1 for it in items)
    assert probe.tokens == prompts                       # every forward token counted


def test_a_task_without_an_answer_is_not_probed(model_and_tokenizer):
    model, tok = model_and_tokenizer
    probe, suite = _probe(model, tok)
    bare = Task(id="x", prompt="Say something.", answer=None)
    known = SuiteItem("arith", suite.envs["arith"].source[0])
    assert probe.pass_rates([SuiteItem("arith", bare), known])[0] is None
    assert probe.pass_rates([known])[0] is not None


def test_the_probe_is_the_chance_a_sample_starts_with_the_reply(model_and_tokenizer):
    """Sampled at a low temperature (the untrained model is near uniform at 1), the share of samples whose first tokens are the reply
    matches the probe's probability of it (binomial, 4 standard errors)."""
    from proctor.trainer.rollout import SamplingParams
    from proctor.trainer.rollout.hf import TransformersGenerator

    model, tok = model_and_tokenizer
    probe, suite = _probe(model, tok, temperature=0.08)
    prompt = tokenize(suite, tok, SuiteItem("arith", suite.envs["arith"].source[0]))
    torch.manual_seed(0)
    gen = TransformersGenerator(model, tok, batch_size=200)
    samples = gen.generate([prompt], SamplingParams(n=600, temperature=0.08, max_new_tokens=2))[0]
    counts = collections.Counter(tuple(r.completion_ids[:2]) for r in samples if len(r.completion_ids) >= 2)
    reply, seen = counts.most_common(1)[0]
    p = float(torch.exp(probe.sequence_logprobs([(prompt, list(reply))])[0]))
    assert 0.05 < p < 0.95
    assert abs(seen / len(samples) - p) < 4 * np.sqrt(p * (1 - p) / len(samples))


def test_signal_chance_is_one_minus_all_right_or_all_wrong():
    assert signal_chance(0.0, 8) == 0.0 and signal_chance(1.0, 8) == 0.0
    assert signal_chance(0.5, 2) == pytest.approx(0.5)
    assert signal_chance(0.3, 4) == pytest.approx(1 - 0.3 ** 4 - 0.7 ** 4)


# ------------------------------------------------------------------ the drawer with a probe
class _FixedProbe:
    """A probe whose prediction is the answer / 100 (the tasks' answers are 0..99)."""

    def __init__(self) -> None:
        self.tokens = 0

    def pass_rates(self, items):
        self.tokens += 10 * len(items)
        self.seen = [int(it.task.answer) for it in items]
        return [int(it.task.answer) / 100 for it in items]


def _drawer(explore=0.1, band=(0.3, 0.7), pool=4):
    source = [Task(id=f"t{i}", prompt=f"q{i}", answer=str(i)) for i in range(100)]
    suite = EnvSuite({"env": VerifiableEnv(ListSource(source), ExactMatchVerifier())})
    rules = SelectionRules(8, explore=explore, band=band, probe_pool=pool)
    return PromptDrawer(suite.sample, 0, PassRateMemory(8), rules, 8, probe=_FixedProbe())


def test_the_drawer_keeps_prompts_predicted_in_band_and_explores_the_rest():
    drawer = _drawer(explore=0.1)
    drawn = [int(it.task.answer) for _ in range(400) for it in drawer.draw(8)]
    outside = np.mean([not 30 <= a <= 70 for a in drawn])
    assert 0.06 < outside < 0.14                      # explore: 10% of the slots
    report = drawer.report()
    assert report["probe_in_band_frac"] == pytest.approx(0.41, abs=0.03)
    assert report["tokens_probed"] == 400 * 32 * 10 and report["tokens_probed_cumulative"] == 400 * 32 * 10
    assert report["probe_topped_up"] < 0.01 * 400 * 8     # 13 of 32 candidates in band, on average
    expected = np.mean([signal_chance(a / 100, 8) for a in drawn])   # the probe's predictions are answer / 100
    assert report["probe_predicted_signal"] == pytest.approx(expected)
    assert drawer.report()["tokens_probed"] == 0      # per report


def test_the_drawer_weights_undo_the_selection_in_expectation():
    drawer = _drawer(explore=0.2)
    mass = collections.Counter()
    rounds = 3000
    for _ in range(rounds):
        for item in drawer.draw(8):
            mass[int(item.task.answer) >= 50] += drawer.weight_of(item)
    # uniform: half the tasks have an answer >= 50
    assert mass[True] / (mass[True] + mass[False]) == pytest.approx(0.5, abs=0.03)


def test_with_nothing_in_band_the_drawer_takes_the_nearest():
    drawer = _drawer(band=(0.995, 1.0), pool=8)
    drawn = [int(it.task.answer) for it in drawer.draw(4)]
    assert drawn == sorted(drawer.probing.probe.seen, reverse=True)[:4]     # the 4 highest of 32 candidates
    assert drawer.report()["probe_topped_up"] == 4


def test_a_dropped_prompts_replacement_is_not_probed():
    drawer = _drawer()
    drawer.draw(3, probe=False)
    assert drawer.probing.probe.tokens == 0


# ------------------------------------------------------------------ config and bad input
@pytest.mark.parametrize("data, message", [
    ({"answer_probe": True}, r"data\.answer_probe keeps prompts .* data\.target_pass_rate"),
    ({"answer_probe": True, "target_pass_rate": [0.2, 0.8], "probe_pool": 0}, r"data\.probe_pool must be >= 1"),
    ({"answer_probe": True, "target_pass_rate": [0.2, 0.8], "answer_template": "The result"},
     r"data\.answer_template must contain \{answer\}"),
    ({"answer_probe": True, "target_pass_rate": [0.2, 0.8], "answer_template": "{answer} {unit}"},
     r"data\.answer_template must contain \{answer\}"),
    ({"answer_probe": True, "target_pass_rate": [0.2, 0.8], "skip_predicted_zero_signal": True},
     r"choose one"),
])
def test_probe_settings_that_cannot_work_are_refused_by_name(data, message):
    with pytest.raises(ValueError, match=message):
        GRPOConfig.from_dict({"data": data})


def test_the_probe_on_envs_without_answers_is_refused(model_and_tokenizer):
    model, tok = model_and_tokenizer
    cfg = GRPOConfig.from_dict({"data": {"answer_probe": True, "target_pass_rate": [0.2, 0.8]}})
    suite = EnvSuite({"code": VerifiableEnv(ListSource([Task(id="a", prompt="Write f.")]), ExactMatchVerifier())})
    with pytest.raises(ValueError, match=r"no env in data\.envs \(code\) has tasks with an answer"):
        build_probe(cfg, suite, model, tok, lambda item: [1])
    assert selection_rules(cfg).probe_pool == 4


def test_a_run_with_the_probe_logs_it_and_resumes_its_count(tmp_path):
    with arithmetic_trainer(tmp_path, target_pass_rate=[0.2, 0.8], answer_probe=True, difficulty_envs=[],
                            probe_pool=2) as trainer:
        rows = trainer.train()
    drawer = trainer.parts.drawer
    assert drawer.frontier is None                      # difficulty_envs: [] leaves the band to the probe
    assert all(r["tokens_probed"] > 0 and r["time_select_s"] > 0 for r in rows)   # its time is the step's select
    assert rows[-1]["tokens_probed_cumulative"] == sum(r["tokens_probed"] for r in rows)
    console = Console(record=True, width=140)
    console.print(ledger_table(rows))
    probed = f"{rows[-1]['tokens_probed_cumulative']:,}"
    assert re.search(rf"read by the answer probe \(forward only\) │ +{probed} │", console.export_text())
    state = drawer.state_dict()
    drawer.probing.probe.tokens = 0
    drawer.load_state_dict(state)
    assert drawer.probing.probe.tokens == rows[-1]["tokens_probed_cumulative"]


def _scored(items, passes: float, group_size: int = 8):
    """Each item's group: the first round(passes * G) completions right."""
    from proctor.envs import Verdict
    from proctor.trainer.records import Scored
    from proctor.trainer.rollout import Rollout

    right = round(passes * group_size)
    flat = [it for it in items for _ in range(group_size)]
    rollouts = [Rollout((1,), (2, 3), (0.0, 0.0), "x", "stop") for _ in flat]
    verdicts = [Verdict(reward=float(j < right), parts={}, correct=j < right)
                for _ in items for j in range(group_size)]
    return Scored.uniform(flat, rollouts, verdicts, group_size)


@pytest.mark.parametrize("passes, warns", [(0.25, False), (1.0, True), (0.0, True)])
def test_a_probe_whose_predictions_miss_the_pass_rates_is_named(passes, warns):
    """Predictions of 0.1 to 0.3 against groups that pass a quarter of the time: calibrated; all or none: warned."""
    from proctor.trainer.select.probe_selection import ProbeCalibrationWarning

    drawer = _drawer(explore=0.01, band=(0.1, 0.3))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(30):
            drawer.observe(_scored(drawer.draw(8), passes), step)
    named = [w for w in caught if issubclass(w.category, ProbeCalibrationWarning)]
    assert len(named) == (1 if warns else 0)          # once
    if warns:
        assert "data.answer_template" in str(named[0].message)


# ------------------------------------------------------------------ proctor envs check --probe-model
def test_agreement_needs_correlation_calibration_and_spread():
    from proctor.trainer.select.probe import agreement_problem

    observed = [0.0, 0.1, 0.2, 0.5, 0.9, 0.0, 0.3]
    assert agreement_problem([0.01, 0.08, 0.25, 0.45, 0.8, 0.02, 0.3], observed) is None
    assert "barely track" in agreement_problem(list(reversed(observed)), observed)
    assert "predicts" in agreement_problem([p / 4 for p in observed], observed)       # right order, 4x too low
    assert "no spread" in agreement_problem([0.0] * 7, [0.0] * 7)


@pytest.mark.parametrize("scramble, exit_code", [(False, 0), (True, 1)])
def test_envs_check_measures_whether_the_probe_predicts_a_models_pass_rate(monkeypatch, scramble, exit_code):
    from typer.testing import CliRunner

    from proctor.cli import envs_cmd
    from proctor.cli.app import app

    def fake(model, template):   # a 'model' passing low-work questions; the probe sees it, or sees noise
        def rates(env, tasks):
            observed = [max(0.0, 0.8 - 0.3 * t.data["work"]) for t in tasks]
            predicted = [o * 0.9 for o in observed]
            return (list(np.random.default_rng(0).permutation(predicted)) if scramble else predicted), observed
        return rates

    monkeypatch.setattr(envs_cmd, "_probe_rates", fake)
    kwargs = '{"level": 1, "numbers": [0, 50], "n": 200, "prompt_template": "What is {expr}?"}'
    result = CliRunner(env={"COLUMNS": "400"}).invoke(app, ["envs", "check", "proctor/Arithmetic-v0", "--kwargs", kwargs,
                                                            "--probe-model", "fake", "--probe-tasks", "100"])
    assert result.exit_code == exit_code, result.output
    assert "answer probe against fake" in result.output
    if exit_code:
        assert "barely track" in result.output and "--answer-template" in result.output


def test_envs_check_probes_a_real_model_end_to_end():
    """The untrained tiny model passes nothing: the check runs the probe and the sampler and says
    there is no spread to predict."""
    from typer.testing import CliRunner

    from proctor.cli.app import app

    kwargs = '{"level": 1, "numbers": [0, 50], "n": 50, "prompt_template": "What is {expr}?"}'
    result = CliRunner(env={"COLUMNS": "400"}).invoke(app, ["envs", "check", "proctor/Arithmetic-v0", "--kwargs", kwargs,
                                                            "--probe-model", "tiny:0", "--probe-tasks", "3"])
    assert result.exit_code == 1, result.output
    assert "answer probe against tiny:0" in result.output and "no spread to predict" in result.output
    bad = CliRunner().invoke(app, ["envs", "check", "proctor/Arithmetic-v0", "--kwargs", kwargs,
                                   "--probe-model", "tiny:0", "--answer-template", "{reply}"])
    assert bad.exit_code != 0 and "--answer-template must contain {answer}" in bad.output
