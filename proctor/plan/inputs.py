"""The options of ``proctor plan`` as one validated record (:class:`PlanInput`): what the
memory plan (``memory.py``) and its stated assumptions (``assumptions.py``) both read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional, Union

from .costs import OPTIMIZERS, PRECISIONS
from .model_shape import ModelShape, load_shape, shape_from_params

Algorithm = Literal["grpo", "ppo", "both"]
ALGORITHMS: tuple[str, ...] = ("grpo", "ppo", "both")


@dataclass
class PlanInput:
    """Every option of ``proctor plan``; validated on construction, errors name the option."""

    params: Optional[float] = None          # actor parameter count, e.g. 70e9
    model: Optional[str] = None             # config dir / config.json / cached hub id (shape and count)
    shape: Optional[ModelShape] = None      # or the shape itself (tests, callers holding a model)
    algorithm: str = "both"
    critic_params: Optional[float] = None   # None: actor-sized
    reward_params: Optional[float] = None   # None: actor-sized
    optimizer: str = "adamw"
    precision: str = "bf16-mixed"
    sharding: Union[int, str] = 0           # ZeRO stage 0..3, or "fsdp" (full shard, like stage 3)
    gpus: int = 1
    offload: bool = False                   # optimizer state and master weights in CPU RAM
    lora_rank: int = 0                      # 0: full fine-tuning
    kl: bool = True                         # a frozen reference model for the KL term
    group_size: int = 8                     # G: GRPO completions per prompt
    ppo_samples_per_prompt: int = 1         # PPO usually samples one completion per prompt
    prompt_len: int = 512
    completion_len: int = 1024
    batch_size: int = 8                     # B: prompts per optimizer step, all GPUs together
    micro_batch: int = 1                    # sequences per forward/backward per GPU
    gradient_checkpointing: bool = True

    def __post_init__(self) -> None:
        problems = []
        if self.shape is None and self.params is None and not self.model:
            problems.append("give the model: --params (a count such as 70e9) or --model (a config path or hub id)")
        for name in ("params", "critic_params", "reward_params"):
            value = getattr(self, name)
            if value is not None and not value >= 1:
                problems.append(f"--{name.replace('_', '-')} must be a positive count such as 7e9 (got {value})")
        if self.algorithm not in ALGORITHMS:
            problems.append(f"--algorithm must be one of {', '.join(ALGORITHMS)} (got {self.algorithm!r})")
        if self.optimizer not in OPTIMIZERS:
            problems.append(f"--optimizer must be one of {', '.join(OPTIMIZERS)} (got {self.optimizer!r})")
        if self.precision not in PRECISIONS:
            problems.append(f"--precision must be one of {', '.join(PRECISIONS)} (got {self.precision!r})")
        if self.sharding != "fsdp" and (isinstance(self.sharding, bool) or self.sharding not in (0, 1, 2, 3)):
            problems.append(f"--zero must be a ZeRO stage 0, 1, 2 or 3 (or use --fsdp) (got {self.sharding!r})")
        for name in ("gpus", "group_size", "ppo_samples_per_prompt", "prompt_len", "completion_len",
                     "batch_size", "micro_batch"):
            if getattr(self, name) < 1:
                problems.append(f"--{name.replace('_', '-')} must be >= 1 (got {getattr(self, name)})")
        if self.lora_rank < 0:
            problems.append(f"--lora-rank must be >= 0, 0 for full fine-tuning (got {self.lora_rank})")
        if problems:
            raise ValueError("; ".join(problems))

    @property
    def stage(self) -> int:
        """ZeRO stage in effect: FSDP full sharding shards what stage 3 shards."""
        return 3 if self.sharding == "fsdp" else int(self.sharding)

    @property
    def algorithms(self) -> list[str]:
        return ["grpo", "ppo"] if self.algorithm == "both" else [self.algorithm]

    def resolve_shape(self) -> ModelShape:
        """The actor's shape: given, read from --model (with --params overriding the count), or guessed."""
        if self.shape is not None:
            return self.shape
        if self.model:
            shape = load_shape(self.model)
            if self.params is not None:
                shape = ModelShape(**{**shape.to_dict(), "params": int(self.params),
                                      "source": f"{shape.source} (count overridden: {int(self.params):,})"})
            return shape
        assert self.params is not None
        return shape_from_params(self.params)


__all__ = ["ALGORITHMS", "Algorithm", "PlanInput"]
