"""`Learner`: the one place that turns a loss into an optimizer step.

It owns micro-batching (gradient accumulation), the token count N that dapo-style
losses divide by (summed over every process), the non-finite guard, gradient clipping
and the optimizer and scheduler steps. GRPO and PPO give it a ``MicroLoss``: a function
of one micro-batch that returns its loss and the values to log.

Each micro-batch carries the whole batch's rows and tokens (``part.whole``), so a loss can
divide by the batch's counts rather than its own: the micro-batches' gradients then add up
to the whole batch's for any micro-batch size, a short last one included (GRPO's
``policy_loss`` does, for every loss type). Logged means are combined over the batch by
their counts (``records.Mean``), minima and maxima as such, so that the update's entropy,
clip fractions and ratios are over all its tokens, not an average of micro-batch averages.

The guard: a NaN/inf loss or gradient norm would poison the weights for good, so that
update is dropped, counted in ``skipped_nonfinite`` and in ``nonfinite_streak`` (the
run stops after ``max_nonfinite_steps`` in a row, with a checkpoint). Under fp16 a grad
scaler is in charge of overflow instead: the optimizer step is handed to the scaler,
which skips it and lowers its scale; the skip is counted, but only a non-finite loss
counts towards the streak.

Only the last micro-batch of an update is a gradient-accumulation boundary: DDP
all-reduces there only, and DeepSpeed, whose engine clips and steps inside the boundary
backward, steps once per update. Under DeepSpeed the update is therefore applied before
the guard sees the gradient norm: a non-finite update is counted and warned about (and
the streak stops the run), and DeepSpeed's own fp16 loss scaler skips overflowing steps.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, replace
from typing import Any, Callable, Optional, Protocol

import torch

from ..records import LearnStats, RowCount, TrainBatch, combine


class MicroLoss(Protocol):
    def __call__(self, part: TrainBatch, rows: slice, n_micro: int, pass_index: int
                 ) -> tuple[torch.Tensor, dict[str, Any]]:
        """The loss of ``part`` (rows ``rows`` of the batch; one of ``n_micro`` micro-batches,
        already divided for accumulation) and its logged values, on pass ``pass_index``.

        ``part.whole`` holds the rows and tokens of the whole batch (its inert rows included):
        a loss that divides by them, not by the micro-batch's own counts and ``n_micro``, adds
        up to the batch's loss for any split, a short last micro-batch included. A logged
        value is a float (averaged over the micro-batches) or a ``Mean``, ``Min`` or ``Max``
        (combined over the batch: ``records.combine``); "loss" is summed."""
        ...


@dataclass
class Trainable:
    """A prepared model with its optimizer (and scheduler): the policy, or PPO's critic."""

    model: torch.nn.Module
    optimizer: Any
    scheduler: Optional[Any] = None


def disable_dropout(model: torch.nn.Module) -> None:
    """Dropout off everywhere, so the update (in train mode, for gradient checkpointing)
    computes the same function the rollouts sampled from."""
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
        # Attention layers keep their rate as a float attribute and apply it functionally.
        for name, value in list(vars(module).items()):
            if "dropout" in name and isinstance(value, float):
                setattr(module, name, 0.0)


