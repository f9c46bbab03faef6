"""Held-out evaluation during training: greedy pass rate and sampled pass@k on a fixed eval suite.

    settings = EvalSettings.from_config(cfg)
    items = eval_items(eval_suite)                        # every task of every eval env, in order
    evaluate(generator, tokenize, eval_suite, items, settings)
    → {"eval_greedy_pass_rate": 0.41, "eval_pass@4": 0.63, "eval_arithmetic_greedy_pass_rate": 0.41, ...}

The eval suite is either separate envs (``eval.envs``) or the held-out partition of each
train env (``eval.split``; the train env then draws only its train partition), built by
``proctor.trainer.build.build_eval_suite``. Nothing here knows a trainer: the loop calls
:func:`evaluate` with the generator the rollouts use, so the figures are those of the
weights the next step samples from.

With several processes each evaluates its share (every ``processes``-th prompt) and the
results are gathered, so every process returns the same values; each generates as many
prompts as the largest share (a repeat of one of its own pads it), since a sharded model
generates in lockstep.

pass@k is the unbiased estimator of Chen et al. (2021) from n = max(k) samples per
prompt: ``1 - C(n - c, k) / C(n, k)`` with c of the n correct. A completion that could
not be judged (infra error) is left out, never counted wrong.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any, Callable, Literal, Optional, Sequence

from proctor.envs import EnvSuite, SuiteItem, Verdict
from proctor.envs.core.verifier import all_verdicts

from .config import GRPOConfig
from .rollout import Generator, Rollout, SamplingParams
from .rollout.tool_turns import SampleFn, ToolTurns, tool_episodes, tool_metrics

TokenizeFn = Callable[[SuiteItem], list[int]]
Judged = Optional[bool]   # a completion's verdict: correct, wrong, or None (not judged: infra error)


def _alone(value: Any) -> list[Any]:
    return [value]


@dataclass(frozen=True)
class Share:
    """This process's part of the eval set: the prompts whose index % ``processes`` is ``rank``.
    ``gather`` returns one picklable value from every process, in rank order (a collective)."""

    rank: int = 0
    processes: int = 1
    gather: Callable[[Any], list[Any]] = _alone

    def indices(self, n: int) -> tuple[list[int], int]:
        """(this share's indices of ``n`` items, how many prompts every process generates)."""
        return list(range(self.rank, n, self.processes)), -(-n // self.processes)


@dataclass(frozen=True)
class EvalSettings:
    """What one evaluation measures: greedy pass@1 and/or sampled pass@k for each k.

    ``sampling`` is the run's: pass@k samples with it (``n`` = max k); greedy decoding keeps
    its ``max_new_tokens``, stop strings and repetition penalty (top_p/top_k/min_p never
    exclude the most likely token, so they do not change a greedy answer). Prompts longer
    than ``max_prompt_length`` are cut from the left, or left out with ``prompt_overflow:
    drop`` (counted: ``eval_prompts_truncated`` / ``eval_prompts_dropped``), as in training."""

    greedy: bool = True
    k: tuple[int, ...] = ()
    sampling: SamplingParams = SamplingParams(n=1, max_new_tokens=8)
    max_prompt_length: Optional[int] = None
    prompt_overflow: Literal["truncate_left", "drop"] = "truncate_left"

    def __post_init__(self) -> None:
        if not self.greedy and not self.k:
            raise ValueError("EvalSettings: nothing to measure; set greedy=True or give at least one k")
        if any(k < 1 for k in self.k):
            raise ValueError(f"EvalSettings.k: every k must be >= 1 (got {list(self.k)})")

    @classmethod
    def from_config(cls, cfg: GRPOConfig, sampling: SamplingParams) -> "EvalSettings":
        """The eval section's k and greedy, with the run's sampling params and prompt limit."""
        return cls(greedy=cfg.eval.greedy, k=tuple(sorted(set(cfg.eval.k))), sampling=sampling,
                   max_prompt_length=cfg.data.max_prompt_length, prompt_overflow=cfg.data.prompt_overflow)


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimate from ``n`` samples of which ``c`` are correct (n >= k)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n (got n={n}, c={c}, k={k})")
    if n - c < k:   # every k-subset holds a correct sample
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def eval_items(suite: EnvSuite) -> list[SuiteItem]:
    """Every task of every env of ``suite``, env by env, in source order: the same set at every eval."""
    return [SuiteItem(name, env.source[i]) for name, env in suite.envs.items() for i in range(len(env.source))]


def is_due(step: int, every: int, max_steps: int) -> bool:
    """Whether an evaluation follows ``step``: every ``every`` steps and after the last (0: never);
    the one before step 1 is ``step == 0``."""
    return every > 0 and (step == 0 or step % every == 0 or step == max_steps)


def evaluate(generator: Generator, tokenize: TokenizeFn, suite: EnvSuite, items: Sequence[SuiteItem],
             settings: EvalSettings, share: Share = Share(), tools: Optional[ToolTurns] = None) -> dict[str, float]:
    """The eval_* values of ``items`` under the generator's current weights: overall and per env
    (``eval_<env>_greedy_pass_rate``, ``eval_<env>_pass@k``), the number of prompts, the time and
    the tokens generated (``tokens_eval``: every process's; ``tokens_eval_process``: this one's).
    Tool envs' episodes are played out with their tools (``tools``), greedy or sampled as the
    first reply was; their counts are ``eval_greedy_tool_*`` columns."""
    if not items:
        raise ValueError("evaluate: no eval items; the eval suite's envs hold no tasks")
    t0 = time.perf_counter()
    items, prompts, out = _limited_prompts(items, [tokenize(item) for item in items], settings)
    mine, width = share.indices(len(items))
    own = [items[i] for i in mine]
    padded = [prompts[i] for i in mine] + [prompts[mine[0] if mine else 0]] * (width - len(mine))
    s = settings.sampling
    local: dict[str, Any] = {"greedy": [], "sampled": [], "tokens": 0, "tools": []}
    if settings.greedy:
        greedy = generator.greedy_rollouts(padded, s.max_new_tokens, stop=s.stop,
                                           repetition_penalty=s.repetition_penalty)
        greedy_sample = lambda ps: generator.greedy_rollouts(ps, s.max_new_tokens, stop=s.stop,  # noqa: E731
                                                             repetition_penalty=s.repetition_penalty)
        finals, verdicts = _judge(suite, tools, own, greedy[:len(own)], greedy_sample)
        local["tokens"] += sum(sum(r.learned()) for r in finals + greedy[len(own):])
        local["greedy"] = [(item.env, _judged(v)) for item, v in zip(own, verdicts)]
        local["tools"] = tool_episodes(finals, verdicts)
    if settings.k:
        groups = generator.generate(padded, replace(s, n=max(settings.k)))
        local["tokens"] += sum(sum(r.learned()) for group in groups[len(own):] for r in group)
        groups = groups[:len(own)]
        flat_items = [item for item, group in zip(own, groups) for _ in group]
        one = replace(s, n=1)
        finals, flat = _judge(suite, tools, flat_items, [r for group in groups for r in group],
                              lambda ps: [g[0] for g in generator.generate(ps, one)])
        local["tokens"] += sum(sum(r.learned()) for r in finals)
        verdicts = iter(flat)
        local["sampled"] = [(item.env, [_judged(next(verdicts)) for _ in group]) for item, group in zip(own, groups)]
    every = share.gather(local)
    greedy_all = [x for part in every for x in part["greedy"]]
    sampled_all = [x for part in every for x in part["sampled"]]
    envs = list(dict.fromkeys(item.env for item in items))
    if settings.greedy:
        out.update(_greedy_values(envs, greedy_all))
    if settings.k:
        out.update(_pass_at_k_values(envs, sampled_all, settings.k))
    out.update(tool_metrics([x for part in every for x in part["tools"]], prefix="eval_greedy_"))
    out["eval_infra"] = float(sum(j is None for _, j in greedy_all)
                              + sum(j is None for _, group in sampled_all for j in group))
    out["tokens_eval"] = sum(part["tokens"] for part in every)   # generated here: the token ledger's eval fate
    out["tokens_eval_process"] = local["tokens"]
    out["eval_time_s"] = time.perf_counter() - t0
    return out


def _judge(suite: EnvSuite, tools: Optional[ToolTurns], items: Sequence[SuiteItem], rollouts: list[Rollout],
           sample: SampleFn) -> tuple[list[Rollout], list[Verdict]]:
    """(the rollouts with tool episodes played out, the verdicts): tool envs' items through ``tools``,
    the others scored as they are."""
    if tools is None or not any(tools.covers(item) for item in items):
        return rollouts, suite.score_batch(items, [r.text for r in rollouts])
    rollouts = list(rollouts)
    out: list[Optional[Verdict]] = [None] * len(items)
    idx = [i for i, item in enumerate(items) if tools.covers(item)]
    rest = [i for i in range(len(items)) if i not in set(idx)]
    played, verdicts, _ = tools.run([items[i] for i in idx], [rollouts[i] for i in idx], sample)
    for i, r, v in zip(idx, played, verdicts):
        rollouts[i], out[i] = r, v
    if rest:
        for i, v in zip(rest, suite.score_batch([items[i] for i in rest], [rollouts[i].text for i in rest])):
            out[i] = v
    return rollouts, all_verdicts(out, "evaluate")


def _judged(v: Verdict) -> Judged:
    return v.correct if v.scored else None


def _limited_prompts(items: Sequence[SuiteItem], prompts: list[list[int]], settings: EvalSettings
                     ) -> tuple[Sequence[SuiteItem], list[list[int]], dict[str, float]]:
    """The items and prompts within ``max_prompt_length`` (cut or left out), and their counts."""
    limit, truncated = settings.max_prompt_length, 0
    if limit is not None and settings.prompt_overflow == "drop":
        kept = [(item, ids) for item, ids in zip(items, prompts) if len(ids) <= limit]
        if not kept:
            raise ValueError(f"evaluate: every eval prompt is longer than data.max_prompt_length ({limit} tokens); "
                             "raise it or set data.prompt_overflow: truncate_left")
        counts = {"eval_prompts_dropped": float(len(items) - len(kept))}
        items, prompts = [item for item, _ in kept], [ids for _, ids in kept]
    elif limit is not None:
        truncated = sum(len(ids) > limit for ids in prompts)
        prompts = [ids[-limit:] for ids in prompts]
        counts = {"eval_prompts_truncated": float(truncated)}
    else:
        counts = {}
    return items, prompts, {"eval_prompts": float(len(items)), **counts}


def _greedy_values(envs: Sequence[str], judged: Sequence[tuple[str, Judged]]) -> dict[str, float]:
    """Greedy pass rate overall and per env; a prompt not judged is left out."""
    per: dict[str, list[bool]] = defaultdict(list)
    for env, correct in judged:
        if correct is not None:
            per[env].append(correct)
    every = [c for env in per.values() for c in env]
    out = {"eval_greedy_pass_rate": sum(every) / len(every) if every else math.nan}
    for env in envs:
        got = per.get(env, [])
        out[f"eval_{env}_greedy_pass_rate"] = sum(got) / len(got) if got else math.nan
    return out


def _pass_at_k_values(envs: Sequence[str], sampled: Sequence[tuple[str, list[Judged]]],
                      ks: Sequence[int]) -> dict[str, float]:
    """Mean pass@k over prompts, overall and per env; a prompt with fewer than k judged samples
    is left out of that k's mean."""
    per: dict[tuple[str, int], list[float]] = defaultdict(list)
    for env, samples in sampled:
        judged = [c for c in samples if c is not None]
        for k in ks:
            if len(judged) >= k:
                per[(env, k)].append(pass_at_k(len(judged), sum(judged), k))
    out: dict[str, float] = {}
    for k in ks:
        every = [x for env in envs for x in per.get((env, k), [])]
        out[f"eval_pass@{k}"] = sum(every) / len(every) if every else math.nan
        for env in envs:
            got = per.get((env, k), [])
            out[f"eval_{env}_pass@{k}"] = sum(got) / len(got) if got else math.nan
    return out


def describe(values: dict[str, Any]) -> str:
    """A one-line console summary of an evaluation's overall figures."""
    keys = ["eval_greedy_pass_rate"] + sorted((k for k in values if k.startswith("eval_pass@")),
                                              key=lambda k: int(k.split("@")[1]))
    shown = [f"{k.removeprefix('eval_')} {values[k]:.3f}" for k in keys if isinstance(values.get(k), float)]
    if values.get("eval_infra"):   # left out of the rates above, never counted wrong: say so
        shown.append(f"not judged (infra) {int(values['eval_infra'])}")
    return f"eval ({int(values.get('eval_prompts', 0))} prompts): " + "  ".join(shown)


__all__ = ["EvalSettings", "Share", "TokenizeFn", "describe", "eval_items", "evaluate", "is_due", "pass_at_k"]
