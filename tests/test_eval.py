"""Evaluation during training: held-out questions, greedy pass rate and pass@k, eval_* rows, the plot."""

from __future__ import annotations

import json
import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch = pytest.importorskip("torch")

from proctor.envs import EnvSuite, ListSource, Task, VerifiableEnv, Verdict, Verifier  # noqa: E402
from proctor.envs.core.splits import question_key  # noqa: E402
from proctor.trainer.build import build_eval_suite, build_suite, build_trainer  # noqa: E402
from proctor.trainer.config import GRPOConfig  # noqa: E402
from proctor.trainer.evaluation import EvalSettings, describe, eval_items, evaluate, is_due, pass_at_k  # noqa: E402
from proctor.trainer.metrics import read_metrics, reward_figure  # noqa: E402
from proctor.trainer.rollout import Rollout, SamplingParams  # noqa: E402

ARITH = {"id": "proctor/Arithmetic-v0",
         "kwargs": {"level": 1, "n": 400, "numbers": [0, 20], "prompt_template": "What is {expr}?"}}


@pytest.fixture(autouse=True)
def fresh_accelerator_state():
    """accelerate keeps one process-wide state; each trainer here sets its own precision."""
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)
    yield
    AcceleratorState._reset_state(reset_partial_state=True)


# ---------------------------------------------------------------- the estimator
@pytest.mark.parametrize("n, c, k, expected", [
    (4, 1, 1, 0.25),          # pass@1 is the share correct
    (4, 1, 2, 0.5),           # 1 - C(3,2)/C(4,2) = 1 - 3/6
    (5, 2, 3, 0.9),           # 1 - C(3,3)/C(5,3) = 1 - 1/10
    (10, 3, 4, 1 - 35 / 210),  # 1 - C(7,4)/C(10,4)
    (4, 0, 4, 0.0),
    (3, 2, 2, 1.0),           # n - c < k: every pair holds a correct one
])
def test_pass_at_k_matches_hand_values(n, c, k, expected):
    assert pass_at_k(n, c, k) == pytest.approx(expected)


def test_pass_at_k_refuses_impossible_counts():
    for n, c, k in ((4, 5, 1), (4, 1, 5), (4, 1, 0)):
        with pytest.raises(ValueError, match="pass_at_k"):
            pass_at_k(n, c, k)


def test_the_console_line_says_how_many_answers_were_not_judged():
    values = {"eval_prompts": 100.0, "eval_greedy_pass_rate": 0.0, "eval_pass@1": 0.25, "eval_infra": 37.0}
    assert describe(values) == "eval (100 prompts): greedy_pass_rate 0.000  pass@1 0.250  not judged (infra) 37"
    assert "not judged" not in describe(dict(values, eval_infra=0.0))


def test_eval_schedule_is_before_step_one_every_n_and_at_the_end():
    assert [s for s in range(0, 8) if is_due(s, 3, 7)] == [0, 3, 6, 7]
    assert not any(is_due(s, 0, 7) for s in range(8))


# ---------------------------------------------------------------- evaluate() on known answers
class Exact(Verifier):
    def verify(self, task, completion):
        right = completion.strip() == task.answer
        return Verdict(reward=float(right), parts={"correct": float(right)}, correct=right)


class Scripted:
    """A generator whose answers are fixed per prompt: greedy answers, then n samples each."""

    def __init__(self, greedy: list[str], samples: list[list[str]]) -> None:
        self.greedy_texts, self.samples = greedy, samples

    def greedy_rollouts(self, prompts, max_new_tokens, *, stop=(), repetition_penalty=1.0):
        assert len(prompts) == len(self.greedy_texts)
        return [Rollout(tuple(p), (1, 2), (0.0, 0.0), text, "stop") for p, text in zip(prompts, self.greedy_texts)]

    def generate(self, prompts, params):
        assert params.n == max(len(s) for s in self.samples) and len(prompts) == len(self.samples)
        return [[Rollout(tuple(p), (1,), (0.0,), text, "stop") for text in group]
                for p, group in zip(prompts, self.samples)]


