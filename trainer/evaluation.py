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

from .config import GRPOConfig
from .rollout import Generator, SamplingParams

TokenizeFn = Callable[[SuiteItem], list[int]]


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
             settings: EvalSettings) -> dict[str, float]:
    """The eval_* values of ``items`` under the generator's current weights: overall and per env
    (``eval_<env>_greedy_pass_rate``, ``eval_<env>_pass@k``), the number of prompts, the time and
    the tokens generated (``tokens_eval``)."""
    if not items:
        raise ValueError("evaluate: no eval items; the eval suite's envs hold no tasks")
    t0 = time.perf_counter()
    items, prompts, out = _limited_prompts(items, [tokenize(item) for item in items], settings)
    infra = 0
    s = settings.sampling
    tokens = 0
    if settings.greedy:
        greedy = generator.greedy_rollouts(prompts, s.max_new_tokens, stop=s.stop,
                                           repetition_penalty=s.repetition_penalty)
        tokens += sum(sum(r.learned()) for r in greedy)
        verdicts = suite.score_batch(items, [r.text for r in greedy])
        infra += sum(not v.scored for v in verdicts)
        out.update(_greedy_values(items, verdicts))
    if settings.k:
        groups = generator.generate(prompts, replace(s, n=max(settings.k)))
        tokens += sum(sum(r.learned()) for group in groups for r in group)
        flat_items = [item for item, group in zip(items, groups) for _ in group]
        verdicts = suite.score_batch(flat_items, [r.text for group in groups for r in group])
        infra += sum(not v.scored for v in verdicts)
        out.update(_pass_at_k_values(items, [len(g) for g in groups], verdicts, settings.k))
    out["eval_infra"] = float(infra)
    out["tokens_eval"] = tokens   # generated here: the token ledger's eval fate
    out["eval_time_s"] = time.perf_counter() - t0
    return out


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


def _greedy_values(items: Sequence[SuiteItem], verdicts: Sequence[Verdict]) -> dict[str, float]:
    judged: dict[str, list[bool]] = defaultdict(list)
    for item, v in zip(items, verdicts):
        if v.scored:
            judged[item.env].append(v.correct)
    every = [c for env in judged.values() for c in env]
    out = {"eval_greedy_pass_rate": sum(every) / len(every) if every else math.nan}
    for env in dict.fromkeys(item.env for item in items):
        got = judged.get(env, [])
        out[f"eval_{env}_greedy_pass_rate"] = sum(got) / len(got) if got else math.nan
    return out


def _pass_at_k_values(items: Sequence[SuiteItem], sizes: Sequence[int], verdicts: Sequence[Verdict],
                      ks: Sequence[int]) -> dict[str, float]:
    """Mean pass@k over prompts, overall and per env; a prompt with fewer than k judged samples
    is left out of that k's mean."""
    per: dict[tuple[str, int], list[float]] = defaultdict(list)
    start = 0
    for item, size in zip(items, sizes):
        judged = [v.correct for v in verdicts[start:start + size] if v.scored]
        start += size
        for k in ks:
            if len(judged) >= k:
                per[(item.env, k)].append(pass_at_k(len(judged), sum(judged), k))
    out: dict[str, float] = {}
    envs = list(dict.fromkeys(item.env for item in items))
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
    return f"eval ({int(values.get('eval_prompts', 0))} prompts): " + "  ".join(shown)


__all__ = ["EvalSettings", "TokenizeFn", "describe", "eval_items", "evaluate", "is_due", "pass_at_k"]
