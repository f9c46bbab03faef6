"""`check_env`: tells an env author exactly what is wrong, in the spirit of Gymnasium's checker."""

from __future__ import annotations

import math
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Optional

import gymnasium as gym

from .env import VerifiableEnv
from .types import Verdict

ODD_COMPLETIONS = ("", " ", "\x00", "}{" * 50, "\\boxed{" * 200, "ü" * 10, "x" * 100_000,
                   "<answer></answer>", "```python\n```")


@dataclass(frozen=True)
class Problem:
    check: str
    message: str
    fix: str = ""


@dataclass
class CheckReport:
    passed: list[str]
    problems: list[Problem]

    @property
    def ok(self) -> bool:
        return not self.problems


def check_env(env: gym.Env, *, seeds: tuple[int, ...] = (0, 1, 2), rollouts: int = 3) -> CheckReport:
    """Run the contract checks; never raises for what the env does wrong."""
    report = CheckReport(passed=[], problems=[])
    for name, check, fix, applies in _CHECKS:
        if not applies(env):
            continue
        try:
            problem = check(env, seeds, rollouts)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a readable problem
            tb = traceback.format_exc(limit=3).strip().splitlines()[-1]
            problem = f"raised {type(exc).__name__}: {exc} ({tb})"
        if problem:
            report.problems.append(Problem(name, problem, fix))
            if name == "api":   # nothing else can run on what is not an env
                return report
        else:
            report.passed.append(name)
    return report


def _api(env: Any, seeds: tuple[int, ...], rollouts: int) -> Optional[str]:
    if not isinstance(env, gym.Env):
        return f"{type(env).__name__} is not a gymnasium.Env"
    for attr in ("observation_space", "action_space"):
        if getattr(env, attr, None) is None:
            return f"{attr} is not set"
    return None


def _reset_contract(env: Any, seeds: tuple[int, ...], rollouts: int) -> Optional[str]:
    out = env.reset(seed=seeds[0])
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict)):
        return f"reset() must return (observation, info: dict), got {type(out).__name__}"
    if not env.observation_space.contains(out[0]):
        return f"reset()'s observation {str(out[0])[:80]!r} is not in {env.observation_space}"
    return None


def _determinism(env: Any, seeds: tuple[int, ...], rollouts: int) -> Optional[str]:
    for seed in seeds:
        a, _ = env.reset(seed=seed)
        b, _ = env.reset(seed=seed)
        if a != b:
            return f"reset(seed={seed}) gave two different observations"
    observations = [str(env.reset(seed=s)[0]) for s in seeds]
    size = len(getattr(env, "source", ())) if hasattr(env, "source") else 2
    if size > 1 and len(set(observations)) == 1 and len(seeds) > 1:
        return f"every seed {seeds} gave the same task: does reset() use self.np_random?"
    return None


def _step_contract(env: Any, seeds: tuple[int, ...], rollouts: int) -> Optional[str]:
    env.reset(seed=seeds[0])
    out = env.step("I am not sure.")
    if not (isinstance(out, tuple) and len(out) == 5):
        return f"step() must return (obs, reward, terminated, truncated, info), got {str(out)[:80]}"
    obs, reward, terminated, truncated, info = out
    if not isinstance(terminated, bool) or not isinstance(truncated, bool):
        return "terminated and truncated must be bool"
    if not isinstance(info, dict) or not isinstance(info.get("verdict"), Verdict):
        return "info['verdict'] must hold the Verdict (reward parts, verifier details)"
    return _reward_problem(reward, info["verdict"])


def _multi_turn_rule(env: Any, seeds: tuple[int, ...], rollouts: int) -> Optional[str]:
    # The trainer's token-level rollouts continue an episode when continues() says so and show
    # feedback_turn(): step() must agree, or training runs other episodes than the env defines.
    for i in range(rollouts):
        env.reset(seed=seeds[0] + i)
        obs, _, terminated, _, info = env.step("I am not sure.")
        verdict = info["verdict"]
        goes_on = env.continues(verdict, info["turn"])
        if terminated == goes_on:
            return (f"after turn {info['turn']} step() {'ended' if terminated else 'went on with'} the episode but "
                    f"continues() says {goes_on} (verdict feedback: {str(verdict.feedback)[:60]!r})")
        if goes_on and env.chat and obs[-1] != env.feedback_turn(verdict):
            return f"step()'s next observation ends with {str(obs[-1])[:80]}, not feedback_turn()'s message"
    return None


def _odd_inputs(env: Any, seeds: tuple[int, ...], rollouts: int) -> Optional[str]:
    for text in ODD_COMPLETIONS:
        env.reset(seed=seeds[0])
        _, reward, _, _, info = env.step(text)
        problem = _reward_problem(reward, info.get("verdict"))
        if problem:
            return f"completion {text[:20]!r}: {problem}"
        if info["verdict"].scored and info["verdict"].correct:
            return f"the junk completion {text[:20]!r} was judged correct: a reward hack"
    return None


