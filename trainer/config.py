"""Every knob of a run, in validated groups, with the defaults a TRL or verl user would expect.

    RunConfig (also named GRPOConfig)
      model, output_dir, seed, max_steps
      data        which tasks: envs, env_weights, system_prompt, prompts_per_step (B), zero-signal handling
      rollout     how completions are sampled: backend, group_size (G), temperature, ..., vllm.*
      objective   what is optimised: algorithm, loss_type, clipping, beta (KL), ..., ppo.*
      optim       how: learning_rate, micro_batch_size, precision, LoRA, the non-finite guard
      checkpoint  save_every, resume_from
      log         log_every, sample_completions, report_to
      eval        held-out evaluation: envs or split, every, greedy, pass@k

A YAML file may still use the flat keys of earlier versions (``group_size: 8``); each is
mapped to its place (``rollout.group_size``) with a deprecation note naming the new key.
The groups' fields and defaults are in trainer/config_groups.py; here are RunConfig, the
YAML loading and the cross-field checks (each problem names its field and what to do).
"""

from __future__ import annotations

import warnings
from dataclasses import asdict, field, fields, is_dataclass
from typing import Any, Optional

from pydantic import ValidationError
from pydantic.dataclasses import dataclass

from .config_groups import (STRICT, CheckpointConfig, DataConfig, EvalConfig, LogConfig, ObjectiveConfig,
                            OptimConfig, PPOConfig, RolloutConfig, VLLMConfig)
from .sampling_params import SamplingParams, logprobs_mode   # torch-free, as this module is


class ConfigDeprecationWarning(FutureWarning):
    """A config key of an earlier version was mapped to its new place (shown by default)."""


@dataclass(config=STRICT)
class RunConfig:
    """A run's config, GRPO or PPO (``objective.algorithm``); ``GRPOConfig`` is the same class
    under the name TRL users know. Validated on construction (pydantic): a wrong type or value
    names its field.

    The defaults are the embedded demo: the tiny offline model on procedural
    arithmetic, on CPU, in a few minutes, with the pass rate rising.
    """

    model: str = "tiny"                       # a path or hub id; "tiny" / "tiny:STEPS" for the offline model
    output_dir: str = "runs/arithmetic-tiny"
    seed: int = 0
    max_steps: int = 80
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    log: LogConfig = field(default_factory=LogConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    def __post_init__(self) -> None:
        problems = _problems(self)
        if problems:
            raise ValueError("run config: " + "; ".join(problems))

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "config") -> "RunConfig":
        """Build from a mapping (a YAML file's content); errors name the file and the field.

        Flat keys of earlier versions are moved to their group with a
        :class:`ConfigDeprecationWarning` naming the new key."""
        nested, notes = nest(data, where)
        for note in notes:
            warnings.warn(note, ConfigDeprecationWarning, stacklevel=2)
        try:
            return cls(**nested)
        except ValidationError as exc:
            raise ValueError("\n".join(_describe(e, where) for e in exc.errors())) from None

    @classmethod
    def from_flat(cls, **settings: Any) -> "RunConfig":
        """Shorthand for scripts: ``GRPOConfig.from_flat(group_size=4, beta=0.04)``; each flat
        name goes to its group (``rollout.group_size``, ``objective.beta``), groups may be
        given too. Unlike a YAML file's flat keys, no deprecation note: these are the field
        names themselves, for code that sets a few of them."""
        nested, _ = nest(settings, "GRPOConfig.from_flat")
        try:
            return cls(**nested)
        except ValidationError as exc:
            raise ValueError("\n".join(_describe(e, "GRPOConfig.from_flat") for e in exc.errors())) from None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


GRPOConfig = RunConfig   # one class: the name TRL users know


# ---------------------------------------------------------------- flat keys of earlier versions
_GROUPS: dict[str, type] = {"data": DataConfig, "rollout": RolloutConfig, "objective": ObjectiveConfig,
                            "optim": OptimConfig, "checkpoint": CheckpointConfig, "log": LogConfig,
                            "eval": EvalConfig}
