"""Tools in the env contract: parsers, argument checks, and a scripted policy through every branch of
a tool episode (good call, malformed call, unknown tool, bad arguments, a failing tool, a timeout,
the limits, an infrastructure failure, an answer without tools). No sandbox: function tools."""

from __future__ import annotations

import math
import time
from typing import Literal, Optional

import pytest

from proctor.envs import ListSource, Task, Verifier, check_env, exact_verdict
from proctor.envs.tools import (FunctionTool, HermesParser, OpenAIJsonParser, Tool, ToolEnv, ToolLimits, ToolOutput,
                                check_arguments, function_schema, get_parser, register_parser)

HERMES = HermesParser()


def call(name: str, **arguments) -> str:
    return HERMES.format_call(name, arguments)


# ---------------------------------------------------------------------------- parsers

def test_hermes_reads_calls_and_the_text_around_them():
    reply = f"Let me compute.\n{call('add', a=1, b=2)}\n{call('echo', text='hi')}"
    parsed = HERMES.parse(reply)
    assert parsed.content == "Let me compute."
    assert [(c.name, dict(c.arguments)) for c in parsed.calls] == [("add", {"a": 1, "b": 2}), ("echo", {"text": "hi"})]
    assert not any(c.malformed for c in parsed.calls)
    # OpenAI's arguments-as-a-JSON-string and Qwen's "parameters" both read
    parsed = HERMES.parse('<tool_call>{"name": "add", "arguments": "{\\"a\\": 1}"}</tool_call>'
                          '<tool_call>{"name": "add", "parameters": {"a": 2}}</tool_call>')
    assert [dict(c.arguments) for c in parsed.calls] == [{"a": 1}, {"a": 2}]
    assert HERMES.parse("The answer is 4.").calls == ()


@pytest.mark.parametrize("reply, error", [
    ("<tool_call>{'name': 'add'}</tool_call>", "not valid JSON"),
    ('<tool_call>["add"]</tool_call>', "must be a JSON object"),
    ('<tool_call>{"arguments": {}}</tool_call>', '"name"'),
    ('<tool_call>{"name": "add", "arguments": [1]}</tool_call>', "must be a JSON object"),
    ('<tool_call>{"name": "add", "arguments": "{oops"}</tool_call>', "not JSON"),
    ('Sure. <tool_call>{"name": "add", "arguments": {"a": 1', "never closed"),
])
def test_hermes_malformed_calls_say_why(reply, error):
    calls = HERMES.parse(reply).calls
    assert len(calls) == 1 and calls[0].malformed and error in calls[0].error


def test_openai_json_parser_reads_openai_shapes():
    p = OpenAIJsonParser()
    assert [c.name for c in p.parse('{"name": "add", "arguments": {"a": 1}}').calls] == ["add"]
    assert [c.name for c in p.parse('[{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}]').calls] == ["a", "b"]
    shaped = p.parse('```json\n{"content": "x", "tool_calls": [{"id": "c1", "type": "function", "function": '
                     '{"name": "add", "arguments": "{\\"a\\": 3}"}}]}\n```')
    assert shaped.content == "x" and shaped.calls[0].id == "c1" and dict(shaped.calls[0].arguments) == {"a": 3}
    assert p.parse('{"answer": 4}').calls == () and p.parse("It is 4.").content == "It is 4."
    assert p.parse('{"name": "add", "arguments": ').calls[0].malformed
    assert p.format_call("add", {"a": 1}) == '{"name": "add", "arguments": {"a": 1}}'


def test_parsers_are_pluggable_and_unknown_names_are_refused():
    class Bracket:
        name = "bracket"

        def parse(self, text):
            return HermesParser().parse(text.replace("[[", "<tool_call>").replace("]]", "</tool_call>"))

        def format_call(self, name, arguments):
            return HermesParser().format_call(name, arguments).replace("<tool_call>", "[[").replace("</tool_call>", "]]")

    register_parser("bracket", Bracket)
    assert get_parser("bracket").parse('[[{"name": "add", "arguments": {}}]]').calls[0].name == "add"
    with pytest.raises(ValueError, match="unknown tool-call parser 'nope'.*hermes"):
        get_parser("nope")