def _references_pass(env: Any, seeds: tuple[int, ...], rollouts: int) -> Optional[str]:
    for i in range(rollouts):
        _, info = env.reset(seed=seeds[0] + i)
        completion = env.reference(info["task"])
        if completion is None:
            continue
        _, reward, terminated, _, step_info = env.step(completion)
        verdict = step_info["verdict"]
        if not verdict.scored:
            return f"task {info['task'].id}: the reference completion was not judged: {verdict.info}"
        # reward functions may score a right answer below 0 (a length penalty): correct decides
        if not verdict.correct or (verdict.bounded and reward <= 0):
            return (f"task {info['task'].id}: the reference completion {completion[:80]!r} scored "
                    f"{reward} ({dict(verdict.info)}): the verifier rejects a right answer")
        if not terminated:
            return "a solved single-turn episode must terminate"
    return None


def _batch(env: Any, seeds: tuple[int, ...], rollouts: int) -> Optional[str]:
    tasks = env.sample_tasks(4)
    verdicts = env.score_batch(tasks, ["no idea"] * len(tasks))
    if len(verdicts) != len(tasks):
        return f"score_batch returned {len(verdicts)} verdicts for {len(tasks)} completions"
    for v in verdicts:
        problem = _reward_problem(v.reward, v)
        if problem:
            return problem
    return None


def _difficulty(env: Any, seeds: tuple[int, ...], rollouts: int) -> Optional[str]:
    from .difficulty import check_knob

    return check_knob(env.difficulty, env.source)


def _tool_turns(env: Any, seeds: tuple[int, ...], rollouts: int) -> Optional[str]:
    # A call to a tool that does not exist must come back as a counted error message, never a crash
    # or the episode's end; the schemas must be OpenAI function schemas the chat template can render.
    for schema in env.tool_schemas():
        function = schema.get("function", {}) if isinstance(schema, dict) else {}
        if schema.get("type") != "function" or not function.get("name") or "parameters" not in function:
            return f"tool schema {str(schema)[:120]} is not {{'type': 'function', 'function': {{name, parameters}}}}"
    env.reset(seed=seeds[0])
    obs, reward, terminated, _, info = env.step(env.parser.format_call("no_such_tool_c0ffee", {}))
    if terminated:
        return "a reply with a tool call ended the episode; it must get the tool's message and go on"
    if not obs or obs[-1].get("role") != "tool" or "no_such_tool_c0ffee" not in obs[-1].get("content", ""):
        return f"a call to an unknown tool got {str(obs[-1:])[:120]}, not a tool message that names the tool"
    if info.get("tools", {}).get("errors") != 1:
        return f"the unknown tool was not counted as one tool error (info['tools'] = {info.get('tools')})"
    _, _, terminated, _, _ = env.step("I am not sure.")
    return None if terminated else "an answer without a tool call did not end the episode"


def _always(env: Any) -> bool:
    return True


# (name, check, what to fix, whether it applies): run in order; the first failing "api" ends the run.
_CHECKS: list[tuple[str, Callable[[Any, tuple[int, ...], int], Optional[str]], str, Callable[[Any], bool]]] = [
    ("api", _api, "subclass proctor.envs.VerifiableEnv (or gymnasium.Env) and set both spaces", _always),
    ("reset returns (observation, info)", _reset_contract, "return the prompt and a dict from reset()", _always),
    ("deterministic under seed", _determinism,
     "draw tasks with self.np_random after super().reset(seed=seed)", _always),
    ("step returns a reward in [0, 1] and the verdict", _step_contract,
     "return the rubric's reward; infra failures must be Verdict.infra(...), not exceptions", _always),
    ("step() continues an episode exactly when continues() says", _multi_turn_rule,
     "decide in continues(verdict, turn) and build the feedback in feedback_turn(verdict); step() calls both",
     lambda env: isinstance(env, VerifiableEnv) and env.max_turns > 1),
    ("odd completions score 0 without raising", _odd_inputs, "a verifier must turn any text into a verdict", _always),
    ("a right answer scores as correct", _references_pass, "check the verifier's extraction and comparison",
     lambda env: callable(getattr(env, "reference", None))),
    ("score_batch keeps one verdict per completion", _batch, "return verdicts in the order of the completions",
     lambda env: hasattr(env, "score_batch") and hasattr(env, "sample_tasks")),
    ("a tool call comes back as a tool message; a bad one is a counted error", _tool_turns,
     "run calls through ToolEpisode.act (proctor.envs.tools.ToolEnv does)",
     lambda env: callable(getattr(env, "tool_schemas", None)) and hasattr(env, "parser")),
    ("the difficulty knob places every task, on two levels or more", _difficulty,
     "write a finite number to task.data[knob.key] for every task, with edges inside its range",
     lambda env: isinstance(env, VerifiableEnv) and env.difficulty is not None),
]


def _reward_problem(reward: Any, verdict: Optional[Verdict]) -> Optional[str]:
    if not isinstance(reward, float):
        return f"reward must be a float, got {type(reward).__name__}"
    if verdict is not None and not verdict.scored:
        return None if math.isnan(reward) else "an infra_error verdict must carry a NaN reward, never a number"
    if verdict is not None and not verdict.bounded:   # user reward functions: any finite number
        return None if math.isfinite(reward) else f"reward {reward} is not a finite number"
    if math.isnan(reward) or not 0.0 <= reward <= 1.0:
        return f"reward {reward} is outside [0, 1]"
    return None
