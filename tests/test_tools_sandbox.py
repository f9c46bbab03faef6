"""The built-in tools on the real sandbox: ``python`` (one stateful session per episode, closed at its
end) and ``run_tests`` (visible tests only; hidden tests judge), and both registered tool envs against
`proctor envs check` and Gymnasium's own checker."""

from __future__ import annotations

import math

import pytest

from proctor.envs import ListSource, Task, check_env, make_env
from proctor.envs.math import MathVerifier
from proctor.envs.tools import HermesParser, PythonTool, ToolEnv, ToolLimits
from proctor.sandbox import InfraError

pytestmark = pytest.mark.docker
CALL = HermesParser().format_call


def python(code: str) -> str:
    return CALL("python", {"code": code})


@pytest.fixture(scope="module")
def sb(docker_ready):
    from proctor.sandbox import Sandbox

    with Sandbox(startup_check=()) as sandbox:
        yield sandbox


def math_env(sandbox, **limits) -> ToolEnv:
    tasks = [Task(f"t{i}", [{"role": "user", "content": f"What is {i} * 7919?"}], str(i * 7919)) for i in range(3)]
    return ToolEnv(ListSource(tasks), MathVerifier(), tools=[PythonTool(sandbox)],
                   limits=ToolLimits(**{"max_turns": 6, "timeout_s": 3.0, **limits}))


def test_python_state_lives_for_one_episode_in_its_own_session(sb):
    env = math_env(sb)
    env.reset(options={"index": 2})
    _, _, _, _, info = env.step(python("import math\nx = 2 * 7919\nprint('x is set')"))
    assert info["tool_messages"][0]["content"] == "x is set"
    session = env.episode.context.state["python"]
    _, _, _, _, info = env.step(python("x + math.floor(0.5)"))
    assert info["tool_messages"][0]["content"] == "15838"
    _, _, _, _, info = env.step(python("1 / 0"))
    shown = info["tool_messages"][0]["content"]
    assert shown.startswith("Traceback") and shown.endswith("ZeroDivisionError: division by zero")
    _, reward, terminated, _, info = env.step("\\boxed{15838}")
    assert (reward, terminated) == (1.0, True) and info["verdict"].info["tools"]["error_kinds"] == {"error": 1}
    assert session.closed                      # freed at the episode's end
    env.reset(options={"index": 2})
    _, _, _, _, info = env.step(python("x"))
    assert "NameError" in info["tool_messages"][0]["content"]   # a new episode, a new interpreter
    assert env.episode.context.state["python"] is not session
    env.close()


def test_a_timeout_is_a_tool_error_and_the_session_goes_on_reset(sb):
    env = math_env(sb, timeout_s=1.0)
    env.reset(options={"index": 0})
    env.step(python("y = 5"))
    _, _, terminated, _, info = env.step(python("while True:\n    pass"))
    shown = info["tool_messages"][0]["content"]
    assert not terminated and "did not finish within 1 s" in shown and "session was reset" in shown
    assert info["tools"]["error_kinds"] == {"timeout": 1}
    _, _, _, _, info = env.step(python("'y' in globals()"))
    assert info["tool_messages"][0]["content"] == "False"
    env.close()


class NoSessions:
    """A sandbox whose sessions cannot start (no host can start containers)."""

    def session(self, language="python", *, limits=None):
        raise InfraError("no sandbox host can start containers")


def test_a_session_that_cannot_start_is_infra_error_not_a_wrong_answer():
    env = ToolEnv(ListSource([Task("t", [{"role": "user", "content": "q"}], "1")]), MathVerifier(),
                  tools=[PythonTool(NoSessions())])
    env.reset()
    _, reward, terminated, _, info = env.step(python("1"))
    assert terminated and math.isnan(reward) and info["drop"] and "no sandbox host" in info["verdict"].info["error"]


def test_python_tool_math_passes_both_checkers(docker_ready):
    from gymnasium.utils.env_checker import check_env as gymnasium_check

    env = make_env("proctor/PythonToolMath-v0", n=60)
    try:
        report = check_env(env)
        assert report.ok, report.problems
        gymnasium_check(env, skip_render_check=True)
    finally:
        env.close()


def test_code_agent_runs_visible_tests_and_hidden_tests_judge(docker_ready):
    from gymnasium.utils.env_checker import check_env as gymnasium_check

    env = make_env("proctor/CodeAgent-v0")
    try:
        report = check_env(env, rollouts=2)
        assert report.ok, report.problems
        gymnasium_check(env, skip_render_check=True)
        _, info = env.reset(options={"task": next(env.source[i] for i in range(len(env.source))
                                                  if env.source[i].id == "HumanEval/0")})
        assert {t["function"]["name"] for t in info["tools"]} == {"run_tests", "python"}
        # passes the one visible test and nothing else
        cheat = "def has_close_elements(numbers, threshold):\n    return True\n"
        _, _, _, _, step = env.step(CALL("run_tests", {"code": "def has_close_elements(numbers, threshold):\n"
                                                               "    return False\n"}))
        assert step["tool_messages"][0]["content"].startswith("The visible tests failed")
        _, _, _, _, step = env.step(CALL("run_tests", {"code": cheat}))
        assert step["tool_messages"][0]["content"] == "All visible tests passed."
        _, reward, terminated, _, step = env.step(f"```python\n{cheat}```")
        assert terminated and reward == 0.0 and not step["correct"]   # the hidden tests judge
        assert step["verdict"].info["tools"]["by_tool"] == {"run_tests": 2}
    finally:
        env.close()


def test_split_visible_keeps_the_first_assert_and_leaves_loops_whole():
    from proctor.envs.code.agent import split_visible

    tests = "X = 1\n\ndef check(candidate):\n    import math\n    assert candidate(1) == 2\n    assert candidate(2) == 3\n"
    assert split_visible(tests) == "X = 1\n\ndef check(candidate):\n    import math\n    assert candidate(1) == 2\n"
    looped = "def check(candidate):\n    for i in range(3):\n        assert candidate(i) == i + 1\n"
    assert split_visible(looped) is None        # one asserting statement: nothing would stay hidden
    assert split_visible("assert f(1) == 2\n") is None