_RENAMED = {"rollout_backend": "rollout.backend", "vllm_server_urls": "rollout.vllm.server_urls",
            "vllm_server_args": "rollout.vllm.server_args", "vllm_sleep_level": "rollout.vllm.sleep_level",
            "vllm_gpu_memory_utilization": "rollout.vllm.gpu_memory_utilization"}


def _flat_keys() -> dict[str, str]:
    """Every flat key of earlier versions → its dotted place in the tree."""
    out = dict(_RENAMED)
    for group, cls in _GROUPS.items():
        for f in fields(cls):
            if f.name in ("vllm", "ppo") or group == "eval":
                continue
            out.setdefault(f.name, f"{group}.{f.name}")
    for f in fields(VLLMConfig):
        out.setdefault(f"vllm_{f.name}", f"rollout.vllm.{f.name}")
    for f in fields(PPOConfig):
        out.setdefault(f.name, f"objective.ppo.{f.name}")
    for f in fields(EvalConfig):   # TRL-style names
        out.setdefault(f"eval_{f.name}", f"eval.{f.name}")
    return out


FLAT_KEYS = _flat_keys()
_TOP = {"model", "output_dir", "seed", "max_steps", *_GROUPS}


def nest(data: dict[str, Any], where: str = "config") -> tuple[dict[str, Any], list[str]]:
    """``data`` with flat keys moved into their groups, and one note per moved key.

    A key given both flat and nested is an error (which one would win is a guess)."""
    nested: dict[str, Any] = {k: (dict(v) if isinstance(v, dict) else v) for k, v in data.items() if k in _TOP}
    notes: list[str] = []
    unknown = sorted(k for k in data if k not in _TOP and k not in FLAT_KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}; known: "
                         f"{', '.join(sorted(_TOP))} (and the fields inside each group)")
    for key in (k for k in data if k not in _TOP):
        path = FLAT_KEYS[key].split(".")
        node = nested
        for part in path[:-1]:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(f"{where}: field {part} must be a mapping (got {child!r})")
            node[part] = child = dict(child)
            node = child
        if path[-1] in node:
            raise ValueError(f"{where}: {key} and {FLAT_KEYS[key]} are both given; keep {FLAT_KEYS[key]}")
        node[path[-1]] = data[key]
        notes.append(f"{where}: `{key}` is deprecated; write it as `{FLAT_KEYS[key]}`")
    return nested, notes


def _describe(error: dict, where: str) -> str:
    msg = error["msg"].removeprefix("Value error, ")
    name = ".".join(map(str, error["loc"]))
    return f"{where}: field {name}: {msg} (got {error.get('input')!r})" if name else f"{where}: {msg}"


