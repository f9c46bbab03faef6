"""The env contract: verdicts, rubrics, the Gymnasium env, suites, sources, text verifiers."""

from __future__ import annotations

import json
import math
from fractions import Fraction

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import proctor.envs as envs
from proctor.envs import (BadRow, EnvSuite, ListSource, Part, Rubric, RowSource, Task, VerifiableEnv, Verdict,
                          Verifier, check_env, exact_verdict)
from proctor.envs.procedural.arithmetic import LEVELS, ArithmeticSource, arithmetic_task
from proctor.envs.procedural.countdown import CountdownSource, CountdownVerifier, evaluate
from proctor.envs.registry import qa_row
from proctor.envs.text import (ChoiceVerifier, ExactMatchVerifier, RegexVerifier, extract_choice, final_text,
                               length_penalty, think_answer_format)


class ContainsAnswer(Verifier):
    """Correct when the gold appears in the completion; feedback for multi-turn."""

    def __init__(self) -> None:
        self.calls = 0

    def verify(self, task: Task, completion: str) -> Verdict:
        self.calls += 1
        ok = task.answer in completion
        return exact_verdict(ok, feedback=None if ok else f"expected something else than {completion!r}")


TASKS = [Task(id=f"t{i}", prompt=f"What is {i} + {i}?", answer=str(2 * i)) for i in range(10)]


def make_env(**kw) -> VerifiableEnv:
    return VerifiableEnv(ListSource(TASKS), ContainsAnswer(), **kw)


# ---------------------------------------------------------------- verdicts and rubrics
def test_verdict_rejects_rewards_outside_unit_interval():
    with pytest.raises(ValueError, match="reward"):
        Verdict(reward=1.5)
    with pytest.raises(ValueError, match="parts"):
        Verdict(reward=0.5, parts={"x": -0.1})
    assert math.isnan(Verdict.infra("sandbox gone").reward)


def test_rubric_weighted_mean_and_infra_passthrough():
    rubric = Rubric(ContainsAnswer(), weight=3.0, parts=[Part("short", lambda t, c: 1.0 if len(c) < 5 else 0.0, 1.0)])
    good, long_wrong = rubric.score_batch([TASKS[2], TASKS[2]], ["4", "the answer is five"])
    assert good.reward == 1.0 and good.parts == {"correct": 1.0, "short": 1.0}
    assert long_wrong.reward == 0.0
    short_wrong = rubric.score(TASKS[2], "5")
    assert short_wrong.reward == pytest.approx(0.25) and not short_wrong.correct

    class Broken(Verifier):
        def verify(self, task, completion):
            return Verdict.infra("engine gone")

    infra = Rubric(Broken(), parts=[Part("fmt", lambda t, c: 1.0)]).score(TASKS[0], "0")
    assert not infra.scored and math.isnan(infra.reward) and "fmt" not in infra.parts


def test_rubric_rejects_bad_weights_and_duplicate_names():
    with pytest.raises(ValueError):
        Rubric(ContainsAnswer(), parts=[Part("correct", lambda t, c: 1.0)])
    with pytest.raises(ValueError):
        Rubric(ContainsAnswer(), weight=0.0)


# ---------------------------------------------------------------- the Gymnasium env
def test_reset_step_and_determinism():
    env = make_env()
    obs1, info1 = env.reset(seed=7)
    obs2, info2 = env.reset(seed=7)
    assert obs1 == obs2 and info1["task_id"] == info2["task_id"]
    assert obs1[-1]["role"] == "user" and env.observation_space.contains(obs1)
    task = info1["task"]
    _, reward, terminated, truncated, info = env.step(f"It is {task.answer}")
    assert (reward, terminated, truncated, info["correct"]) == (1.0, True, False, True)


def test_text_mode_and_system_prompt():
    env = make_env(chat=False, system_prompt="Be brief.")
    obs, _ = env.reset(seed=0)
    assert isinstance(obs, str) and obs.startswith("Be brief.") and "What is" in obs


