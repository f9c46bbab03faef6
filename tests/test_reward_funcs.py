"""Rewards as plain callables with TRL's signature: the call, the combining rule, None, errors,
async functions, on top of an env, and by reference from a dataset env."""

from __future__ import annotations

import asyncio
import json
import math
import re

import pytest
import torch

from proctor.envs import (RewardFuncError, RewardFunctions, RewardFunctionsVerifier, check_env, combine_rewards,
                          make_env, with_reward_funcs)
from proctor.envs.core.env import VerifiableEnv
from proctor.envs.core.sources import ListSource
from proctor.envs.core.suite import EnvSuite
from proctor.envs.core.types import Task, Verdict
from proctor.envs.core.verifier import Verifier, exact_verdict
from proctor.trainer.algo import rewards_from_parts

TASKS = [Task("t1", "Say hi", data={"solution": "hi"}), Task("t2", "Say no", data={"solution": "no"}),
         Task("t3", [{"role": "user", "content": "Say yes"}], answer="yes", data={"solution": "yes"})]


def says_solution(prompts, completions, solution, **kwargs):
    texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]
    return [1.0 if s in t else 0.0 for t, s in zip(texts, solution)]


def brevity(completions, **kwargs):
    texts = [c if isinstance(c, str) else c[0]["content"] for c in completions]
    return [-0.1 * len(t.split()) for t in texts]


def only_chat(prompts, completions, **kwargs):
    return [1.0 if isinstance(p, list) else None for p in prompts]


# ---------------------------------------------------------------- the rule
def test_combine_is_the_weighted_sum_of_what_applies():
    assert combine_rewards([1.0, None, -0.5], [2.0, 7.0, 1.0]) == pytest.approx(1.5)
    assert combine_rewards([None, None], [1.0, 1.0]) is None


def test_combine_matches_the_trainers_tensor_rule():
    """The per-sample rule and the trainer's ``rewards_from_parts`` (TRL's sum_then_normalize) agree."""
    gen = torch.Generator().manual_seed(0)
    parts = torch.randn(64, 3, generator=gen, dtype=torch.float64)
    parts[torch.rand(64, 3, generator=gen) < 0.3] = math.nan
    parts[5] = math.nan
    weights = torch.tensor([1.0, 0.5, -2.0], dtype=torch.float64)
    tensor = rewards_from_parts(parts, weights)
    for row, expected in zip(parts.tolist(), tensor.tolist()):
        got = combine_rewards([None if math.isnan(v) else v for v in row], weights.tolist())
        assert (got is None and math.isnan(expected)) or got == pytest.approx(expected)


# ---------------------------------------------------------------- the call
def test_functions_are_called_once_per_batch_as_trl_calls_them():
    seen = []

    def spy(prompts, completions, **columns):
        seen.append((prompts, completions, columns))
        return [0.0] * len(completions)

    verifier = RewardFunctionsVerifier([spy])
    verifier.verify_batch(TASKS, ["hi there", "nope", "yes!"])
    assert len(seen) == 1
    prompts, completions, columns = seen[0]
    assert prompts == [t.prompt for t in TASKS]
    # text prompt -> str completion; chat prompt -> the assistant message list, as TRL passes it
    assert completions == ["hi there", "nope", [{"role": "assistant", "content": "yes!"}]]
    assert columns == {"solution": ["hi", "no", "yes"], "task_id": ["t1", "t2", "t3"], "answer": [None, None, "yes"]}


def test_weighted_rewards_any_real_number():
    verifier = RewardFunctionsVerifier([says_solution, brevity], weights=[1.0, 0.5], pass_threshold=0.9)
    v = verifier.verify_batch(TASKS, ["hi", "well no I think so", "maybe"])
    assert [x.reward for x in v] == pytest.approx([1 - 0.05, 1 - 0.25, -0.05])
    assert [x.correct for x in v] == [True, False, False]
    assert all(x.scored and not x.bounded for x in v)
    assert v[1].parts == pytest.approx({"says_solution": 1.0, "brevity": -0.5})
    with pytest.raises(ValueError, match="must be in \\[0, 1\\]"):
        Verdict(reward=-0.05)                      # a verifier's verdict stays in [0, 1]


