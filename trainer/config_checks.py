"""Cross-field checks of a `RunConfig`: each problem a sentence naming the field and what to do.

`cross_field_problems(config)` lists them all (RunConfig refuses to exist while any is left), so a user
fixes a YAML file in one pass instead of one error at a time. Per-field types and ranges are
pydantic's, in trainer/config.py; here is what one field means for another.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from .sampling_params import SamplingParams, logprobs_mode   # torch-free, as config.py is

if TYPE_CHECKING:
    from .config import DataConfig, EvalConfig, RolloutConfig, RunConfig


def cross_field_problems(c: RunConfig) -> list[str]:
    """Every cross-field problem of ``c``, in the order of its groups (empty: none)."""
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
