"""Build a trainer from a config: the model (or the tiny offline one), its tokenizer, the env suite."""

from __future__ import annotations

from typing import Any

import proctor.envs  # noqa: F401 - registers the built-in envs
from proctor.envs import EnvSuite, VerifiableEnv
from proctor.envs.loader import EnvLoadError, make_env

from .config import GRPOConfig
from .grpo import GRPOTrainer
from .ppo import PPOTrainer, ValueModel


def build_suite(cfg: GRPOConfig) -> EnvSuite:
    envs: dict[str, VerifiableEnv] = {}
    for name, spec in cfg.data.envs.items():
        if not isinstance(spec, dict) or "id" not in spec:
            raise ValueError(f"config data.envs.{name}: needs an 'id' (e.g. proctor/Math-v0) and optional 'kwargs'")
        kwargs = dict(spec.get("kwargs") or {})
        if cfg.data.system_prompt is not None:
            kwargs.setdefault("system_prompt", cfg.data.system_prompt)
        try:
            env = make_env(spec["id"], **kwargs)
        except EnvLoadError as exc:
            raise ValueError(f"config data.envs.{name}: {exc}") from None
        if not isinstance(env, VerifiableEnv):
            raise ValueError(f"config data.envs.{name}: {spec['id']} is not a proctor VerifiableEnv")
        envs[name] = env
    return EnvSuite(envs, cfg.data.env_weights)


def resolve_model_path(model: str) -> str:
    """A path or hub id as given; "tiny" / "tiny:STEPS" become the offline tiny model's directory."""
    if model == "tiny" or model.startswith("tiny:"):
        from proctor.tiny_model import tiny_model_path

        # 800 pretraining steps (~4 min once, then cached): enough for GRPO to sharpen.
        steps = int(model.split(":", 1)[1]) if ":" in model else 800
        return str(tiny_model_path(pretrain_steps=steps))
    return model


def load_model(cfg: GRPOConfig) -> tuple[Any, Any]:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_model_path(cfg.model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(path)
    return model, tokenizer


def build_trainer(cfg: GRPOConfig) -> "GRPOTrainer | PPOTrainer":
    model, tokenizer = load_model(cfg)
    if cfg.objective.algorithm == "ppo":
        return PPOTrainer(cfg, build_suite(cfg), model, tokenizer, ValueModel.from_pretrained(model.name_or_path))
    return GRPOTrainer(cfg, build_suite(cfg), model, tokenizer)
