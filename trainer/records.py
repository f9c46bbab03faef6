"""The plain data a step passes between its phases; no behaviour beyond slicing.

    Scored      B groups of rollouts with their verdicts          (rollout phase → advantages)
    TrainBatch  the padded tensors the learner trains on          (advantages → learner)
    LossSpec    the objective's constants                         (config → loss function)
    LearnStats  what one update measured                          (learner → step row)
    StepValues  everything a step's metrics row is computed from  (step → ``step_row``)
    Ledger      where generated tokens went, by fate              (step, evaluation → rows, checkpoints)

A leaf module: it imports no other trainer module, so every phase can depend on it.
"""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass, field, replace
from typing import Any, Optional

import torch

from proctor.envs import SuiteItem, Verdict

from .rollout.base import Rollout


@dataclass(frozen=True)
class Scored:
    """B groups of rollouts with their verdicts, group-contiguous: group b is ``sizes[b]``
    rollouts of one prompt (G each, unless ``rollout.adaptive_group_size`` sized them)."""

    items: list[SuiteItem]            # one per rollout (each prompt's item repeated once per rollout)
    rollouts: list[Rollout]
    verdicts: list[Verdict]
    sizes: tuple[int, ...] = ()       # each group's rollouts, in order; sum = len(rollouts)
    turns: int = 1                    # the most turns any rollout ran (multi-turn envs)
    prompts_truncated: int = 0        # prompts over data.max_prompt_length cut from the left
    prompts_dropped: int = 0          # ... or dropped and replaced by another draw

    def __post_init__(self) -> None:
        if not len(self.items) == len(self.rollouts) == len(self.verdicts):
            raise ValueError(f"Scored: {len(self.items)} items, {len(self.rollouts)} rollouts and "
                             f"{len(self.verdicts)} verdicts must be equal (a short list would shift rewards)")
        if sum(self.sizes) != len(self.rollouts) or any(g < 1 for g in self.sizes):
            raise ValueError(f"Scored: group sizes {self.sizes} do not cover its {len(self.rollouts)} rollouts")

    @staticmethod
    def uniform(items: list[SuiteItem], rollouts: list[Rollout], verdicts: list[Verdict], group_size: int,
                **counts: int) -> "Scored":
        """Groups of ``group_size`` each (``counts``: turns, prompts_truncated, prompts_dropped)."""
        if group_size < 1 or len(rollouts) % group_size:
            raise ValueError(f"Scored: {len(rollouts)} rollouts do not split into whole groups of {group_size}")
        return Scored(items, rollouts, verdicts, (group_size,) * (len(rollouts) // group_size), **counts)

    def groups(self) -> list[slice]:
        starts = group_starts(self.sizes)
        return [slice(s, s + g) for s, g in zip(starts, self.sizes)]

    def keep_groups(self, keep: list[bool]) -> "Scored":
        if len(keep) != len(self.sizes):
            raise ValueError(f"keep_groups: {len(keep)} flags for {len(self.sizes)} groups")
        idx = [i for group, k in zip(self.groups(), keep) if k for i in range(group.start, group.stop)]
        return Scored([self.items[i] for i in idx], [self.rollouts[i] for i in idx],
                      [self.verdicts[i] for i in idx], tuple(g for g, k in zip(self.sizes, keep) if k),
                      self.turns, self.prompts_truncated, self.prompts_dropped)

    def __add__(self, other: "Scored") -> "Scored":
        return Scored(self.items + other.items, self.rollouts + other.rollouts, self.verdicts + other.verdicts,
                      self.sizes + other.sizes, max(self.turns, other.turns),
                      self.prompts_truncated + other.prompts_truncated, self.prompts_dropped + other.prompts_dropped)


def group_starts(sizes: tuple[int, ...]) -> list[int]:
    """Each group's first row."""
    starts, at = [], 0
    for g in sizes:
        starts.append(at)
        at += g
    return starts


@dataclass(frozen=True)
class Mean:
    """A logged mean that micro-batches combine by their counts: the update logs
    sum(total) / sum(count), the mean over the whole batch, not the mean of the micro-batches'
    means (which over-weights a short micro-batch). NaN when the count is 0."""

    total: float
    count: float


@dataclass(frozen=True)
class Min:
    """A logged minimum: the update logs the least over its micro-batches."""

    value: float


@dataclass(frozen=True)
class Max:
    """A logged maximum: the update logs the greatest over its micro-batches."""

    value: float


def combine(values: list[Any]) -> float:
    """One logged value of an update from its micro-batches' (see Mean, Min, Max); plain floats
    are averaged."""
    first = values[0]
    if isinstance(first, Mean):
        count = sum(v.count for v in values)
        return sum(v.total for v in values) / count if count else math.nan
    if isinstance(first, Min):
        return min(v.value for v in values)
    if isinstance(first, Max):
        return max(v.value for v in values)
    return sum(values) / len(values)


@dataclass(frozen=True)
class RowCount:
    """Rows and masked (learned) tokens: of the rows a batch left out as inert, or of the
    whole batch a micro-batch was cut from."""

    rows: int = 0
    tokens: float = 0.0

    def __add__(self, other: "RowCount") -> "RowCount":
        return RowCount(self.rows + other.rows, self.tokens + other.tokens)


@dataclass
class TrainBatch:
    """Right-padded prompt+completion rows; per-token tensors are over *target* positions
    (position j predicts token j+1), with ``mask`` set on completion tokens only.

    ``inert``: rows :meth:`select` left out whose loss and gradient are exactly zero (advantage
    0, or no learned token). They are skipped, not forgotten: they stay in the batch's counts
    (what grpo, bnpo and dr_grpo divide by) and in the clip fractions' denominators, as TRL
    counts every completion token. The learner hands them to the batch's first micro-batch,
    so that they are counted once. ``whole``: set by the learner on each micro-batch, the
    counts of the batch it was cut from, inert rows included."""

    input_ids: torch.Tensor        # [B, L]
    attention_mask: torch.Tensor   # [B, L]
    targets: torch.Tensor          # [B, L-1]: input_ids shifted left
    mask: torch.Tensor             # [B, L-1] float: 1 on the completion's tokens
    advantages: torch.Tensor       # [B]
    sampler_logp: torch.Tensor     # [B, L-1]: the sampler's log-probs on the mask, 0 elsewhere
    inert: RowCount = RowCount()
    whole: Optional[RowCount] = None

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def counts(self) -> RowCount:
        """This batch's rows and masked tokens, the inert rows it left out included."""
        return RowCount(len(self), float(self.mask.sum())) + self.inert

    def slice(self, rows: slice) -> "TrainBatch":
        """Rows ``rows``, a batch of their own (no inert rows, no whole)."""
        return TrainBatch(*(t[rows] for t in self.tensors()))

    def select(self, keep: torch.Tensor) -> "TrainBatch":
        """The rows where ``keep`` (bool [B]) is set; rows left out with advantage 0 or no
        learned token are counted in ``inert`` (any other row left out is gone)."""
        gone = ~keep
        tokens = self.mask.sum(-1)
        inert = gone & ((self.advantages == 0).reshape(len(self), -1).all(-1) | (tokens == 0))
        left = RowCount(int(inert.sum()), float(tokens[inert].sum()))
        return TrainBatch(*(t[keep] for t in self.tensors()), inert=self.inert + left)

    def to(self, device: Any) -> "TrainBatch":
        return replace(self, **{f: getattr(self, f).to(device) for f in self.TENSORS})

    TENSORS = ("input_ids", "attention_mask", "targets", "mask", "advantages", "sampler_logp")

    def tensors(self) -> tuple[torch.Tensor, ...]:
        return (self.input_ids, self.attention_mask, self.targets, self.mask, self.advantages, self.sampler_logp)


@dataclass(frozen=True)
class Generation:
    """One generation batch: the rollouts of ``steps`` optimizer steps (TRL's
    steps_per_generation), scored, with advantages, tensors and π_old fixed at generation."""

    scored: Scored
    dropped: Scored                      # dynamic sampling: groups replaced (their tokens count once)
    advantages: Any                      # algo.AdvantageStats over every rollout
    batch: TrainBatch                    # every rollout's row
    num_items: float                     # N: completion tokens of the whole generation batch, every process
    old_logp: Optional[torch.Tensor]     # [rows, L-1] π_old at generation (steps > 1), else None
    steps: int
    rounds: int = 0
    lags: Optional[list[int]] = None

    def to(self, device: Any) -> "Generation":
        return replace(self, batch=self.batch.to(device),
                       old_logp=None if self.old_logp is None else self.old_logp.to(device))

    def part(self, index: int) -> "Generation":
        """The share of optimizer step ``index`` (0-based): a contiguous run of whole groups
        (an equal count of groups each, the last step taking the remainder)."""
        if self.steps == 1:
            return self
        sizes = self.scored.sizes
        per = len(sizes) // self.steps
        first_group, end_group = index * per, len(sizes) if index == self.steps - 1 else (index + 1) * per
        starts = group_starts(sizes) + [len(self.scored.rollouts)]
        rows = slice(starts[first_group], starts[end_group])
        idx = list(range(len(self.scored.rollouts)))[rows]
        first = index == 0
        return Generation(
            Scored(self.scored.items[rows], self.scored.rollouts[rows], self.scored.verdicts[rows],
                   sizes[first_group:end_group], self.scored.turns,
                   self.scored.prompts_truncated if first else 0, self.scored.prompts_dropped if first else 0),
            self.dropped if first else Scored([], [], []),
            _rows_of(self.advantages, rows, starts[first_group:end_group]),
            self.batch.slice(rows), self.num_items, None if self.old_logp is None else self.old_logp[rows], 1,
            self.rounds if first else 0, None if self.lags is None else [self.lags[i] for i in idx])


def _rows_of(adv: Any, rows: slice, starts: list[int]) -> Any:
    """AdvantageStats restricted to ``rows`` (whole groups, first rows ``starts``); the zero-signal share recounted."""
    zero = adv.zero_signal[rows]
    firsts = adv.zero_signal[starts] if starts else zero
    return replace(adv, advantages=adv.advantages[rows], group_mean=adv.group_mean[rows],
                   group_std=adv.group_std[rows], zero_signal=zero, valid=adv.valid[rows],
                   frac_zero_signal=float(firsts.float().mean()) if len(zero) else 0.0)


@dataclass(frozen=True)
class LossSpec:
    """The clipped-surrogate objective's constants (``algo.policy_loss`` keywords)."""

    loss_type: str
    importance_level: str
    epsilon_low: float
    epsilon_high: Optional[float]
    delta: Optional[float]
    beta: float
    kl_kind: str
    entropy_coef: float
    max_completion_length: int
    temperature: float
    steps_per_generation: int = 1        # optimizer steps per generation batch (dapo's N is that batch's)
    is_min: Optional[float] = None       # C_min of the sampler/learner IS correction (rollout.is_min)

    @classmethod
    def from_config(cls, objective: Any, rollout: Any, optim: Any = None, max_turns: int = 1) -> "LossSpec":
        """``max_turns``: the most turns an episode of the suite runs. dr_grpo's constant
        normaliser is the longest a completion's learned part can be: max_turns x max_new_tokens
        (env-inserted feedback tokens are masked out of the loss)."""
        return cls(objective.loss_type, objective.importance_level, objective.epsilon_low, objective.epsilon_high,
                   objective.delta, objective.beta, objective.kl_kind, objective.entropy_coef,
                   rollout.max_new_tokens * max_turns, rollout.temperature,
                   optim.steps_per_generation if optim is not None else 1, rollout.is_min)

    def policy_kwargs(self) -> dict[str, Any]:
        return dict(loss_type=self.loss_type, importance_level=self.importance_level,
                    epsilon_low=self.epsilon_low, epsilon_high=self.epsilon_high, delta=self.delta,
                    beta=self.beta, kl_kind=self.kl_kind, max_completion_length=self.max_completion_length,
                    entropy_coef=self.entropy_coef)


@dataclass
class LearnStats:
    """One update's measurements: per-micro-batch values averaged, the loss summed."""

    values: dict[str, float] = field(default_factory=dict)
    loss: float = 0.0
    grad_norm: float = 0.0
    skipped_nonfinite: int = 0
    learned_rows: int = 0
    lr: float = math.nan                     # the learning rate of the (first) optimizer step

    @classmethod
    def not_taken(cls) -> "LearnStats":
        """A step whose update was not run (too many completions not judged)."""
        return cls(loss=math.nan, grad_norm=math.nan)

    def as_dict(self) -> dict[str, float]:
        return {**self.values, "loss": self.loss, "grad_norm": self.grad_norm,
                "skipped_nonfinite": self.skipped_nonfinite, "learned_rows": self.learned_rows, "lr": self.lr}


@dataclass(frozen=True)
class Ledger:
    """Where generated tokens went: each one has exactly one fate (the token ledger).

    learned           in a row the update weighed (advantage != 0, the update taken)
    zero_signal       in a row kept for the update but weighed 0: its group's rewards all
                      alike (the usual case), or the row not judged, or at its group's mean
    dropped           in a group dynamic sampling replaced (generated and scored, then dropped)
    unused            in a row with an advantage, in a step whose update was not taken
                      (too many completions unjudged, or a non-finite loss)
    eval              generated by evaluation
    skipped_estimate  not generated: what the prompts the pass-rate memory skipped would have
                      cost (G × the recent mean completion length). An estimate, beside the
                      ledger, never in its sums.

    Counted are the tokens the model sampled (not those an env inserted between turns).
    ``rollouts`` = learned + zero_signal + dropped + unused; ``generated`` = rollouts + eval.
    A step's ledger comes from ``step_row.step_ledger``; the run's is their sum (in checkpoints).
    """

    learned: int = 0
    zero_signal: int = 0
    dropped: int = 0
    unused: int = 0
    eval: int = 0
    skipped_estimate: int = 0

    @property
    def rollouts(self) -> int:
        return self.learned + self.zero_signal + self.dropped + self.unused

    @property
    def generated(self) -> int:
        return self.rollouts + self.eval

    @property
    def taught_nothing(self) -> int:
        """Rollout tokens in groups without signal, kept or dropped."""
        return self.zero_signal + self.dropped

    def __add__(self, other: "Ledger") -> "Ledger":
        return Ledger(*(a + b for a, b in zip(astuple(self), astuple(other))))

    @classmethod
    def from_state(cls, state: dict[str, int]) -> "Ledger":
        """A checkpoint's ledger; one written before the ledger had only three counters."""
        if "tokens_generated" in state:
            return cls(learned=int(state["tokens_learned"]), zero_signal=int(state["tokens_zero_signal"]))
        return cls(**state)


@dataclass(frozen=True)
class StepValues:
    """Everything one step's metrics row is computed from (see ``step_row.step_row``)."""

    step: int
    scored: Scored
    zero_signal: list[bool]           # per rollout: its group teaches nothing
    zero_signal_frac: float           # share of groups with zero signal
    learn: dict[str, float]
    times: dict[str, float]           # the step's time split, seconds per section
    step_s: float
    ledger: Ledger                    # this step's tokens, by fate
    totals: Ledger                    # the run's, after this step
    lr: float
    weight_version: int
    memory_kind: str                  # "cuda" (peak allocated) or "rss" (peak resident set)
    peak_memory_bytes: int
    rounds: int = 0                   # dynamic-sampling rounds
    lags: Optional[list[int]] = None  # async: each rollout's staleness in optimizer steps
    sync_bytes: Optional[float] = None
    dropped: Optional[Scored] = None  # dynamic sampling: the zero-signal groups replaced this step
    extra: dict[str, Any] = field(default_factory=dict)   # algorithm-specific values (PPO's critic)


__all__ = ["Generation", "LearnStats", "LossSpec", "Scored", "StepValues", "Ledger", "TrainBatch"]