# ---------------------------------------------------------------------------- schemas and arguments

def add(a: int, b: int = 0) -> int:
    """Add two integers.

    Args:
        a: the first number
        b: the second number
    """
    return a + b


def test_function_schema_is_read_from_the_signature_and_docstring():
    schema = function_schema(add)
    assert schema["description"] == "Add two integers."
    assert schema["parameters"] == {"type": "object", "required": ["a"], "properties": {
        "a": {"type": "integer", "description": "the first number"},
        "b": {"type": "integer", "description": "the second number"}}}

    def mode(kind: Literal["fast", "slow"], limit: Optional[float] = None, tags: list[str] = ()) -> str:
        return kind

    props = function_schema(mode)["parameters"]["properties"]
    assert props == {"kind": {"type": "string", "enum": ["fast", "slow"]}, "limit": {"type": "number"},
                     "tags": {"type": "array", "items": {"type": "string"}}}
    with pytest.raises(ValueError, match="argument 'x' has no type annotation"):
        function_schema(lambda x: x)
    assert FunctionTool(add).schema()["function"]["name"] == "add"


@pytest.mark.parametrize("arguments, problem", [
    ({"a": 1}, None),
    ({"a": 1.0}, None),                         # an integral float is an integer in JSON
    ({}, "missing required argument 'a'"),
    ({"a": "1"}, "'a' must be of type integer, got string"),
    ({"a": True}, "'a' must be of type integer, got boolean"),
    ({"a": 1, "c": 2}, "unknown argument 'c'"),
])
def test_arguments_are_checked_against_the_schema(arguments, problem):
    got = check_arguments(function_schema(add)["parameters"], arguments)
    assert got == problem if problem is None else problem in got


def test_nested_arguments_name_the_path():
    schema = {"type": "object", "properties": {"points": {"type": "array", "items": {
        "type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"], "additionalProperties": False}}}}
    assert check_arguments(schema, {"points": [{"x": 1}, {"x": "a"}]}) == "'points'[1].x must be of type number, got string"
    assert check_arguments(schema, {"points": [{"x": 1, "y": 2}]}).startswith("unknown argument 'y'")
    assert check_arguments(schema, {"points": [{}]}) == "missing required argument 'x' in 'points'[0]"


# ---------------------------------------------------------------------------- a scripted policy through ToolEnv

class SaysAnswer(Verifier):
    def verify(self, task, completion):
        return exact_verdict(completion.strip() == task.answer, info={"seen": completion})


class Broken(Tool):
    """A tool whose machinery fails (a sandbox gone)."""

    name, description = "broken", "always fails"
    parameters = {"type": "object", "properties": {}}

    def call(self, arguments, context):
        return ToolOutput("the sandbox engine is unreachable", "infra_error")


class Counter(Tool):
    """Per-episode state, freed at the episode's end."""

    name, description = "count", "counts its calls in this episode"
    parameters = {"type": "object", "properties": {}}
    ended = 0

    def call(self, arguments, context):
        context.state[self.name] = context.state.get(self.name, 0) + 1
        return ToolOutput(str(context.state[self.name]))

    def end_episode(self, context):
        Counter.ended += context.state.pop(self.name, 0) > 0


def slow(seconds: float) -> str:
    """Sleep, then say so."""
    time.sleep(seconds)
    return "slept"


def fails(x: int) -> str:
    """Raise."""
    raise ZeroDivisionError("no")


def env(**limits) -> ToolEnv:
    tasks = [Task(id=f"t{i}", prompt=[{"role": "user", "content": f"What is {i} + 3?"}], answer=str(i + 3))
             for i in range(3)]
    return ToolEnv(ListSource(tasks), SaysAnswer(), tools=[add, slow, fails, Broken(), Counter()],
                   limits=ToolLimits(**{"max_turns": 6, "timeout_s": 0.3, "max_calls_per_turn": 5, **limits}),
                   reference=lambda t: t.answer)


