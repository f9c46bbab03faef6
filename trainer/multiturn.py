"""Multi-turn rollouts, token in / token out.

After a wrong answer with feedback (a failing test's output), the env's feedback turn is
appended as *tokens* to the very ids that were sampled, and the model continues from
there. Nothing is decoded and re-encoded, so the learner trains on exactly the ids the
sampler produced (no re-tokenization drift), and the env's tokens are context with a
learn mask of 0: the model is not trained to write the feedback.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping, Optional, Sequence

from proctor.envs import EnvSuite, SuiteItem, Verdict

from .rollout import Generator, Rollout, SamplingParams

ScoreFn = Callable[[list[SuiteItem], list[Rollout]], list[Verdict]]


def feedback_ids(tokenizer: Any, text: str, chat_template_kwargs: Optional[Mapping[str, Any]] = None) -> list[int]:
    """The tokens of a user turn carrying ``text``, ending where the assistant's reply begins.

    The assistant's completion ended with its end-of-turn token; chat templates put a
    newline after it, then the next turn.
    """
    ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                        tokenize=True, **dict(chat_template_kwargs or {}))
    ids = list(ids["input_ids"] if hasattr(ids, "keys") else ids)
    return tokenizer.encode("\n", add_special_tokens=False) + ids


def continue_turns(suite: EnvSuite, generator: Generator, tokenizer: Any, sampling: SamplingParams,
                   items: Sequence[SuiteItem], rollouts: list[Rollout], verdicts: list[Verdict],
                   score: ScoreFn, chat_template_kwargs: Optional[Mapping[str, Any]] = None
                   ) -> tuple[list[Rollout], list[Verdict], int]:
    """Run further turns for the rollouts whose env allows them; returns (rollouts, verdicts, turns run).
    The feedback turns go through the chat template with ``chat_template_kwargs``, as the prompts did."""
    rollouts, verdicts = list(rollouts), list(verdicts)
    one = replace(sampling, n=1)
    max_turns = max(env.max_turns for env in suite.envs.values())
    turns = 1
    for turn in range(2, max_turns + 1):
        todo = [i for i, (item, v) in enumerate(zip(items, verdicts))
                if v.scored and not v.correct and v.feedback and turn <= suite.envs[item.env].max_turns
                and rollouts[i].finish_reason == "stop"]
        if not todo:
            break
        turns = turn
        inserted = {}
        prompts = []
        for i in todo:
            env = suite.envs[items[i].env]
            inserted[i] = feedback_ids(tokenizer, env.feedback_template.format(feedback=verdicts[i].feedback),
                                       chat_template_kwargs)
            prompts.append(list(rollouts[i].prompt_ids) + list(rollouts[i].completion_ids) + inserted[i])
        answers = [group[0] for group in generator.generate(prompts, one)]
        for i, answer in zip(todo, answers):
            r, env_ids = rollouts[i], inserted[i]
            rollouts[i] = replace(
                r, completion_ids=r.completion_ids + tuple(env_ids) + answer.completion_ids,
                logprobs=r.logprobs + (0.0,) * len(env_ids) + answer.logprobs,
                learn_mask=r.learned() + (0,) * len(env_ids) + (1,) * len(answer.completion_ids),
                text=answer.text, finish_reason=answer.finish_reason, weight_version=answer.weight_version,
                extra={**r.extra, "turns": turn})
        # The episode's reward is the verdict on the latest answer.
        new = score([items[i] for i in todo], [rollouts[i] for i in todo])
        for i, v in zip(todo, new):
            verdicts[i] = v
    return rollouts, verdicts, turns