def test_multi_turn_feedback_then_solve():
    env = make_env(max_turns=3)
    obs, info = env.reset(options={"index": 3})
    obs, reward, terminated, truncated, _ = env.step("no idea")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert obs[-1]["role"] == "user" and "expected something else" in obs[-1]["content"]
    obs, reward, terminated, truncated, _ = env.step("6")
    assert (reward, terminated) == (1.0, True)


def test_multi_turn_runs_out_of_turns_truncated():
    env = make_env(max_turns=2)
    env.reset(options={"index": 1})
    env.step("x")
    _, reward, terminated, truncated, info = env.step("y")
    assert terminated and truncated and reward == 0.0 and info["turn"] == 2


def test_continues_is_the_multi_turn_rule_step_follows():
    env = make_env(max_turns=3)
    wrong = exact_verdict(False, feedback="try again")
    assert env.continues(wrong, 1) and env.continues(wrong, 2) and not env.continues(wrong, 3)
    assert not env.continues(exact_verdict(True), 1)                       # solved
    assert not env.continues(exact_verdict(False), 1)                      # nothing to show
    assert env.continues(exact_verdict(False, feedback=""), 1)             # empty feedback is feedback
    assert not env.continues(Verdict.infra("sandbox gone"), 1)             # not judged
    assert env.feedback_turn(wrong) == {"role": "user", "content": "try again\n\nPlease fix your answer."}
    with pytest.raises(ValueError, match="feedback"):
        env.feedback_turn(exact_verdict(False))
    assert make_env().continues(wrong, 1) is False                         # single-turn


def test_checker_flags_a_step_that_ignores_continues():
    class OneShot(VerifiableEnv):
        def continues(self, verdict, turn):
            return False                                                   # but step() is the base one

    assert check_env(make_env(max_turns=2, reference=lambda t: t.answer)).ok

    class OwnStep(VerifiableEnv):
        def step(self, action):
            obs, reward, _, truncated, info = super().step(action)
            return obs, reward, True, truncated, info                      # ends every episode itself

    assert check_env(OneShot(ListSource(TASKS), ContainsAnswer(), max_turns=2)).ok
    report = check_env(OwnStep(ListSource(TASKS), ContainsAnswer(), max_turns=2))
    assert [p.check for p in report.problems] == ["step() continues an episode exactly when continues() says"]


def test_infra_error_step_says_drop():
    class Broken(Verifier):
        def verify(self, task, completion):
            return Verdict.infra("engine gone")

    env = VerifiableEnv(ListSource(TASKS), Broken())
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step("2")
    assert math.isnan(reward) and info["drop"] and info["status"] == "infra_error" and terminated


def test_step_before_reset_and_non_text_action_are_errors():
    env = make_env()
    with pytest.raises(RuntimeError, match="reset"):
        env.step("x")
    env.reset(seed=0)
    with pytest.raises(TypeError, match="str"):
        env.step(42)  # type: ignore[arg-type]


def test_checker_passes_a_good_env_and_names_what_is_wrong():
    env = make_env(reference=lambda t: t.answer)
    assert check_env(env).ok

    class Hackable(Verifier):
        def verify(self, task, completion):
            return exact_verdict(True)

    report = check_env(VerifiableEnv(ListSource(TASKS), Hackable()))
    assert not report.ok and any("reward hack" in p.message for p in report.problems)

    class Rejects(Verifier):
        def verify(self, task, completion):
            return exact_verdict(False)

    report = check_env(VerifiableEnv(ListSource(TASKS), Rejects(), reference=lambda t: t.answer))
    assert any("rejects a right answer" in p.message for p in report.problems)

    class Crashes(Verifier):
        def verify(self, task, completion):
            raise KeyError("boom")

    report = check_env(VerifiableEnv(ListSource(TASKS), Crashes()))
    assert any("KeyError" in p.message for p in report.problems)