def test_every_branch_of_an_episode():
    e = env()
    obs, info = e.reset(options={"index": 2})
    assert obs == [{"role": "user", "content": "What is 2 + 3?"}] and {t["function"]["name"] for t in info["tools"]} == {
        "add", "slow", "fails", "broken", "count"}
    # a good call: its result comes back as a tool message; the reply stays in the history as written
    reply = "I will add. " + call("add", a=2, b=3)
    obs, reward, terminated, truncated, info = e.step(reply)
    assert (reward, terminated, truncated, info["tool_step"]) == (0.0, False, False, "tool_calls")
    assert obs[-2] == {"role": "assistant", "content": reply}
    assert obs[-1] == {"role": "tool", "name": "add", "tool_call_id": "call_1_0", "content": "5"}
    # malformed, unknown tool, bad arguments, a failing tool and a timeout in one reply: five error messages
    reply = ("<tool_call>{nope}</tool_call>" + call("sub", a=1) + call("add", a="2") + call("fails", x=1)
             + call("slow", seconds=2))
    _, _, terminated, _, info = e.step(reply)
    assert not terminated
    texts = [m["content"] for m in info["tool_messages"]]
    assert "malformed tool call" in texts[0] and "unknown tool 'sub'" in texts[1]
    assert "bad arguments for add: 'a' must be of type integer" in texts[2]
    assert texts[3] == "Error: ZeroDivisionError: no" and "did not finish within 0.3 s" in texts[4]
    kinds = info["tools"]["error_kinds"]
    assert kinds == {"malformed": 1, "unknown_tool": 1, "bad_arguments": 1, "error": 1, "timeout": 1}
    # an answer without a call ends the episode, judged on its text
    obs, reward, terminated, truncated, info = e.step("5")
    assert (reward, terminated, truncated) == (1.0, True, False) and info["verdict"].correct
    tools = info["verdict"].info["tools"]
    assert tools["calls"] == 6 and tools["errors"] == 5 and tools["turns"] == 3 and info["verdict"].info["tool_end"] == "answer"
    assert tools["time_s"] >= 0.3
    with pytest.raises(RuntimeError, match="reset"):
        e.step("5")


def test_answer_without_tools_and_what_the_verifier_reads():
    e = env()
    e.reset(options={"index": 0})
    _, reward, terminated, _, info = e.step("3")
    assert (reward, terminated) == (1.0, True) and info["verdict"].info["tools"]["calls"] == 0
    e.reset(options={"index": 0})
    # at the turn limit a reply with calls ends the episode; the verifier reads its text without the calls
    short = env(max_turns=1)
    short.reset(options={"index": 0})
    _, reward, terminated, truncated, info = short.step("3 " + call("add", a=1))
    assert (reward, terminated, truncated) == (1.0, True, True) and info["verdict"].info["seen"] == "3"
    assert info["verdict"].info["tool_end"] == "turn_limit" and info["tools"]["calls"] == 0


def test_limits_on_calls_per_episode_per_reply_and_result_length():
    e = env(max_calls=3, max_calls_per_turn=2, max_result_chars=100)
    e.reset(options={"index": 0})
    _, _, _, _, info = e.step(call("add", a=1) * 3)
    texts = [m["content"] for m in info["tool_messages"]]
    assert texts[:2] == ["1", "1"] and "1 more tool call(s) in this reply were not run: at most 2" in texts[2]
    _, _, _, _, info = e.step(call("add", a=1))
    assert "limit of 3 tool calls per episode is reached" in info["tool_messages"][0]["content"]
    assert info["tools"]["error_kinds"] == {"limit": 2}
    long = 10 ** 300
    _, _, _, _, info = e.step(call("slow", seconds=0) + "x")
    e.reset(options={"index": 0})
    _, _, _, _, info = e.step(call("add", a=long, b=0))
    shown = info["tool_messages"][0]["content"]
    assert len(shown) <= 100 and "characters cut" in shown and shown.startswith("1000") and shown.endswith("000")