def test_none_means_does_not_apply_and_all_none_is_not_judged():
    v = RewardFunctionsVerifier([only_chat, says_solution], weights=[2.0, 1.0]).verify_batch(TASKS, ["hi", "x", "yes"])
    assert [x.reward for x in v[:1]] == [1.0] and v[2].reward == 3.0
    assert v[0].info["rewards"] == {"only_chat": None, "says_solution": 1.0}
    alone = RewardFunctionsVerifier([only_chat]).verify_batch(TASKS, ["a", "b", "c"])
    assert [x.scored for x in alone] == [False, False, True]
    assert math.isnan(alone[0].reward) and "every one returned None" in alone[0].info["error"]


def test_nan_is_none_as_in_trl():
    def half_nan(completions, **kw):
        return [math.nan, 1.0, None]

    v = RewardFunctionsVerifier([half_nan, says_solution]).verify_batch(TASKS, ["x", "x", "x"])
    assert [x.reward for x in v] == [0.0, 1.0, 0.0]


# ---------------------------------------------------------------- errors
def test_a_raising_function_is_not_judged_and_named():
    def broken(completions, **kw):
        raise KeyError("solution_text")

    v = RewardFunctionsVerifier([says_solution, broken]).verify_batch(TASKS, ["hi", "no", "yes"])
    assert not any(x.scored for x in v) and all(math.isnan(x.reward) for x in v)
    assert "reward function 'broken' raised KeyError" in v[0].info["error"]


@pytest.mark.parametrize("output,message", [
    ([1.0, 2.0], "returned 2 rewards for 3 completions"),
    ("1.0", "returned str"),
    ([1.0, "x", 0.0], "returned 'x' (a string) for completion 1"),
    ([1.0, math.inf, 0.0], "returned inf for completion 1"),
    ([1.0, object(), 0.0], "returned a object for completion 1"),
])
def test_a_broken_contract_is_an_error_naming_the_function(output, message):
    def bad_reward(completions, **kw):
        return output

    with pytest.raises(RewardFuncError, match=re.escape(f"reward function 'bad_reward' {message}")):
        RewardFunctionsVerifier([bad_reward]).verify_batch(TASKS, ["a", "b", "c"])


def test_bad_functions_and_weights_are_refused_up_front():
    with pytest.raises(RewardFuncError, match="takes neither completions= nor \\*\\*kwargs"):
        RewardFunctions.of([lambda prompts: [0.0]])
    with pytest.raises(RewardFuncError, match="2 reward_weights for 1 reward_funcs"):
        RewardFunctions.of([brevity], [1.0, 2.0])
    with pytest.raises(RewardFuncError, match="not a function"):
        RewardFunctions.of([brevity, 3])
    with pytest.raises(RewardFuncError, match="empty"):
        RewardFunctions.of([])
    names = RewardFunctions.of([brevity, brevity, lambda completions, **k: []], reserved_names=("brevity_2",)).names
    assert names == ("brevity", "brevity_3", "<lambda>")


# ---------------------------------------------------------------- async
def test_async_functions_run_together():
    running, peak = [0], [0]

    async def slow_len(completions, **kw):
        running[0] += 1
        peak[0] = max(peak[0], running[0])
        await asyncio.sleep(0.05)
        running[0] -= 1
        return [float(len(c)) if isinstance(c, str) else 0.0 for c in completions]

    async def slow_fail(completions, **kw):
        await asyncio.sleep(0.01)
        raise RuntimeError("grader offline")

    v = RewardFunctionsVerifier([slow_len, slow_len]).verify_batch(TASKS, ["ab", "abc", "x"])
    assert [x.reward for x in v] == [4.0, 6.0, 0.0] and peak[0] == 2
    failed = RewardFunctionsVerifier([slow_len, slow_fail]).verify_batch(TASKS, ["a", "b", "c"])
    assert not failed[0].scored and "'slow_fail' raised RuntimeError: grader offline" in failed[0].info["error"]

    async def inside_a_loop() -> list[Verdict]:     # the sync API called from a running event loop
        return RewardFunctionsVerifier([slow_len]).verify_batch(TASKS, ["ab", "a", "a"])

    assert asyncio.run(inside_a_loop())[0].reward == 2.0