# ---------------------------------------------------------------- suites
def test_suite_weights_batch_order_and_report():
    a, b = make_env(), VerifiableEnv(ListSource([Task("only", "Say hi", "hi")]), ContainsAnswer())
    suite = EnvSuite({"sums": a, "hi": b}, weights={"sums": 3, "hi": 1})
    suite.reset(seed=0)
    items = suite.sample(400)
    share = sum(i.env == "sums" for i in items) / len(items)
    assert 0.65 < share < 0.85
    completions = [i.task.answer if n % 2 == 0 else "wrong" for n, i in enumerate(items)]
    calls_before = a.rubric.verifier.calls
    verdicts = suite.score_batch(items, completions)
    assert [v.correct for v in verdicts] == [n % 2 == 0 for n in range(len(items))]
    assert a.rubric.verifier.calls - calls_before == sum(i.env == "sums" for i in items)
    report = EnvSuite.report(items, verdicts)
    assert set(report) == {"sums", "hi"} and 0.4 < report["sums"]["pass_rate"] < 0.6


def test_suite_rejects_unknown_weights():
    with pytest.raises(ValueError, match="not in the suite"):
        EnvSuite({"a": make_env()}, weights={"b": 1})


def test_suite_as_gymnasium_env():
    suite = EnvSuite({"sums": make_env()})
    obs, info = suite.reset(seed=1)
    _, reward, terminated, _, info = suite.step(info["task"].answer)
    assert reward == 1.0 and terminated and info["env"] == "sums"


# ---------------------------------------------------------------- task sources
def test_jsonl_parquet_and_json_sources(tmp_path):
    rows = [{"id": "a", "question": "1+1?", "answer": 2}, {"id": "b", "question": "2+2?", "answer": "4"}]
    (tmp_path / "t.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (tmp_path / "t.json").write_text(json.dumps(rows))
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([{**r, "answer": str(r["answer"])} for r in rows]), tmp_path / "t.parquet")
    for name in ("t.jsonl", "t.json", "t.parquet"):
        src = RowSource.from_file(tmp_path / name, qa_row(None, "answer"))
        assert len(src) == 2 and src[0].id == "a" and src[0].answer == "2" and src[1].prompt == "2+2?"


