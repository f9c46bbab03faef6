"""The groups of a run's config: their fields, types and defaults (pydantic dataclasses).

`RunConfig` (trainer/config.py) holds one of each, loads them from YAML and checks how one
field bears on another; here each field alone is typed, ranged and documented.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any, Literal, Optional

from pydantic import ConfigDict
from pydantic.dataclasses import dataclass

LossType = Literal["grpo", "bnpo", "dr_grpo", "dapo"]
ScaleRewards = Literal["group", "batch", "none"]
STRICT = ConfigDict(extra="forbid")

DEFAULT_ENVS = {"arithmetic": {"id": "proctor/Arithmetic-v0",
                               # The tiny model was pretrained on "What is 3 + 4?": ask it that way.
                               "kwargs": {"level": 1, "n": 2000, "prompt_template": "What is {expr}?"}}}


@dataclass(config=STRICT)
class DataConfig:
    envs: dict[str, dict[str, Any]] = field(default_factory=lambda: {k: dict(v) for k, v in DEFAULT_ENVS.items()})
    env_weights: Optional[dict[str, float]] = None
    system_prompt: Optional[str] = None
    prompts_per_step: int = 8                 # B
    dynamic_sampling: bool = False            # DAPO: drop zero-signal groups, draw more prompts
    max_resample_rounds: int = 2
    # Pre-rollout selection (trainer/select/frontier.py). skip_predicted_zero_signal: a prompt whose
    # own record predicts P(all G right or all wrong) > skip_threshold is skipped, except with
    # probability skip_explore (so it can come back as the policy moves).
    skip_predicted_zero_signal: bool = False
    skip_threshold: float = 0.9
    skip_explore: float = 0.1
    # ... and a prompt whose last skip_after groups in a row taught nothing (GRESO's rule; 0: off)
    skip_after: int = 0
    # Adaptive difficulty: envs that declare a difficulty knob draw each prompt from the levels
    # whose predicted pass rate is in this band [lo, hi] (the policy's frontier); other levels
    # with probability skip_explore. None: off. difficulty_envs: which envs (None: every env
    # with a knob; naming an env without one is an error).
    target_pass_rate: Optional[tuple[float, float]] = None
    difficulty_envs: Optional[list[str]] = None
    # The answer probe (trainer/select/probe.py): each prompt's pass rate predicted by the policy's own
    # probability of answer_template.format(answer=task.answer) + EOS, one forward pass over
    # probe_pool x B candidates per step; prompts predicted in target_pass_rate are kept, others
    # with probability skip_explore. For short-answer envs whose gold answer is the reply itself.
    answer_probe: bool = False
    answer_template: str = "{answer}"
    probe_pool: int = 4
    # Selection changes the prompt mix; skip_reweight weighs each drawn prompt's advantages by
    # P_uniform / P_selected, over the batch's mean weight, so the objective keeps the uniform
    # mix in expectation and the step size stays that of an unweighted batch.
    skip_reweight: bool = False
    # "random": tasks drawn with replacement (env_weights); "epochs": every task of every env
    # once per epoch, in a shuffled order when shuffle is on (TRL's dataset semantics)
    order: Literal["random", "epochs"] = "random"
    shuffle: bool = True
    max_prompt_length: Optional[int] = None   # tokens; longer prompts are cut or dropped (counted)
    prompt_overflow: Literal["truncate_left", "drop"] = "truncate_left"
    chat_template_kwargs: dict[str, Any] = field(default_factory=dict)   # e.g. {enable_thinking: false}
    # TRL-style reward functions beside the envs: "module:function" or "path.py:function",
    # called as f(prompts, completions, **columns); combined with weights (see envs)
    reward_funcs: list[str] = field(default_factory=list)
    reward_weights: Optional[list[float]] = None


@dataclass(config=STRICT)
class RayEnginesConfig:
    """Rollout engines on a Ray cluster (trainer/serve/ray_engines.py) instead of typed URLs."""

    address: str = "auto"                     # the cluster ("auto": the one this machine is in)
    engines: int = 0                          # start this many for the run; 0: use those running as `name`
    name: str = "proctor-rollout"             # engines are the actors <name>-0, <name>-1, ...
    gpus_per_engine: float = 1.0              # each engine's placement-group bundle (0: CPU-only cluster)
    cpus_per_engine: float = 1.0
    start_timeout_s: float = 600.0


@dataclass(config=STRICT)
class VLLMConfig:
    sync_every: int = 1                       # push weights to the engine every k optimizer steps
    lora_sync: Literal["adapter", "merged"] = "adapter"   # LoRA: push the adapter, or W + BA
    sleep: Literal["auto", "on", "off"] = "auto"          # colocated: free engine memory while learning (GPU)
    sleep_level: Literal[1, 2] = 1            # 1: offload weights to CPU; 2: drop them (a full sync follows)
    gpu_memory_utilization: float = 0.3       # colocated: the engine's share, the learner keeps the rest
    server_urls: list[str] = field(default_factory=list)   # one per data-parallel engine
    ray: Optional[RayEnginesConfig] = None    # engines on a Ray cluster, found or started by name
    server_args: list[str] = field(default_factory=list)   # extra `proctor serve` flags for a started one
    bucket_mb: float = 256.0                  # weight-transfer bucket size
    timeout_s: float = 600.0                  # per generate call
    sync_timeout_s: float = 120.0             # per weight-transfer call


@dataclass(config=STRICT)
class RolloutConfig:
    # transformers: the learner's own model; vllm: an engine in this process; vllm_server:
    # `proctor serve` engines in their own processes (started for the run if no URL is given)
    backend: Literal["transformers", "vllm", "vllm_server"] = "transformers"
    group_size: int = 8                       # G
    # [min, max]: each prompt's group sized from the answer probe's predicted pass rate (few near
    # 0.5, more near the band's ends); a step still samples prompts_per_step x group_size
    # completions, over as many prompts as their sizes take. null: every group is group_size.
    adaptive_group_size: Optional[tuple[int, int]] = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 8
    generation_batch_size: int = 64           # sequences per generate call
    # passed to every backend's sampler: min_p, repetition_penalty, stop (strings), ...
    generation_kwargs: dict[str, Any] = field(default_factory=dict)
    # Off-policy pipelining, off by default: generate the next batches while learning on this
    # one, at most max_staleness optimizer steps behind (needs a vLLM backend).
    async_generation: bool = False
    max_staleness: int = 1
    overlap_scoring: bool = True              # score finished chunks while the next ones generate
    # Sampler/learner mismatch correction, weights π_old/π_sampler (trainer/algo/is_correction.py):
    # "auto" is token_truncate (TIS) with vLLM, off with transformers (which samples with the
    # learner's own weights and kernels); see resolve_is_correction.
    is_correction: Optional[Literal["auto", "off", "token_truncate", "token_mask", "sequence_truncate",
                                    "sequence_mask"]] = "auto"
    is_cap: float = 2.0                       # C_max: upper bound on the weight (truncated, or masked above)
    is_min: Optional[float] = None            # C_min: lower bound (truncated, or masked below); null: none
    vllm: VLLMConfig = field(default_factory=VLLMConfig)


@dataclass(config=STRICT)
class PPOConfig:
    gamma: float = 1.0                        # discount
    lam: float = 0.95                         # GAE λ
    critic_learning_rate: float = 1e-4        # the critic's own AdamW
    value_clip: Optional[float] = 0.2         # value-loss clipping range
    whiten_advantages: bool = True            # normalise GAE advantages over the batch


@dataclass(config=STRICT)
class ObjectiveConfig:
    algorithm: Literal["grpo", "ppo"] = "grpo"   # PPO (with a critic) for side-by-side cost comparisons
    loss_type: LossType = "dapo"
    scale_rewards: ScaleRewards = "group"
    importance_level: Literal["token", "sequence"] = "token"
    epsilon_low: float = 0.2
    epsilon_high: Optional[float] = 0.28      # DAPO clip-higher; None: = epsilon_low
    delta: Optional[float] = None
    beta: float = 0.0                         # KL coefficient; 0 loads no reference model
    kl_kind: Literal["k1", "k2", "k3"] = "k3"
    entropy_coef: float = 0.0
    mask_truncated: bool = False
    num_iterations: int = 1                   # μ: optimizer passes over each batch
    ppo: PPOConfig = field(default_factory=PPOConfig)


@dataclass(config=STRICT)
class OptimConfig:
    learning_rate: float = 2e-4
    weight_decay: float = 0.0
    warmup_steps: int = 0
    max_grad_norm: float = 1.0
    micro_batch_size: int = 32                # sequences per forward/backward (gradient accumulation)
    mixed_precision: Literal["no", "bf16", "fp16"] = "no"
    gradient_checkpointing: bool = False
    lora_rank: int = 0                        # 0: full fine-tuning
    lora_alpha: int = 16
    max_nonfinite_steps: int = 3              # consecutive NaN/inf losses or grads before the run stops
    lr_scheduler: Literal["constant", "linear", "cosine"] = "constant"   # after warmup_steps
    steps_per_generation: int = 1             # optimizer steps per generation batch (TRL's semantics)
    # A step whose completions are more than this share infra_error (the sandbox or a scorer
    # failed) is not taken; max_infra_steps such steps in a row stop the run with a checkpoint.
    max_infra_frac: float = 0.5
    max_infra_steps: int = 3


@dataclass(config=STRICT)
class CheckpointConfig:
    save_every: int = 0                       # steps between checkpoints (0: only at the end)
    resume_from: Optional[str] = None         # a checkpoint dir, or "latest" (under output_dir/checkpoints)
    save_total_limit: Optional[int] = None    # keep only the newest N checkpoints


@dataclass(config=STRICT)
class EvalConfig:
    """Held-out evaluation during training, logged as eval_* and plotted beside the train curve."""

    envs: dict[str, dict[str, Any]] = field(default_factory=dict)   # separate eval envs, as data.envs
    split: float = 0.0                        # or: hold out this share of each train env's questions
    every: int = 0                            # steps between evaluations (0: none); also before step 1 and at the end
    max_prompts: Optional[int] = 200          # per env
    greedy: bool = True                       # greedy pass@1
    k: list[int] = field(default_factory=list)   # sampled pass@k for each k (at rollout.temperature)


@dataclass(config=STRICT)
class LogConfig:
    log_every: int = 1
    sample_completions: int = 2               # completions (with verdicts) printed per log
    report_to: list[str] = field(default_factory=list)   # accelerate trackers: "tensorboard", "wandb"