# ---------------------------------------------------------------- on top of an env
class Flaky(Verifier):
    """Correct when the completion is the answer; "BOOM" is a scorer failure."""

    def verify(self, task: Task, completion: str) -> Verdict:
        if completion == "BOOM":
            return Verdict.infra("scorer down")
        return exact_verdict(completion == task.answer, feedback="try again")


def _env() -> VerifiableEnv:
    return VerifiableEnv(ListSource([Task(f"q{i}", f"{i}+{i}?", str(2 * i)) for i in range(4)]), Flaky(),
                         max_turns=2)


def test_on_top_of_an_env():
    env = with_reward_funcs(_env(), [brevity], [1.0], env_weight=2.0)
    tasks = [env.source[i] for i in range(3)]
    v = env.score_batch(tasks, ["0", "3 or so", "BOOM"])
    assert v[0].reward == pytest.approx(2.0 - 0.1) and v[0].correct and v[0].parts["env"] == 1.0
    assert v[1].reward == pytest.approx(-0.3) and not v[1].correct and v[1].feedback == "try again"
    assert not v[2].scored and v[2].info["error"] == "scorer down"   # the env could not judge: nor can the sum
    _, info = env.reset(seed=0)
    _, reward, terminated, _, step = env.step(info["task"].answer)
    assert terminated and step["correct"] and reward == pytest.approx(1.9)
    assert EnvSuite({"a": env}).score_batch([], []) == []
    with pytest.raises(TypeError, match="needs a proctor VerifiableEnv"):
        with_reward_funcs(object(), [brevity])       # type: ignore[arg-type]


def test_env_with_reward_funcs_passes_the_checker():
    # a penalty heavy enough that the right answer's reward is below 0: still judged correct
    env = with_reward_funcs(make_env("proctor/Countdown-v0", n=20, level=1), [brevity], [20.0])
    _, info = env.reset(seed=0)
    assert env.step(env.reference(info["task"]))[1] < 0
    report = check_env(env)
    assert report.ok, report.problems


# ---------------------------------------------------------------- a dataset and references
def test_a_dataset_env_scored_by_referenced_functions(tmp_path):
    (tmp_path / "my_rewards.py").write_text(
        "def exact(prompts, completions, solution, **kwargs):\n"
        "    return [1.0 if c.strip() == s else 0.0 for c, s in zip(completions, solution)]\n"
        "def shout(completions, **kwargs):\n"
        "    return [0.5 if c.isupper() else None for c in completions]\n")
    data = tmp_path / "rows.jsonl"
    words = ("hi", "OK", "no", "up", "go", "be", "me", "we")
    data.write_text("\n".join(json.dumps({"prompt": f"Say {w}", "solution": w}) for w in words))
    env = make_env("proctor/RewardFuncs-v0", tasks=str(data), reward_weights=[1.0, 2.0], pass_threshold=1.0,
                   reward_funcs=[f"{tmp_path / 'my_rewards.py'}:exact", f"{tmp_path / 'my_rewards.py'}:shout"])
    tasks = [env.source[i] for i in range(3)]
    v = env.score_batch(tasks, ["hi", "OK", "yes"])
    assert [x.reward for x in v] == [1.0, 2.0, 0.0] and [x.correct for x in v] == [True, True, False]
    assert check_env(env).ok
    held = make_env("proctor/RewardFuncs-v0", tasks=str(data), reward_funcs=[brevity], partition="eval",
                    eval_fraction=0.5)
    assert 0 < len(held.source) < 8