def test_evaluate_counts_greedy_and_pass_at_k_per_env_and_overall():
    tasks = [Task(id=f"q{i}", prompt=f"What is {i} + 1?", answer=str(i + 1)) for i in range(3)]
    suite = EnvSuite({"a": VerifiableEnv(ListSource(tasks[:2]), Exact()),
                      "b": VerifiableEnv(ListSource(tasks[2:]), Exact())})
    items = eval_items(suite)
    assert [(i.env, i.task.id) for i in items] == [("a", "q0"), ("a", "q1"), ("b", "q2")]
    # greedy: q0 right, q1 wrong, q2 right; samples: q0 1 of 4 right, q1 none, q2 all
    gen = Scripted(["1", "7", "3"], [["1", "0", "0", "0"], ["0"] * 4, ["3"] * 4])
    settings = EvalSettings(k=(1, 2, 4), sampling=SamplingParams(n=1, max_new_tokens=4))
    out = evaluate(gen, lambda item: [1, 2, 3], suite, items, settings)
    assert out["eval_greedy_pass_rate"] == pytest.approx(2 / 3)
    assert out["eval_a_greedy_pass_rate"] == pytest.approx(0.5) and out["eval_b_greedy_pass_rate"] == 1.0
    assert out["eval_pass@1"] == pytest.approx((0.25 + 0 + 1) / 3)
    assert out["eval_pass@2"] == pytest.approx((0.5 + 0 + 1) / 3)
    assert out["eval_pass@4"] == pytest.approx((1 + 0 + 1) / 3)
    assert out["eval_a_pass@2"] == pytest.approx(0.25) and out["eval_b_pass@4"] == 1.0
    assert out["eval_prompts"] == 3 and out["eval_infra"] == 0
    assert out["tokens_eval"] == 3 * 2 + 3 * 4 * 1     # greedy: 2 tokens each; samples: 1 token each


class ByPrompt:
    """Answers fixed per prompt (its first token is the task's number), whatever the batch."""

    def __init__(self, greedy: list[str], samples: list[list[str]]) -> None:
        self.greedy_texts, self.samples, self.sizes = greedy, samples, []

    def greedy_rollouts(self, prompts, max_new_tokens, *, stop=(), repetition_penalty=1.0):
        self.sizes.append(len(prompts))
        return [Rollout(tuple(p), (1, 2), (0.0, 0.0), self.greedy_texts[p[0]], "stop") for p in prompts]

    def generate(self, prompts, params):
        self.sizes.append(len(prompts))
        return [[Rollout(tuple(p), (1,), (0.0,), text, "stop") for text in self.samples[p[0]]] for p in prompts]