# ---------------------------------------------------------------- cross-field checks
def _problems(c: RunConfig) -> list[str]:
    r, o, d = c.rollout, c.objective, c.data
    problems = []
    for name, value in (("data.prompts_per_step", d.prompts_per_step), ("rollout.group_size", r.group_size),
                        ("rollout.max_new_tokens", r.max_new_tokens), ("max_steps", c.max_steps),
                        ("optim.micro_batch_size", c.optim.micro_batch_size),
                        ("objective.num_iterations", o.num_iterations),
                        ("rollout.generation_batch_size", r.generation_batch_size),
                        ("optim.steps_per_generation", c.optim.steps_per_generation),
                        ("optim.max_infra_steps", c.optim.max_infra_steps)):
        if value < 1:
            problems.append(f"{name} must be >= 1 (got {value})")
    if r.group_size < 2 and o.algorithm == "grpo":
        problems.append("rollout.group_size must be >= 2 for GRPO: a group of one has no baseline")
    if not r.temperature > 0:
        problems.append(f"rollout.temperature must be > 0 (got {r.temperature})")
    if o.beta < 0 or o.entropy_coef < 0:
        problems.append("objective.beta and objective.entropy_coef must be >= 0")
    if not 0 < o.epsilon_low < 1:
        problems.append(f"objective.epsilon_low must be in (0, 1) (got {o.epsilon_low})")
    if r.vllm.ray is not None and r.vllm.server_urls:
        problems.append("rollout.vllm.ray and rollout.vllm.server_urls both name engines: keep one")
    if r.vllm.ray is not None and (r.vllm.ray.engines < 0 or r.vllm.ray.gpus_per_engine < 0
                                   or r.vllm.ray.cpus_per_engine <= 0):
        problems.append("rollout.vllm.ray: engines and gpus_per_engine must be >= 0, cpus_per_engine > 0")
    if r.max_staleness < 1 or r.vllm.sync_every < 1:
        problems.append("rollout.max_staleness and rollout.vllm.sync_every must be >= 1")
    if not 0 < c.optim.max_infra_frac <= 1:
        problems.append(f"optim.max_infra_frac must be in (0, 1] (got {c.optim.max_infra_frac})")
    if c.checkpoint.save_total_limit is not None and c.checkpoint.save_total_limit < 1:
        problems.append(f"checkpoint.save_total_limit must be >= 1 or null (got {c.checkpoint.save_total_limit})")
    if d.max_prompt_length is not None and d.max_prompt_length < 1:
        problems.append(f"data.max_prompt_length must be >= 1 or null (got {d.max_prompt_length})")
    if d.reward_weights is not None and len(d.reward_weights) != len(d.reward_funcs):
        problems.append(f"data.reward_weights has {len(d.reward_weights)} weights for {len(d.reward_funcs)} "
                        "data.reward_funcs: give one per function, or none (all 1)")
    if c.optim.steps_per_generation > 1 and (r.async_generation or o.algorithm == "ppo"):
        problems.append("optim.steps_per_generation > 1 is for synchronous GRPO: set rollout.async_generation: false "
                        "and objective.algorithm: grpo, or steps_per_generation: 1")
    return problems + _selection_problems(d) + _rollout_problems(c) + _eval_problems(c.eval)


def _selection_problems(d: DataConfig) -> list[str]:
    """Probabilities outside [0, 1], an empty band, and settings that would skip every prompt."""
    problems = []
    if not 0 < d.skip_threshold < 1:
        problems.append(f"data.skip_threshold must be in (0, 1): the predicted chance of a zero-signal group above "
                        f"which a prompt is skipped (0 would skip every prompt seen once; got {d.skip_threshold})")
    if not 0 < d.skip_explore <= 1:
        problems.append(f"data.skip_explore must be in (0, 1]: the chance a skippable prompt or an out-of-band level "
                        f"is drawn anyway (0 would never let a skipped prompt come back; got {d.skip_explore})")
    if d.skip_after < 0:
        problems.append(f"data.skip_after must be >= 0 (0: off; got {d.skip_after})")
    band = d.target_pass_rate
    if band is not None and not (0 <= band[0] < band[1] <= 1):
        problems.append(f"data.target_pass_rate must be [lo, hi] with 0 <= lo < hi <= 1 (a pass-rate band, "
                        f"e.g. [0.2, 0.8]; got {list(band)})")
    if d.difficulty_envs is not None and band is None:
        problems.append("data.difficulty_envs is set but data.target_pass_rate is not: give the band the "
                        "frontier aims at (e.g. [0.2, 0.8]), or remove difficulty_envs")
    if d.answer_probe:
        problems += _probe_problems(d)
    unknown = sorted(set(d.difficulty_envs or ()) - set(d.envs))
    if unknown:
        problems.append(f"data.difficulty_envs names {unknown}, not in data.envs {sorted(d.envs)}")
    return problems