def test_bad_rows_name_file_row_and_field(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text('{"question": "ok", "answer": "1"}\n{"question": "no answer here"}\n')
    with pytest.raises(BadRow) as info:
        RowSource.from_file(path, qa_row(None, "answer"))
    assert "tasks.jsonl" in str(info.value) and "row 2" in str(info.value) and "'answer'" in str(info.value)
    path.write_text('{"question": "ok", "answer": "1"}\nnot json\n')
    with pytest.raises(BadRow, match="row 2"):
        RowSource.from_file(path, qa_row(None, "answer"))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        RowSource.from_file(tmp_path / "missing.jsonl", qa_row(None, "answer"))


def test_datasets_source():
    import datasets

    ds = datasets.Dataset.from_list([{"prompt": "Say yes", "answer": "yes"}])
    src = RowSource.from_dataset(ds, qa_row(None, "answer"), name="mem")
    assert src[0].answer == "yes" and src[0].id == "mem/1"


def test_duplicate_task_ids_are_refused():
    with pytest.raises(ValueError, match="more than once"):
        ListSource([Task("x", "a"), Task("x", "b")])


# ---------------------------------------------------------------- text verifiers
def test_exact_match_with_aliases_and_tags():
    v = ExactMatchVerifier()
    task = Task("c", "Capital of France?", "Paris", data={"aliases": ["paris, france"]})
    assert v.verify(task, "<think>hmm</think><answer> paris </answer>").correct
    assert v.verify(task, "I think...\nParis, France.").correct
    assert not v.verify(task, "<answer>Lyon</answer>").correct


def test_regex_match_is_full():
    v = RegexVerifier()
    task = Task("r", "A date?", data={"pattern": r"\d{4}-\d{2}-\d{2}"})
    assert v.verify(task, "<answer>2024-01-31</answer>").correct
    assert not v.verify(task, "<answer>on 2024-01-31</answer>").correct


@pytest.mark.parametrize("completion,pick", [
    ("The answer is (B).", "B"), ("\\boxed{C}", "C"), ("<answer>D</answer>", "D"),
    ("Let me think. A seems wrong.\nAnswer: B", "B"), ("A\n", "A"), ("I cannot tell.", None),
    ("Answer: A ... wait, final answer is C", "C"),
])
def test_choice_extraction(completion, pick):
    assert extract_choice(completion, "ABCD") == pick


def test_choice_gold_may_be_text():
    v = ChoiceVerifier()
    task = Task("q", "Pick", "blue", data={"choices": ["red", "blue", "green"]})
    assert v.verify(task, "Answer: B").correct and not v.verify(task, "Answer: A").correct


def test_format_and_length_parts():
    assert think_answer_format(TASKS[0], "<think>a</think>\n<answer>b</answer>") == 1.0
    assert think_answer_format(TASKS[0], "<answer>b</answer>") == 0.0
    part = length_penalty(100, 50)
    assert part(TASKS[0], "x" * 40) == 1.0 and part(TASKS[0], "x" * 75) == 0.5 and part(TASKS[0], "x" * 200) == 0.0


@given(st.text(max_size=300))
def test_final_text_and_choice_never_raise(text):
    assert isinstance(final_text(text), str)
    extract_choice(text, "ABCD")


# ---------------------------------------------------------------- procedural tasks
@pytest.mark.parametrize("level", sorted(LEVELS))
def test_arithmetic_answers_are_right(level):
    for i in range(40):
        task = arithmetic_task(i, level, seed=3)
        expr = task.data["expression"].replace("×", "*").replace("÷", "/")
        assert Fraction(eval(expr)).limit_denominator() == Fraction(int(task.answer))  # noqa: S307 - our own text


def test_arithmetic_is_reproducible_and_levels_mix():
    assert [t.prompt for t in ArithmeticSource(20, 3, 1).tasks] == [t.prompt for t in ArithmeticSource(20, 3, 1).tasks]
    assert {t.data["level"] for t in ArithmeticSource(10, (1, 5)).tasks} == {1, 2, 3, 4, 5}


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10_000), st.sampled_from([1, 2, 3, 4, 5]))
def test_countdown_tasks_are_solvable_by_their_solution(index, level):
    from proctor.envs.procedural.countdown import countdown_task

    task = countdown_task(index, level)
    assert CountdownVerifier().verify(task, f"<answer>{task.data['solution']}</answer>").correct


@pytest.mark.parametrize("expression,problem", [
    ("__import__('os')", "not allowed"), ("1/0", "division by zero"), ("2**10", "not allowed"),
    ("(" * 500 + "1" + ")" * 500, "too long"),
])
def test_countdown_rejects_unsafe_or_invalid_answers(expression, problem):
    value, _, why = evaluate(expression)
    assert value is None and problem in why


def test_countdown_number_reuse_is_wrong():
    task = CountdownSource(1, 2).tasks[0]
    n = task.data["numbers"][0]
    assert not CountdownVerifier().verify(task, f"<answer>{' + '.join([str(n)] * 9)}</answer>").correct


def test_reasoning_gym_env():
    env = gym.make("proctor/ReasoningGym-v0", name="basic_arithmetic", size=20).unwrapped
    assert check_env(env).ok


# ---------------------------------------------------------------- registry
def test_builtin_ids_are_registered():
    ids = {i for i, _ in envs.registered()}
    assert {"proctor/Math-v0", "proctor/Code-v0", "proctor/Countdown-v0", "proctor/Choice-v0"} <= ids


@pytest.mark.parametrize("env_id,kwargs", [
    ("proctor/Countdown-v0", {"n": 30, "level": 3}),
])
def test_procedural_envs_pass_the_checker(env_id, kwargs):
    env = gym.make(env_id, **kwargs).unwrapped
    report = check_env(env)
    assert report.ok, report.problems


