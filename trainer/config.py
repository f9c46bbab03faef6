"""Every knob of a GRPO run, with the defaults a TRL or verl user would expect."""

from __future__ import annotations

from dataclasses import asdict, field, fields
from typing import Any, Literal, Optional

from pydantic import ConfigDict, ValidationError
from pydantic.dataclasses import dataclass

LossType = Literal["grpo", "bnpo", "dr_grpo", "dapo"]
ScaleRewards = Literal["group", "batch", "none"]


DEFAULT_ENVS = {"arithmetic": {"id": "proctor/Arithmetic-v0",
                               # The tiny model was pretrained on "What is 3 + 4?": ask it that way.
                               "kwargs": {"level": 1, "n": 2000, "prompt_template": "What is {expr}?"}}}


@dataclass(config=ConfigDict(extra="forbid"))
class GRPOConfig:
    """Validated on construction (pydantic): a wrong type or value names its field.

    The defaults are the embedded demo: the tiny offline model on procedural
    arithmetic, on CPU, in a few minutes, with the pass rate rising.
    """

    # ---- model and data
    model: str = "tiny"                       # a path or hub id; "tiny" / "tiny:STEPS" for the offline model
    envs: dict[str, dict[str, Any]] = field(default_factory=lambda: {k: dict(v) for k, v in DEFAULT_ENVS.items()})
    env_weights: Optional[dict[str, float]] = None
    system_prompt: Optional[str] = None
    output_dir: str = "runs/arithmetic-tiny"
    seed: int = 0
    # ---- sampling: B prompts × G completions per step
    prompts_per_step: int = 8                 # B
    group_size: int = 8                       # G
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 8
    generation_batch_size: int = 64           # sequences per generate call
    # transformers: the learner's own model; vllm: an engine in this process; vllm_server:
    # `proctor serve` engines in their own processes (started for the run if no URL is given)
    rollout_backend: Literal["transformers", "vllm", "vllm_server"] = "transformers"
    vllm_sync_every: int = 1                  # push weights to the vLLM engine every k optimizer steps
    vllm_lora_sync: Literal["adapter", "merged"] = "adapter"   # LoRA: push the adapter, or W + BA
    vllm_sleep: Literal["auto", "on", "off"] = "auto"          # colocated: free engine memory while learning (GPU)
    vllm_sleep_level: Literal[1, 2] = 1       # 1: offload weights to CPU; 2: drop them (a full sync follows)
    vllm_gpu_memory_utilization: float = 0.3  # colocated: the engine's share, the learner keeps the rest
    vllm_server_urls: list[str] = field(default_factory=list)   # one per data-parallel engine
    vllm_server_args: list[str] = field(default_factory=list)   # extra `proctor serve` flags for a started one
    vllm_bucket_mb: float = 256.0             # weight-transfer bucket size
    vllm_timeout_s: float = 600.0             # per generate call
    vllm_sync_timeout_s: float = 120.0        # per weight-transfer call
    # Off-policy pipelining, off by default: generate the next batches while learning on this
    # one, at most max_staleness optimizer steps behind (needs a vLLM backend).
    async_generation: bool = False
    max_staleness: int = 1
    overlap_scoring: bool = True              # score finished chunks while the next ones generate
    # Sampler/learner mismatch correction: "auto" is sequence_mask with vLLM, off with transformers
    # (which samples with the learner's own weights and kernels).
    is_correction: Optional[Literal["auto", "off", "token_truncate", "token_mask", "sequence_truncate",
                                    "sequence_mask"]] = "auto"
    is_cap: float = 3.0
    # ---- optimisation
    max_steps: int = 80
    learning_rate: float = 2e-4
    weight_decay: float = 0.0
    warmup_steps: int = 0
    max_grad_norm: float = 1.0
    micro_batch_size: int = 32                # sequences per forward/backward (gradient accumulation)
    num_iterations: int = 1                   # μ: optimizer passes over each batch
    # ---- the GRPO objective
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
    # ---- algorithm: GRPO, or PPO with a critic for side-by-side cost comparisons
    algorithm: Literal["grpo", "ppo"] = "grpo"
    gamma: float = 1.0                        # PPO: discount
    lam: float = 0.95                         # PPO: GAE λ
    critic_learning_rate: float = 1e-4        # PPO: the critic's own AdamW
    value_clip: Optional[float] = 0.2         # PPO: value-loss clipping range
    whiten_advantages: bool = True            # PPO: normalise GAE advantages over the batch
    # ---- zero-signal groups
    dynamic_sampling: bool = False            # DAPO: drop zero-signal groups, draw more prompts
    max_resample_rounds: int = 2
    skip_predicted_zero_signal: bool = False  # pass-rate memory
    skip_threshold: float = 0.9
    # ---- scale and memory
    mixed_precision: Literal["no", "bf16", "fp16"] = "no"
    gradient_checkpointing: bool = False
    lora_rank: int = 0                        # 0: full fine-tuning
    lora_alpha: int = 16
    # ---- checkpoints
    save_every: int = 0                       # steps between checkpoints (0: only at the end)
    resume_from: Optional[str] = None         # a checkpoint dir, or "latest" (under output_dir/checkpoints)
    max_nonfinite_steps: int = 3              # consecutive NaN/inf losses or grads before the run stops
    # ---- logging
    log_every: int = 1
    sample_completions: int = 2               # completions (with verdicts) printed per log
    report_to: list[str] = field(default_factory=list)   # accelerate trackers: "tensorboard", "wandb"

    def __post_init__(self) -> None:
        problems = []
        for name in ("prompts_per_step", "group_size", "max_new_tokens", "max_steps", "micro_batch_size",
                     "num_iterations", "generation_batch_size"):
            if getattr(self, name) < 1:
                problems.append(f"{name} must be >= 1 (got {getattr(self, name)})")
        if self.group_size < 2 and self.algorithm == "grpo":
            problems.append("group_size must be >= 2 for GRPO: a group of one has no baseline")
        if not self.temperature > 0:
            problems.append(f"temperature must be > 0 (got {self.temperature})")
        if self.beta < 0 or self.entropy_coef < 0:
            problems.append("beta and entropy_coef must be >= 0")
        if not 0 < self.epsilon_low < 1:
            problems.append(f"epsilon_low must be in (0, 1) (got {self.epsilon_low})")
        if self.max_staleness < 1 or self.vllm_sync_every < 1:
            problems.append("max_staleness and vllm_sync_every must be >= 1")
        if self.async_generation and self.rollout_backend == "transformers":
            problems.append("async_generation needs rollout_backend vllm or vllm_server: transformers samples with "
                            "the learner's own weights, which the update changes while the next batch generates")
        if self.async_generation and self.algorithm == "ppo":
            problems.append("async_generation is for GRPO; PPO here runs on-policy (set algorithm: grpo)")
        if self.async_generation and self.vllm_sleep == "on":
            problems.append("async_generation keeps the engine generating while the learner works, so it cannot "
                            "sleep: set vllm_sleep to auto or off")
        if self.vllm_sleep == "on" and self.rollout_backend != "vllm":
            problems.append("vllm_sleep: on applies to rollout_backend vllm (colocated); a server frees nothing "
                            "of the learner's devices")
        if problems:
            raise ValueError("GRPOConfig: " + "; ".join(problems))

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "config") -> "GRPOConfig":
        """Build from a mapping (a YAML file's content); errors name the file and the field."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        try:
            return cls(**data)
        except ValidationError as exc:
            lines = []
            for e in exc.errors():
                msg = e["msg"].removeprefix("Value error, ")
                field_name = ".".join(map(str, e["loc"]))
                lines.append(f"{where}: field {field_name}: {msg} (got {e.get('input')!r})" if field_name
                             else f"{where}: {msg}")
            raise ValueError("\n".join(lines)) from None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