def _probe_problems(d: DataConfig) -> list[str]:
    problems = []
    if d.target_pass_rate is None:
        problems.append("data.answer_probe keeps prompts whose predicted pass rate is in data.target_pass_rate, "
                        "which is not set: give the band (e.g. [0.1, 0.9]) or turn the probe off")
    if d.probe_pool < 1:
        problems.append(f"data.probe_pool must be >= 1: candidates probed per prompt drawn (got {d.probe_pool})")
    if d.skip_predicted_zero_signal:
        problems.append("data.answer_probe and data.skip_predicted_zero_signal both predict each prompt's pass "
                        "rate before rollout: choose one")
    problem = answer_template_problem(d.answer_template)
    if problem:
        problems.append(f"data.answer_template {problem}")
    return problems


def answer_template_problem(template: str) -> Optional[str]:
    """What is wrong with an answer-probe template (None: nothing): it must hold {answer} and no other field."""
    try:
        template.format(answer="42")
        if "{answer}" in template:
            return None
    except (KeyError, IndexError, ValueError):
        pass
    return (f"must contain {{answer}} and no other field, the reply the probe scores (e.g. '{{answer}}' or "
            f"'The answer is {{answer}}.'); got {template!r}")


def _sampling_problems(r: RolloutConfig) -> list[str]:
    """generation_kwargs a backend refuses, and filters whose log-probs vLLM cannot report."""
    if not r.temperature > 0 or r.group_size < 1 or r.max_new_tokens < 1:
        return []   # reported on their own
    try:
        params = SamplingParams(n=r.group_size, temperature=r.temperature, top_p=r.top_p, top_k=r.top_k,
                                max_new_tokens=r.max_new_tokens).with_kwargs(r.generation_kwargs, r.backend)
        if r.backend != "transformers":
            logprobs_mode(params)
    except ValueError as exc:
        return [str(exc)]
    return []


def _eval_problems(e: EvalConfig) -> list[str]:
    problems = []
    if not 0 <= e.split < 1:
        problems.append(f"eval.split must be in [0, 1) (got {e.split})")
    if any(k < 1 for k in e.k):
        problems.append(f"eval.k: every k must be >= 1 (got {e.k})")
    if e.every < 0:
        problems.append(f"eval.every must be >= 0 (0: no evaluation) (got {e.every})")
    if e.max_prompts is not None and e.max_prompts < 1:
        problems.append(f"eval.max_prompts must be >= 1 or null (every eval question) (got {e.max_prompts})")
    if e.envs and e.split > 0:
        problems.append("eval.envs and eval.split are both given: evaluate on separate envs (eval.envs) or on a "
                        "held-out share of each train env (eval.split), not both")
    if e.every > 0 and not e.envs and e.split == 0:
        problems.append(f"eval.every is {e.every} but there is nothing to evaluate on: give eval.envs (as data.envs) "
                        "or eval.split (e.g. 0.1, a held-out share of each train env)")
    if e.every > 0 and not e.greedy and not e.k:
        problems.append("eval.every is set but eval.greedy is false and eval.k is empty: measure greedy pass@1, "
                        "sampled pass@k (e.g. eval.k: [4]), or both")
    return problems


# rollout.is_correction "auto" with a vLLM backend: token-level truncated importance sampling
# (TIS; the reasons and the measurements are in trainer/algo/is_correction.py and docs/training.md).
AUTO_IS_CORRECTION = "token_truncate"


def resolve_is_correction(rollout: RolloutConfig) -> Optional[str]:
    """The importance-sampling correction in force: "auto" is ``AUTO_IS_CORRECTION`` with vLLM,
    none with transformers (which samples with the learner's own weights and kernels)."""
    mode = rollout.is_correction
    if mode == "auto":
        mode = None if rollout.backend == "transformers" else AUTO_IS_CORRECTION
    return None if mode in (None, "off") else mode