def test_episode_time_budget():
    e = env(episode_time_s=0.3, timeout_s=1.0)
    e.reset(options={"index": 0})
    _, _, _, _, info = e.step(call("slow", seconds=0.35) + call("add", a=1))
    assert info["tool_messages"][0]["content"] == "Error: slow did not finish within 0.3 s"   # the budget bounds the call
    assert "0.3 s of tool time are spent" in info["tool_messages"][1]["content"]


def test_infra_failure_of_a_tool_is_not_judged():
    e = env()
    e.reset(options={"index": 0})
    _, reward, terminated, _, info = e.step("3 " + call("broken"))
    assert terminated and math.isnan(reward) and info["drop"] and info["status"] == "infra_error"
    assert "unreachable" in info["verdict"].info["error"] and info["verdict"].info["tool_end"] == "infra_error"


def test_per_episode_state_is_freed_when_the_episode_ends():
    e = env()
    before = Counter.ended
    e.reset(options={"index": 0})
    _, _, _, _, info = e.step(call("count") + call("count"))
    assert [m["content"] for m in info["tool_messages"]] == ["1", "2"]
    e.reset(options={"index": 1})             # a reset mid-episode ends it
    assert Counter.ended == before + 1
    _, _, _, _, info = e.step(call("count"))
    assert info["tool_messages"][0]["content"] == "1"   # a fresh episode, fresh state
    e.step("4")
    assert Counter.ended == before + 2


def test_declarations_and_arguments_are_checked_at_construction():
    tasks = ListSource([Task("t", [{"role": "user", "content": "q"}], "a")])
    with pytest.raises(ValueError, match="two tools are named 'add'"):
        ToolEnv(tasks, SaysAnswer(), tools=[add, add])
    with pytest.raises(ValueError, match="limits.max_turns"):
        ToolEnv(tasks, SaysAnswer(), tools=[add], max_turns=3)
    with pytest.raises(ValueError, match="chat prompts"):
        ToolEnv(tasks, SaysAnswer(), tools=[add], chat=False)
    with pytest.raises(ValueError, match="ToolLimits.max_calls must be an integer >= 1"):
        ToolEnv(tasks, SaysAnswer(), tools=[add], limits={"max_calls": 0})
    with pytest.raises(ValueError, match="tool_limits.turns is not a ToolLimits field"):
        ToolLimits.of({"turns": 3})
    with pytest.raises(ValueError, match="must be 1-64 letters"):
        FunctionTool(add, name="add numbers")


def test_tool_env_passes_both_checkers():
    from gymnasium.utils.env_checker import check_env as gymnasium_check

    report = check_env(env())
    assert report.ok, report.problems
    gymnasium_check(env(), skip_render_check=True)


def test_the_readme_example_env_passes_the_checker():
    from pathlib import Path

    from proctor.envs import make_env

    path = Path(__file__).resolve().parents[1] / "examples" / "envs" / "tool_env.py"
    assert len(path.read_text().splitlines()) < 40
    env = make_env(f"{path}:make_env")
    report = check_env(env)
    assert report.ok and "a tool call comes back as a tool message; a bad one is a counted error" in report.passed
    env.close()


def test_tool_arithmetic_questions_and_their_partitions():
    from proctor.envs import make_env
    from proctor.envs.core.splits import question_key

    shapes = [["*", 2, 2], ["+", 3, 3]]
    train = make_env("proctor/PythonToolMath-v0", n=200, shapes=shapes, partition="train").source
    held = make_env("proctor/PythonToolMath-v0", n=50, shapes=shapes, partition="eval").source
    for task in [train[i] for i in range(len(train))] + [held[i] for i in range(len(held))]:
        a, op, b = task.data["expression"].split()
        assert op in "*+" and str(eval(task.data["expression"])) == task.answer   # noqa: S307 - our own arithmetic
        assert len(a) == (2 if op == "*" else 3) and task.prompt == f"What is {task.data['expression']}?"
    assert not {question_key(train[i]) for i in range(len(train))} & {question_key(held[i]) for i in range(len(held))}
    with pytest.raises(ValueError, match="each shape is"):
        make_env("proctor/PythonToolMath-v0", shapes=[["/", 2, 2]])
