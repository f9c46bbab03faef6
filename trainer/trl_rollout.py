"""A Proctor tool env inside TRL's ``GRPOTrainer``: its episodes as TRL's ``rollout_func``, its verdicts
as a reward function.

    from proctor.envs.adapters import to_hf_dataset
    from proctor.trainer.trl_rollout import ToolRollout

    env = make_env("proctor/PythonToolMath-v0", partition="train")
    rollout = ToolRollout(env, tokenizer)
    trainer = trl.GRPOTrainer(model, reward_funcs=[rollout.reward], rollout_func=rollout, args=args,
                              train_dataset=to_hf_dataset(env), processing_class=tokenizer)

TRL hands the rollout function its prompts (each already repeated ``num_generations`` times, as
its sampler draws them); each is played out as a Proctor tool episode (``rollout/tool_turns.py``),
token in / token out, sampled from TRL's own policy with TRL's sampling settings
(``temperature``, ``top_p``, ``top_k``, ``min_p``, ``repetition_penalty``,
``max_completion_length`` per reply). What comes back is what TRL trains on: the prompt ids, the
whole episode's ids, the sampler's log-probs, and ``env_mask`` (TRL's name for the learn mask:
0 on tool results, which are then not trained on). The verdicts ride along as a column,
``proctor_reward`` (None for an episode a tool's infrastructure failed: TRL then leaves it out of
the advantages, never scores it wrong), read by ``rollout.reward``, which also logs the tool
columns (``tool_calls_per_episode``, ...) through TRL's ``log_metric``.

The episodes' tools work for any chat template and any model family whose calls the env's parser
reads, because the calls are read by Proctor, not by TRL's response schemas.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Mapping, Optional, Sequence

from proctor.envs import EnvSuite, SuiteItem
from proctor.envs.adapters import TaskIndex, _unwrap
from proctor.envs.tools import is_tool_env

from .parts import tokenize
from .rollout import Generator, SamplingParams
from .rollout.hf import TransformersGenerator
from .rollout.tool_turns import ToolTurns, tool_episodes, tool_metrics

ENV_NAME = "env"


class ToolRollout:
    """TRL's ``rollout_func`` over a Proctor tool env (see the module docstring); ``reward`` is its reward."""

    def __init__(self, env: Any, tokenizer: Any, *, chat_template_kwargs: Optional[Mapping[str, Any]] = None,
                 batch_size: int = 64, make_generator: Optional[Callable[[Any, Any], Generator]] = None) -> None:
        inner = _unwrap(env)
        if not is_tool_env(inner):
            raise TypeError(f"ToolRollout needs a tool env (proctor.envs.tools.ToolEnv), got {type(inner).__name__}; "
                            "for an env without tools use proctor.envs.adapters.as_reward_func")
        self.env = inner
        self.tokenizer = tokenizer
        self.kwargs = dict(chat_template_kwargs or {})
        self.batch_size = batch_size
        # (TRL's policy, tokenizer) -> what samples the replies; default: transformers' generate on it
        self.make_generator = make_generator or (lambda model, tok: TransformersGenerator(model, tok,
                                                                                       batch_size=batch_size))
        self.suite = EnvSuite({ENV_NAME: inner})
        self.turns = ToolTurns(self.suite, tokenizer, self.kwargs)
        self.index = TaskIndex(inner, "tool env")
        self.by_prompt = {_key(inner.prompt_of(task)): task for task in self.index.by_id.values()}
        self.__name__ = "proctor_tool_rollout"

    def __call__(self, prompts: Sequence[Any], trainer: Any) -> dict[str, list]:
        items = [SuiteItem(ENV_NAME, self._task(p)) for p in prompts]
        model = trainer.accelerator.unwrap_model(trainer.model)
        generator = self.make_generator(model, self.tokenizer)
        params = sampling_of(trainer.args)
        ids = [tokenize(self.suite, self.tokenizer, item, self.kwargs) for item in items]
        first = [group[0] for group in generator.generate(ids, params)]
        rollouts, verdicts, _ = self.turns.run(items, first,
                                               lambda ps: [g[0] for g in generator.generate(ps, params)])
        return {"prompt_ids": [list(r.prompt_ids) for r in rollouts],
                "completion_ids": [list(r.completion_ids) for r in rollouts],
                "logprobs": [list(r.logprobs) for r in rollouts],
                "env_mask": [list(r.learned()) for r in rollouts],
                "proctor_reward": [float(v.reward) if v.scored else None for v in verdicts],
                "proctor_episode": [json.dumps({"tools": info, "verdict": {"status": v.status, "correct": v.correct,
                                                                           "reward": v.reward if v.scored else None}})
                                    for info, v in tool_episodes(rollouts, verdicts)]}

    def reward(self, prompts: Sequence[Any], completions: Sequence[Any], proctor_reward: Sequence[Optional[float]],
               proctor_episode: Sequence[str] = (), log_metric: Any = None, **columns: Any) -> list[Optional[float]]:
        """The episodes' verdicts (None: not judged); logs the tool columns through TRL's ``log_metric``."""
        if len(proctor_reward) != len(completions):
            raise ValueError(f"{len(completions)} completions but {len(proctor_reward)} proctor_reward values: "
                             "use this reward with rollout_func=ToolRollout(...) of the same env")
        if log_metric is not None and proctor_episode:
            from proctor.envs import Verdict

            eps = []
            for text in proctor_episode:
                ep = json.loads(text)
                v = ep["verdict"]
                verdict = (Verdict(v["reward"], correct=v["correct"]) if v["status"] == "ok"
                           else Verdict.infra("not judged"))
                eps.append((ep["tools"], verdict))
            for name, value in tool_metrics(eps).items():
                if value == value:   # NaN (no episode of that kind) is not logged
                    log_metric(f"tools/{name}", value)
        return list(proctor_reward)

    def _task(self, prompt: Any) -> Any:
        task = self.by_prompt.get(_key(prompt))
        if task is None:
            raise KeyError(f"a prompt TRL sampled is not one of the env's tasks ({str(prompt)[:120]!r}); build the "
                           "dataset with proctor.envs.adapters.to_hf_dataset(env) from the same env")
        return task


def sampling_of(args: Any) -> SamplingParams:
    """One reply's sampling under TRL's ``GRPOConfig`` settings."""
    return SamplingParams(n=1, max_new_tokens=int(args.max_completion_length),
                          temperature=float(getattr(args, "temperature", 1.0) or 1.0),
                          top_p=float(getattr(args, "top_p", 1.0) or 1.0), top_k=int(getattr(args, "top_k", 0) or 0),
                          min_p=float(getattr(args, "min_p", 0.0) or 0.0),
                          repetition_penalty=float(getattr(args, "repetition_penalty", 1.0) or 1.0))


def _key(prompt: Any) -> str:
    """A prompt (text or chat messages, as the dataset row holds it) as one comparable string."""
    if isinstance(prompt, str):
        return prompt
    return json.dumps([{"role": m.get("role"), "content": m.get("content")} for m in prompt], sort_keys=True)


__all__ = ["ToolRollout", "sampling_of"]
