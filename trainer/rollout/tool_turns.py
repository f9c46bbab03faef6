"""Tool episodes, token in / token out: generate -> read calls -> run tools -> append results -> generate.

For every rollout of a tool env (``proctor.envs.tools.ToolEnv``) the first reply has been
sampled; :meth:`ToolTurns.run` plays the episodes out together:

1. each live episode's latest reply goes to its ``ToolEpisode.act`` (the env's own rule, the
   one ``step()`` follows), every episode's tools in a thread pool at once, so a batch's
   sandbox sessions work side by side;
2. an episode whose reply answered (no call), reached ``max_turns``, was cut at
   ``max_new_tokens`` (its calls are not run) or hit a tool's infrastructure failure ends;
3. the others get their ``tool`` messages as *tokens* appended to the very ids that were
   sampled (``ChatTurns.feedback_ids``: what the chat template, given the env's tools, puts
   between the end of the reply and the start of the next), with a learn mask of 0 and
   log-prob 0: tool results are context, never trained on;
4. their next replies are sampled (``sample``: the run's sampling, or greedy in evaluation),
   until no episode is live.

The final replies are judged in one batch per env (``ToolEnv.finish_batch``); an episode a tool
failed for is ``infra_error`` (dropped, never scored wrong). Each rollout carries its episode's
counts in ``extra["tools"]`` and ``extra["turns"]``; :func:`tool_metrics` makes the step's
tool columns from them.
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Optional, Sequence

from proctor.envs import EnvSuite, SuiteItem, Verdict
from proctor.envs.tools import ToolEpisode, ToolStep, is_tool_env

from .base import Rollout
from .multiturn import ChatTurns, Conversation

SampleFn = Callable[[list[list[int]]], list[Rollout]]   # one next reply per prompt, in order


@dataclass
class _Live:
    """One episode in play: its env's name, its episode, its conversation as the template sees it."""

    env: str
    episode: ToolEpisode
    conversation: Optional[Conversation] = None
    step: Optional[ToolStep] = None


class ToolTurns:
    """The tool episodes of a suite's tool envs (others are left to the caller)."""

    def __init__(self, suite: EnvSuite, tokenizer: Any, chat_template_kwargs: Optional[Mapping[str, Any]] = None,
                 workers: Optional[int] = None) -> None:
        self.suite = suite
        self.tokenizer = tokenizer
        envs = {name: env for name, env in suite.envs.items() if is_tool_env(env)}
        if not envs:
            raise ValueError("ToolTurns: the suite has no tool env (proctor.envs.tools.ToolEnv)")
        kwargs = dict(chat_template_kwargs or {})
        if "tools" in kwargs:
            raise ValueError("data.chat_template_kwargs must not set 'tools': each tool env renders its own")
        self.chats = {name: ChatTurns(tokenizer, {**kwargs, "tools": env.tool_schemas()}) for name, env in envs.items()}
        self.workers = workers or max(env.concurrency for env in envs.values())

    def covers(self, item: SuiteItem) -> bool:
        return item.env in self.chats

    def run(self, items: Sequence[SuiteItem], rollouts: Sequence[Rollout], sample: SampleFn
            ) -> tuple[list[Rollout], list[Verdict], int]:
        """Play out the episodes whose first replies are ``rollouts`` (all of tool envs); returns
        (the whole episodes as rollouts, their verdicts, the most replies any episode had)."""
        if not all(self.covers(item) for item in items):
            raise ValueError("ToolTurns.run: every item must be of a tool env (covers(item))")
        rollouts = list(rollouts)
        live = [_Live(item.env, self.suite.envs[item.env].open_episode(item.task)) for item in items]
        started: dict[tuple, Conversation] = {}
        turns = 1 if rollouts else 0
        with ThreadPoolExecutor(self.workers, thread_name_prefix="proctor-tools") as pool:
            try:
                playing = list(range(len(rollouts)))
                while playing:
                    playing = self._act(pool, live, rollouts, playing)
                    if not playing:
                        break
                    turns += 1
                    self._next_replies(items, live, rollouts, playing, started, sample)
            finally:
                list(pool.map(lambda e: e.episode.close(), live))
        return rollouts, self._verdicts(items, live, rollouts), turns

    def _act(self, pool: ThreadPoolExecutor, live: list[_Live], rollouts: list[Rollout], playing: list[int]
             ) -> list[int]:
        """Each playing episode's latest reply acted on (tools at once); returns those that go on."""
        def act(i: int) -> ToolStep:
            e = live[i].episode
            return e.act(rollouts[i].text) if rollouts[i].finish_reason == "stop" else e.cut_off()

        for i, step in zip(playing, pool.map(act, playing)):
            live[i].step = step
        ended = [i for i in playing if live[i].step.final]   # type: ignore[union-attr]
        list(pool.map(lambda i: live[i].episode.close(), ended))   # free their sessions now
        return [i for i in playing if not live[i].step.final]   # type: ignore[union-attr]

    def _next_replies(self, items: Sequence[SuiteItem], live: list[_Live], rollouts: list[Rollout],
                      playing: list[int], started: dict[tuple, Conversation], sample: SampleFn) -> None:
        """The tool messages as tokens after each playing episode's ids, and its next reply sampled."""
        inserted: dict[int, list[int]] = {}
        for i in playing:
            e, r, chat = live[i], rollouts[i], self.chats[live[i].env]
            if e.conversation is None:   # a group's rollouts share their prompt's check
                key = (e.env, r.prompt_ids)
                if key not in started:
                    started[key] = chat.start(self.suite.prompt_of(items[i]), r.prompt_ids)
                first = started[key]
                e.conversation = Conversation(list(first.messages), first.context)
            assert e.step is not None
            inserted[i] = chat.feedback_ids(e.conversation, r.completion_ids, e.step.messages)
        answers = sample([list(rollouts[i].prompt_ids) + list(rollouts[i].completion_ids) + inserted[i]
                          for i in playing])
        if len(answers) != len(playing):
            raise RuntimeError(f"the sampler returned {len(answers)} replies for {len(playing)} prompts")
        for i, answer in zip(playing, answers):
            r, env_ids = rollouts[i], inserted[i]
            rollouts[i] = replace(
                r, completion_ids=r.completion_ids + tuple(env_ids) + answer.completion_ids,
                logprobs=r.logprobs + (0.0,) * len(env_ids) + answer.logprobs,
                learn_mask=r.learned() + (0,) * len(env_ids) + (1,) * len(answer.completion_ids),
                text=answer.text, finish_reason=answer.finish_reason, weight_version=answer.weight_version)

    def _verdicts(self, items: Sequence[SuiteItem], live: list[_Live], rollouts: list[Rollout]) -> list[Verdict]:
        """Every final reply judged, one batch per env; the counts go on each rollout too."""
        out: list[Optional[Verdict]] = [None] * len(items)
        for name in dict.fromkeys(e.env for e in live):
            idx = [i for i, e in enumerate(live) if e.env == name]
            env = self.suite.envs[name]
            verdicts = env.finish_batch([items[i].task for i in idx], [rollouts[i].text for i in idx],
                                        [live[i].step for i in idx], [live[i].episode.stats for i in idx])
            for i, v in zip(idx, verdicts):
                out[i] = v
        for i, e in enumerate(live):
            stats, end = e.episode.stats, e.step.reason if e.step is not None else "answer"
            rollouts[i] = replace(rollouts[i], extra={**rollouts[i].extra, "turns": stats.turns,
                                                      "tools": {**stats.as_info(), "end": end}})
        return out  # type: ignore[return-value]