def _is_problems(r: RolloutConfig) -> list[str]:
    """IS bounds that would cut the weight of tokens both engines agree on (w = 1), or bounds
    given with no correction in force."""
    problems = []
    if not r.is_cap >= 1:
        problems.append(f"rollout.is_cap must be >= 1 (got {r.is_cap}): it bounds the weight pi_old/pi_sampler "
                        "from above, and below 1 it would cut tokens both engines agree on (weight 1); 2 is the "
                        "usual cap (truncated IS)")
    if r.is_min is not None and not 0 <= r.is_min < 1:
        problems.append(f"rollout.is_min must be in [0, 1) or null (got {r.is_min}): it bounds the weight "
                        "pi_old/pi_sampler from below, and at 1 or above it would cut tokens both engines agree "
                        "on; e.g. 0.5, or null for no lower bound")
    if r.is_min is not None and resolve_is_correction(r) is None:
        problems.append("rollout.is_min is set but no IS correction is in force (rollout.is_correction is off, or "
                        "auto with the transformers backend): remove is_min, or choose a rollout.is_correction mode")
    return problems


def _rollout_problems(c: RunConfig) -> list[str]:
    r = c.rollout
    problems = _sampling_problems(r) + _is_problems(r) + _adaptive_group_problems(c)
    if r.async_generation and r.backend == "transformers":
        problems.append("rollout.async_generation needs rollout.backend vllm or vllm_server: transformers samples "
                        "with the learner's own weights, which the update changes while the next batch generates")
    if r.async_generation and c.objective.algorithm == "ppo":
        problems.append("rollout.async_generation is for GRPO; PPO here runs on-policy (set objective.algorithm: "
                        "grpo)")
    if r.async_generation and r.vllm.sleep == "on":
        problems.append("rollout.async_generation keeps the engine generating while the learner works, so it "
                        "cannot sleep: set rollout.vllm.sleep to auto or off")
    if r.vllm.sleep == "on" and r.backend != "vllm":
        problems.append("rollout.vllm.sleep: on applies to rollout.backend vllm (colocated); a server frees "
                        "nothing of the learner's devices")
    return problems


def _adaptive_group_problems(c: RunConfig) -> list[str]:
    sizes, r = c.rollout.adaptive_group_size, c.rollout
    if sizes is None:
        return []
    if not 2 <= sizes[0] <= r.group_size <= sizes[1]:
        return [f"rollout.adaptive_group_size must be [min, max] with 2 <= min <= rollout.group_size "
                f"({r.group_size}) <= max: the sizes a prompt's group may take (got {list(sizes)})"]
    needs = [name for name, on in (("data.answer_probe: true", not c.data.answer_probe),
                                   ("data.dynamic_sampling: false", c.data.dynamic_sampling),
                                   ("rollout.async_generation: false", r.async_generation),
                                   ("objective.algorithm: grpo", c.objective.algorithm != "grpo"),
                                   ("optim.steps_per_generation: 1", c.optim.steps_per_generation > 1)) if on]
    return [f"rollout.adaptive_group_size sizes each group from the answer probe's prediction, in synchronous "
            f"GRPO without resampling: set {', '.join(needs)}, or adaptive_group_size: null"] if needs else []


def flat_view(config: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted keys → scalar values (for trackers, which take scalars only)."""
    out: dict[str, Any] = {}
    for f in fields(config):
        value = getattr(config, f.name)
        if is_dataclass(value):
            out.update(flat_view(value, f"{prefix}{f.name}."))
        else:
            out[f"{prefix}{f.name}"] = value
    return out


__all__ = ["AUTO_IS_CORRECTION", "CheckpointConfig", "ConfigDeprecationWarning", "DataConfig", "EvalConfig",
           "FLAT_KEYS", "GRPOConfig", "LogConfig", "RunConfig", "ObjectiveConfig", "OptimConfig", "PPOConfig", "RolloutConfig",
           "VLLMConfig", "flat_view", "nest", "resolve_is_correction"]