def test_text_envs_from_files_pass_the_checker(tmp_path):
    exact = tmp_path / "exact.jsonl"
    exact.write_text("\n".join(json.dumps({"question": f"Spell {w}", "answer": w}) for w in ("cat", "dog", "emu")))
    choice = tmp_path / "choice.jsonl"
    choice.write_text("\n".join(json.dumps({"question": f"Q{i}", "choices": ["x", "y", "z"], "answer": "B"})
                                for i in range(3)))
    for env_id, path in (("proctor/ExactMatch-v0", exact), ("proctor/Choice-v0", choice)):
        report = check_env(gym.make(env_id, tasks=str(path)).unwrapped)
        assert report.ok, (env_id, report.problems)


@pytest.mark.docker
def test_code_envs_pass_the_checker(docker_ready, sandbox):
    env = gym.make("proctor/HumanEval-v0", sandbox=sandbox).unwrapped
    report = check_env(env)
    assert report.ok, report.problems


def test_math_env_passes_the_checker(tmp_path):
    env = gym.make("proctor/Math-v0", n=40).unwrapped
    assert check_env(env).ok
    path = tmp_path / "math.jsonl"
    path.write_text("\n".join(json.dumps({"problem": f"Half of {2 * i}?", "answer": f"\\frac{{{2 * i}}}{{2}}"})
                              for i in range(1, 6)))
    report = check_env(gym.make("proctor/Math-v0", tasks=str(path)).unwrapped)
    assert report.ok, report.problems


def _says_solution(prompts, completions, solution, **kwargs):
    """A TRL-style reward function: 1 when the completion contains the row's solution."""
    return [float(s in c) for c, s in zip(completions, solution)]


def _task_files(tmp_path) -> dict[str, str]:
    files = {
        "ExactMatch": [{"question": f"Spell {w}", "answer": w} for w in ("cat", "dog", "emu")],
        "Regex": [{"question": "A year?", "pattern": r"\d{4}", "answer": r"\d{4}"}, {"question": "Yes?", "answer": "y(es)?"}],
        "Choice": [{"question": f"Q{i}", "choices": ["x", "y", "z"], "answer": "C"} for i in range(3)],
        "Math": [{"problem": f"Twice {i}?", "answer": str(2 * i)} for i in range(4)],
        "RewardFuncs": [{"prompt": f"Say {w}", "solution": w} for w in ("hi", "yes", "no")],
    }
    paths = {}
    for name, rows in files.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text("\n".join(json.dumps(r) for r in rows))
        paths[name] = str(path)
    return paths


@pytest.mark.docker
def test_every_registered_env_passes_the_checker(tmp_path, sandbox):
    """The contract, for each built-in id (procedural ones small, file ones on a few rows)."""
    files = _task_files(tmp_path)
    kwargs = {"Arithmetic": {"n": 30, "level": 4}, "Countdown": {"n": 30}, "Math": {"tasks": files["Math"]},
              "Code": {"sandbox": sandbox}, "HumanEval": {"sandbox": sandbox},
              "HumanEvalX": {"sandbox": sandbox, "language": "javascript"},
              "ExactMatch": {"tasks": files["ExactMatch"]}, "Regex": {"tasks": files["Regex"]},
              "Choice": {"tasks": files["Choice"]}, "ReasoningGym": {"name": "basic_arithmetic", "size": 20},
              "RewardFuncs": {"tasks": files["RewardFuncs"], "reward_funcs": [_says_solution]},
              "PythonToolMath": {"n": 30, "sandbox": sandbox}, "CodeAgent": {"sandbox": sandbox}}
    for spec in envs.SPECS:
        assert spec.name in kwargs, f"add {spec.id} to this test"
        env = gym.make(spec.id, **kwargs[spec.name]).unwrapped
        report = check_env(env)
        assert report.ok, (spec.id, report.problems)