def tool_episodes(rollouts: Sequence[Rollout], verdicts: Sequence[Verdict]) -> list[tuple[dict, Verdict]]:
    """(tool counts, verdict) of each tool episode among ``rollouts`` (plain data: it pickles)."""
    return [(dict(r.extra["tools"]), v) for r, v in zip(rollouts, verdicts) if "tools" in r.extra]


def tool_metrics(eps: Sequence[tuple[Mapping[str, Any], Verdict]], prefix: str = "") -> dict[str, float]:
    """The tool columns of a set of episodes (``tool_episodes``; none: no columns): calls, errors
    and seconds per episode, replies per episode, how many used a tool, and the reward and pass
    rate of the episodes that did against those that did not."""
    if not eps:
        return {}
    n = len(eps)
    calls = sum(t["calls"] for t, _ in eps)
    errors = sum(t["errors"] for t, _ in eps)
    seconds = sum(t["time_s"] for t, _ in eps)
    used = [v for t, v in eps if t["calls"] > 0 and v.scored]
    unused = [v for t, v in eps if t["calls"] == 0 and v.scored]
    out = {"tool_episodes": float(n), "tool_calls_per_episode": calls / n, "tool_errors_per_episode": errors / n,
           "tool_error_frac": errors / calls if calls else math.nan, "tool_time_s": seconds,
           "tool_time_per_call_s": seconds / calls if calls else math.nan,
           "turns_mean": sum(t["turns"] for t, _ in eps) / n,
           "tool_use_frac": sum(t["calls"] > 0 for t, _ in eps) / n,
           "tool_infra_errors": float(sum(t["end"] == "infra_error" for t, _ in eps)),
           "reward_with_tools": _mean([v.reward for v in used]),
           "reward_without_tools": _mean([v.reward for v in unused]),
           "pass_rate_with_tools": _mean([float(v.correct) for v in used]),
           "pass_rate_without_tools": _mean([float(v.correct) for v in unused])}
    for t, _ in eps:
        for kind, count in t["error_kinds"].items():
            out[f"tool_errors_{kind}"] = out.get(f"tool_errors_{kind}", 0.0) + count
    return {f"{prefix}{k}": v for k, v in out.items()}


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else math.nan


__all__ = ["SampleFn", "ToolTurns", "tool_episodes", "tool_metrics"]