class Learner:
    def __init__(self, accelerator: Any, trainables: list[Trainable], *, micro_batch_size: int, max_grad_norm: float,
                 warn: Callable[[str], None]) -> None:
        self.accelerator = accelerator
        self.trainables = trainables
        self.micro_batch_size = micro_batch_size
        self.max_grad_norm = max_grad_norm
        self.warn = warn
        self.nonfinite_streak = 0

    @property
    def policy(self) -> torch.nn.Module:
        return self.trainables[0].model

    @property
    def lr(self) -> float:
        sched = self.trainables[0].scheduler
        return float(sched.get_last_lr()[0]) if sched is not None else float(self.trainables[0].optimizer.param_groups[0]["lr"])

    def token_count(self, mask: torch.Tensor) -> float:
        """N: the completion tokens of the whole generation batch, over every process."""
        return float(self.accelerator.reduce(mask.sum().detach(), reduction="sum"))

    def micro_batches(self, rows: int) -> list[slice]:
        return [slice(i, min(i + self.micro_batch_size, rows)) for i in range(0, rows, self.micro_batch_size)]

    def update(self, batch: TrainBatch, loss: MicroLoss, passes: int = 1) -> LearnStats:
        """``passes`` optimizer steps over ``batch`` (μ), each accumulating every micro-batch."""
        micro = self.micro_batches(len(batch))
        values: dict[str, list[Any]] = {}
        stats = LearnStats(learned_rows=len(batch), lr=self.lr)   # the rate this update applies
        for p in self.trainables:
            p.model.train()   # gradient checkpointing runs in train mode only; dropout is off
        try:
            for index in range(passes):
                losses = self._accumulate(batch, micro, loss, index, values)
                stats.grad_norm, skipped = self._step(sum(losses))
                stats.skipped_nonfinite += skipped
        finally:
            for p in self.trainables:
                p.model.eval()
        stats.values = {k: combine(v) for k, v in values.items() if k != "loss"}
        stats.loss = sum(values.get("loss", [0.0]))   # the per-micro losses add up to the step's loss
        return stats

    def _accumulate(self, batch: TrainBatch, micro: list[slice], loss: MicroLoss, index: int,
                    values: dict[str, list[Any]]) -> list[float]:
        if not micro:
            # Nothing taught this step: the update is Adam's with zero gradients, exactly what
            # the full backward would have produced.
            for p in self.trainables:
                for param in p.model.parameters():
                    if param.requires_grad:
                        param.grad = torch.zeros_like(param)
        losses = []
        whole = batch.counts()
        for i, rows in enumerate(micro):
            # every micro-batch knows the batch's counts; the first accounts for its inert rows
            part = replace(batch.slice(rows), whole=whole, inert=batch.inert if i == 0 else RowCount())
            value, logged = loss(part, rows, len(micro), index)
            self._backward(value, boundary=i == len(micro) - 1)
            for key, v in logged.items():
                values.setdefault(key, []).append(v)
            losses.append(logged.get("loss", float(value.detach())))
        return losses

    def _backward(self, value: torch.Tensor, boundary: bool) -> None:
        """One micro-batch's backward. Off the boundary, gradients stay local (no_sync). Under
        DeepSpeed the engine is told the boundary itself (its public API) and steps only there:
        it clips and steps inside, as accelerate's wrapper does when its own accumulation says so."""
        if self.engine_steps:
            engine = self.accelerator.deepspeed_engine_wrapped.engine
            engine.set_gradient_accumulation_boundary(is_boundary=boundary)
            engine.backward(value)
            if boundary:
                engine.step()
            return
        with contextlib.ExitStack() as local:
            if not boundary:
                for p in self.trainables:
                    local.enter_context(self.accelerator.no_sync(p.model))
            self.accelerator.backward(value)

    def _step(self, loss_sum: float) -> tuple[float, int]:
        """Clip, guard, step; returns (the policy's gradient norm, 1 if the step was skipped)."""
        norms = [_norm(self.accelerator.clip_grad_norm_(p.model.parameters(), self.max_grad_norm))
                 for p in self.trainables]
        finite = math.isfinite(loss_sum) and all(math.isfinite(n) for n in norms)
        if self.engine_steps:
            return norms[0], self._engine_stepped(finite, loss_sum, norms[0])
        if self.accelerator.scaler is not None and math.isfinite(loss_sum):
            return norms[0], self._scaled_step()
        if not finite:
            for p in self.trainables:
                p.optimizer.zero_grad(set_to_none=True)
            self.nonfinite_streak += 1
            self.warn(f"non-finite loss ({loss_sum}) or gradient norm ({norms[0]}): update skipped "
                      f"({self.nonfinite_streak} in a row)")
            return norms[0], 1
        self.nonfinite_streak = 0
        for p in self.trainables:
            p.optimizer.step()
            if p.scheduler is not None:
                p.scheduler.step()
            p.optimizer.zero_grad(set_to_none=True)
        return norms[0], 0

    def _engine_stepped(self, finite: bool, loss_sum: float, norm: float) -> int:
        """DeepSpeed: the engine clipped and stepped in the boundary backward (or skipped an
        fp16 overflow, which its scaler reports); the schedule follows."""
        skipped = max(int(bool(p.optimizer.step_was_skipped)) for p in self.trainables)
        for p in self.trainables:
            if p.scheduler is not None:
                p.scheduler.step()
        if finite or skipped:
            self.nonfinite_streak = 0
            return skipped
        self.nonfinite_streak += 1
        self.warn(f"non-finite loss ({loss_sum}) or gradient norm ({norm}): DeepSpeed applied the update "
                  f"before it could be dropped ({self.nonfinite_streak} in a row)")
        return 1

    @property
    def engine_steps(self) -> bool:
        """True under DeepSpeed, whose engine steps the optimizer inside ``backward``."""
        return self.accelerator.state.deepspeed_plugin is not None

    def _scaled_step(self) -> int:
        """fp16: the scaler steps, or skips an overflowing step and lowers its scale."""
        skipped = 0
        for p in self.trainables:
            p.optimizer.step()
            skipped = max(skipped, int(bool(p.optimizer.step_was_skipped)))
            if p.scheduler is not None:
                p.scheduler.step()
            p.optimizer.zero_grad(set_to_none=True)
        self.nonfinite_streak = 0
        return skipped


def _norm(value: Any) -> float:
    """A gradient norm as a float; DeepSpeed reports none before its first step."""
    return float("nan") if value is None else float(value)


__all__ = ["Learner", "MicroLoss", "Trainable", "disable_dropout"]