def test_two_processes_evaluate_their_shares_and_agree_with_one():
    """Each of 2 processes evaluates every other prompt, as many prompts each (a sharded model
    generates in lockstep), and the gathered values are one process's, on both."""
    import threading
    from proctor.trainer.evaluation import Share

    tasks = [Task(id=f"q{i}", prompt=f"What is {i} + 1?", answer=str(i + 1)) for i in range(5)]
    suite = EnvSuite({"a": VerifiableEnv(ListSource(tasks[:3]), Exact()),
                      "b": VerifiableEnv(ListSource(tasks[3:]), Exact())})
    greedy = ["1", "9", "3", "4", "9"]
    samples = [["1", "0"], ["0", "0"], ["3", "3"], ["4", "0"], ["0", "5"]]
    settings = EvalSettings(k=(1, 2), sampling=SamplingParams(n=1, max_new_tokens=4))
    prompt = lambda item: [int(item.task.id[1:]), 7]   # noqa: E731
    alone = evaluate(ByPrompt(greedy, samples), prompt, suite, eval_items(suite), settings)

    slots, barrier, out, gens = [None, None], threading.Barrier(2), [None, None], [None, None]

    def process(rank: int) -> None:
        def gather(value):
            slots[rank] = value
            barrier.wait()
            return list(slots)
        gens[rank] = ByPrompt(greedy, samples)
        out[rank] = evaluate(gens[rank], prompt, suite, eval_items(suite), settings, Share(rank, 2, gather))

    threads = [threading.Thread(target=process, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert gens[0].sizes == gens[1].sizes == [3, 3]   # rank 1 has 2 prompts, padded to rank 0's 3
    keys = [k for k in alone if k.startswith("eval_") and k != "eval_time_s"]
    assert len(keys) >= 8
    for rank in (0, 1):
        assert {k: out[rank][k] for k in keys} == pytest.approx({k: alone[k] for k in keys}), rank
    # Tokens: the run's on both (the padding prompt was generated too), each process's own beside it.
    assert out[0]["tokens_eval"] == out[1]["tokens_eval"] == alone["tokens_eval"] + 2 + 2
    assert out[0]["tokens_eval_process"] + out[1]["tokens_eval_process"] == out[0]["tokens_eval"]


class Recording(Scripted):
    """Scripted, recording what each call was given."""

    def __init__(self, n: int, k: int) -> None:
        super().__init__(["1"] * n, [["1"] * k] * n)
        self.calls: list[tuple] = []

    def greedy_rollouts(self, prompts, max_new_tokens, *, stop=(), repetition_penalty=1.0):
        self.calls.append(("greedy", [list(p) for p in prompts], max_new_tokens, stop, repetition_penalty))
        return super().greedy_rollouts(prompts, max_new_tokens)

    def generate(self, prompts, params):
        self.calls.append(("sample", [list(p) for p in prompts], params))
        return super().generate(prompts, params)


def test_evaluate_decodes_with_the_runs_generation_settings():
    tasks = [Task(id=f"q{i}", prompt=f"What is {i}?", answer="1") for i in range(2)]
    suite = EnvSuite({"a": VerifiableEnv(ListSource(tasks), Exact())})
    run = SamplingParams(n=8, temperature=0.7, top_p=0.9, top_k=5, min_p=0.05, repetition_penalty=1.3,
                         max_new_tokens=6, stop=("\n\n",))
    gen = Recording(n=2, k=2)
    evaluate(gen, lambda item: [1, 2, 3], suite, eval_items(suite), EvalSettings(k=(2,), sampling=run))
    (_, _, tokens, stop, penalty), (_, _, sampled) = gen.calls
    assert (tokens, stop, penalty) == (6, ("\n\n",), 1.3)   # what can change an argmax answer
    assert sampled == SamplingParams(n=2, temperature=0.7, top_p=0.9, top_k=5, min_p=0.05, repetition_penalty=1.3,
                                     max_new_tokens=6, stop=("\n\n",))


@pytest.mark.parametrize("overflow", ["truncate_left", "drop"])
def test_evaluate_applies_max_prompt_length_as_training_does(overflow):
    tasks = [Task(id=f"q{i}", prompt=f"What is {i}?", answer="1") for i in range(3)]
    suite = EnvSuite({"a": VerifiableEnv(ListSource(tasks), Exact())})
    lengths = {"q0": 2, "q1": 5, "q2": 3}   # q1 is over the limit of 3
    gen = Recording(n=3 if overflow == "truncate_left" else 2, k=1)
    settings = EvalSettings(max_prompt_length=3, prompt_overflow=overflow)
    out = evaluate(gen, lambda item: list(range(lengths[item.task.id])), suite, eval_items(suite), settings)
    prompts = gen.calls[0][1]
    if overflow == "truncate_left":
        assert prompts == [[0, 1], [2, 3, 4], [0, 1, 2]] and out["eval_prompts_truncated"] == 1
        assert out["eval_prompts"] == 3
    else:
        assert prompts == [[0, 1], [0, 1, 2]] and out["eval_prompts_dropped"] == 1 and out["eval_prompts"] == 2


def test_greedy_stops_at_a_stop_string_on_the_transformers_backend(model_and_tokenizer):
    from proctor.trainer.rollout.hf import TransformersGenerator

    gen = TransformersGenerator(*model_and_tokenizer)
    prompts = [[5, 6, 7], [8, 9]]
    free = gen.greedy(prompts, 12)
    stop = free[0][2:4]   # a string the free answer holds after its start
    assert stop and stop not in free[0][:2]
    cut = gen.greedy(prompts, 12, stop=(stop,))
    # ends with the token that completes the stop string (its text may run past it)
    assert stop in cut[0] and free[0].startswith(cut[0]) and len(cut[0]) < len(free[0])
    assert gen.greedy(prompts, 12, repetition_penalty=1.0) == free


# ---------------------------------------------------------------- held-out questions
def test_train_and_eval_question_sets_are_disjoint():
    cfg = GRPOConfig.from_dict({"data": {"envs": {"arith": ARITH}},
                                "eval": {"split": 0.1, "every": 5, "max_prompts": 30}})
    train_env, eval_env = build_suite(cfg).envs["arith"], build_eval_suite(cfg).envs["arith"]
    train = {question_key(train_env.source[i]) for i in range(len(train_env.source))}
    held_out = [question_key(eval_env.source[i]) for i in range(len(eval_env.source))]
    assert len(held_out) == 30 == len(set(held_out))        # max_prompts distinct questions
    assert len(train) > 100 and not train & set(held_out)
    # without a split the train env draws from every question, held-out ones included
    every = build_suite(GRPOConfig.from_dict({"data": {"envs": {"arith": ARITH}}})).envs["arith"]
    assert {question_key(every.source[i]) for i in range(len(every.source))} & set(held_out)


def test_separate_eval_envs_keep_their_first_max_prompts_tasks():
    other = {"id": "proctor/Arithmetic-v0", "kwargs": {"level": 2, "n": 50, "seed": 7}}
    cfg = GRPOConfig.from_dict({"eval": {"envs": {"l2": other}, "every": 5, "max_prompts": 12}})
    suite = build_eval_suite(cfg)
    assert list(suite.envs) == ["l2"] and len(suite.envs["l2"].source) == 12
    assert build_eval_suite(GRPOConfig.from_dict({"eval": {"envs": {"l2": other}}})) is None   # every: 0


# ---------------------------------------------------------------- a run
def test_eval_rows_land_at_their_steps_and_the_plot_has_two_lines(tmp_path):
    cfg = GRPOConfig.from_dict({
        "model": "tiny:0", "max_steps": 5, "output_dir": str(tmp_path / "run"),
        "data": {"envs": {"arith": ARITH}, "prompts_per_step": 2},
        "rollout": {"group_size": 2, "max_new_tokens": 3},
        "eval": {"split": 0.1, "every": 2, "max_prompts": 6, "k": [2]}})
    trainer = build_trainer(cfg)
    trainer.train()
    rows = read_metrics(tmp_path / "run")
    assert [r["step"] for r in rows] == [0, 1, 2, 3, 4, 5]
    evaluated = [r["step"] for r in rows if "eval_greedy_pass_rate" in r]
    assert evaluated == [0, 2, 4, 5]                       # before step 1, every 2, and at the end
    assert "reward_mean" not in rows[0]                    # the step-0 row is the evaluation alone
    for r in (r for r in rows if r["step"] in evaluated):
        assert r["eval_prompts"] == 6
        for key in ("eval_greedy_pass_rate", "eval_pass@2", "eval_arith_greedy_pass_rate", "eval_arith_pass@2"):
            assert 0.0 <= r[key] <= 1.0, key
    assert not any(k.startswith("eval_") for r in rows if r["step"] in (1, 3) for k in r)
    assert (tmp_path / "run" / "reward.png").exists()

    fig = reward_figure(rows)
    lines = {line.get_label(): line for line in fig.axes[0].get_lines() if not line.get_label().startswith("_")}
    train = next(line for label, line in lines.items() if label.startswith("train pass rate"))
    greedy = lines["held-out eval: greedy pass rate"]
    assert "held-out eval: pass@2" in lines
    assert list(greedy.get_xdata()) == evaluated
    assert list(greedy.get_ydata()) == [r["eval_greedy_pass_rate"] for r in rows if r["step"] in evaluated]
    assert list(train.get_xdata()) == [1, 2, 3, 4, 5]
    assert train.get_color() != greedy.get_color() and train.get_linestyle() != greedy.get_linestyle()
    assert {t.get_text() for t in fig.axes[0].get_legend().get_texts()} >= {train.get_label(), greedy.get_label()}


def test_turning_evaluation_on_leaves_training_bit_identical(tmp_path):
    """Evaluation samples (pass@k) from its own random stream: the training run is the same with or without it."""
    def run(name: str, every: int) -> tuple[list[dict], dict]:
        cfg = GRPOConfig.from_dict({
            "model": "tiny:0", "max_steps": 3, "output_dir": str(tmp_path / name), "seed": 3,
            "data": {"envs": {"arith": ARITH}, "prompts_per_step": 2},
            "rollout": {"group_size": 4, "max_new_tokens": 3, "temperature": 1.0},
            "eval": {"split": 0.1, "every": every, "max_prompts": 6, "k": [4]},
            "log": {"sample_completions": 2}})
        trainer = build_trainer(cfg)
        trainer.train()
        weights = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
        samples = [json.loads(line) for line in (tmp_path / name / "samples.jsonl").read_text().splitlines()]
        return [(r["step"], r["task_id"], r["completion"]) for r in samples], weights

    samples_off, weights_off = run("off", 0)
    samples_on, weights_on = run("on", 1)
    assert len(samples_on) == 6 and len({text for _, _, text in samples_on}) > 1   # sampled, not constant
    assert samples_on == samples_off
    assert weights_on.keys() == weights_off.keys()
    assert all(torch.equal(weights_on[k], weights_off[k]) for k in weights_on)


def test_reward_plot_without_evaluation_draws_the_train_curve_only():
    rows = [{"step": s, "reward_mean": 0.1 * s, "pass_rate": 0.1 * s} for s in range(1, 6)]
    labels = [line.get_label() for line in reward_figure(rows).axes[0].get_lines()]
    assert [lab for lab in labels if not lab.startswith("_")] == ["train pass rate (sampled), moving avg"]


# ---------------------------------------------------------------- bad settings
@pytest.mark.parametrize("settings, field", [
    ({"every": 5}, "eval.every"),                                    # nothing to evaluate on
    ({"split": 1.5}, "eval.split"),
    ({"split": 0.1, "every": 2, "greedy": False}, "eval.greedy"),   # nothing to measure
    ({"split": 0.1, "every": 2, "k": [0]}, "eval.k"),
    ({"split": 0.1, "every": 2, "max_prompts": 0}, "eval.max_prompts"),
    ({"split": 0.1, "envs": {"x": ARITH}}, "eval.envs and eval.split"),
    ({"evry": 3}, "eval.evry"),
    ({"every": "often"}, "eval.every"),
])
def test_bad_eval_config_names_the_field(settings, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")) as err:
        GRPOConfig.from_dict({"eval": settings}, where="run.yaml")
    assert "run.yaml" in str(err.value) or "GRPOConfig" in str(err.value)


def test_a_bad_eval_env_names_its_key():
    cfg = GRPOConfig.from_dict({"eval": {"envs": {"held": {"kwargs": {}}}, "every": 2}})
    with pytest.raises(ValueError, match=r"eval\.envs\.held: needs an 'id'"):
        build_eval_suite(cfg)


def test_a_trainer_asked_to_evaluate_without_an_eval_suite_says_how(tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from proctor.trainer.build import resolve_model_path
    from proctor.trainer.grpo import GRPOTrainer

    path = resolve_model_path("tiny:0")
    cfg = GRPOConfig.from_dict({"model": path, "output_dir": str(tmp_path), "data": {"envs": {"arith": ARITH}},
                                "eval": {"split": 0.1, "every": 2}})
    with pytest.raises(ValueError, match="build_eval_suite"):
        GRPOTrainer(cfg, build_suite(cfg), AutoModelForCausalLM.from_pretrained(path),
                    AutoTokenizer.from_pretrained(path))


# ---------------------------------------------------------------- the tiny model's first build
def test_the_tiny_model_build_draws_a_bar_with_an_eta_and_a_cached_one_draws_nothing(tmp_path):
    import io

    from rich.console import Console

    from proctor.tiny_model import build_progress, tiny_model_path

    outputs = []
    for _ in range(2):
        out = io.StringIO()
        with build_progress(console=Console(file=out, width=200, force_terminal=False)) as show:
            path = tiny_model_path(tmp_path, pretrain_steps=3, progress=show)
        outputs.append(out.getvalue())
    assert "building the tiny model" in outputs[0] and "3/3" in outputs[0] and "ETA" in outputs[0]
    assert "loss" in outputs[0] and outputs[1] == ""          # the second call found it in the cache
    assert (path / "config.json").exists()
