"""Build a trainer from a config: the model (or the tiny offline one), its tokenizer, the env suite."""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import proctor.envs  # noqa: F401 - registers the built-in envs
from proctor.envs import EnvSuite, ListSource, VerifiableEnv
from proctor.envs.core.reward_funcs import FuncSpec, with_reward_funcs
from proctor.envs.loader import EnvLoadError, make_env, make_eval_env

from proctor.tiny_model import resolve_model_path

from .config import GRPOConfig
from .grpo import GRPOTrainer
from .ppo import PPOTrainer, ValueModel


def build_suite(cfg: GRPOConfig, reward_funcs: Sequence[FuncSpec] = (),
                reward_weights: Optional[Sequence[float]] = None) -> EnvSuite:
    """The train envs; with ``eval.split`` each draws only its train partition.

    Reward functions (``data.reward_funcs``, or ``reward_funcs`` given here as callables with
    TRL's signature) are added on top of every env: reward = the env's reward + sum_k w_k f_k
    (``proctor.envs.core.reward_funcs``); the env still decides what is correct."""
    split = {"partition": "train", "eval_fraction": cfg.eval.split} if cfg.eval.split > 0 else {}
    envs = {name: _load_env(f"data.envs.{name}", spec, cfg.data.system_prompt, make_env, split)
            for name, spec in cfg.data.envs.items()}
    funcs, weights = _reward_funcs(cfg, reward_funcs, reward_weights)
    if funcs:
        envs = {name: with_reward_funcs(env, funcs, weights) for name, env in envs.items()}
    return EnvSuite(envs, cfg.data.env_weights)


def _reward_funcs(cfg: GRPOConfig, given: Sequence[FuncSpec], weights: Optional[Sequence[float]]
                  ) -> tuple[list[FuncSpec], Optional[list[float]]]:
    if given and cfg.data.reward_funcs:
        raise ValueError("reward functions given both in the config (data.reward_funcs) and as an argument: "
                         "use one of the two")
    if weights is not None and len(weights) != len(given):
        raise ValueError(f"{len(weights)} reward_weights for {len(given)} reward_funcs: give one per function")
    if given:
        return list(given), None if weights is None else list(weights)
    return list(cfg.data.reward_funcs), cfg.data.reward_weights


def build_eval_suite(cfg: GRPOConfig) -> Optional[EnvSuite]:
    """The eval envs (None when ``eval.every`` is 0): ``eval.envs``, or each train env's held-out
    partition (``eval.split``); at most ``eval.max_prompts`` questions per env."""
    e = cfg.eval
    if e.every == 0:
        return None
    if e.envs:
        envs = {name: _limited(_load_env(f"eval.envs.{name}", spec, cfg.data.system_prompt, make_env, {}),
                               e.max_prompts) for name, spec in e.envs.items()}
    else:
        held_out = {"eval_fraction": e.split, "limit": e.max_prompts}
        envs = {name: _load_env(f"data.envs.{name} (its eval.split partition)", spec, cfg.data.system_prompt,
                                make_eval_env, held_out) for name, spec in cfg.data.envs.items()}
    return EnvSuite(envs)


def _load_env(where: str, spec: Any, system_prompt: Optional[str], make: Callable[..., Any],
              extra: dict[str, Any]) -> VerifiableEnv:
    if not isinstance(spec, dict) or "id" not in spec:
        raise ValueError(f"config {where}: needs an 'id' (e.g. proctor/Math-v0) and optional 'kwargs'")
    kwargs = dict(spec.get("kwargs") or {})
    if system_prompt is not None:
        kwargs.setdefault("system_prompt", system_prompt)
    try:
        env = make(spec["id"], **extra, **kwargs)
    except EnvLoadError as exc:
        raise ValueError(f"config {where}: {exc}") from None
    if not isinstance(env, VerifiableEnv):
        raise ValueError(f"config {where}: {spec['id']} is not a proctor VerifiableEnv")
    return env


def _limited(env: VerifiableEnv, limit: Optional[int]) -> VerifiableEnv:
    """The env over its first ``limit`` tasks: the eval set is fixed, not drawn."""
    if limit is not None and limit < len(env.source):
        env.source = ListSource([env.source[i] for i in range(limit)], name=f"{env.source.name}[:{limit}]")
    return env


def load_model(cfg: GRPOConfig) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_path(cfg.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path)
    return model, tokenizer


def build_trainer(cfg: GRPOConfig, reward_funcs: Sequence[FuncSpec] = (),
                  reward_weights: Optional[Sequence[float]] = None) -> "GRPOTrainer | PPOTrainer":
    """The model, the env suite (with any reward functions on top) and the trainer a config names."""
    model, tokenizer = load_model(cfg)
    suite = build_suite(cfg, reward_funcs, reward_weights)
    if cfg.objective.algorithm == "ppo":
        return PPOTrainer(cfg, suite, model, tokenizer, ValueModel.from_pretrained(model.name_or_path),
                          eval_suite=build_eval_suite(cfg))
    return GRPOTrainer(cfg, suite, model, tokenizer, eval_suite=build_eval_suite(cfg))
