"""Async generation: the next batches generate (and score) while the learner updates on
this one, never more than ``max_staleness`` optimizer steps behind.

One background thread owns the engine and runs, in order, what the trainer queues:
generate batch j, load the weights after step k, generate batch j+1, ... The weights are
snapshotted on the trainer's thread when a sync is queued, so the update that follows
cannot tear them. With S = max_staleness the queue keeps S + 1 batches ahead of the
learner, which bounds the lag exactly:

    batch b is generated from the weights after step b - S - 1 (or the initial ones),
    and learned at step b, whose weights are those after step b - 1: lag ≤ S.

Every rollout carries its weight version; ``take`` measures the lag of each and refuses
a batch past the bound (a bug, never a silent off-policy batch). The learner corrects
the lag with the importance weights π_learner / π_sampler (``is_correction``).
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Optional

from ..metrics import Stopwatch
from ..records import Scored
from .base import WeightTransfer

Produce = Callable[[list[Any], Stopwatch], Scored]   # prompts → their scored rollouts


class RolloutPipeline:
    """Built from what it runs: ``produce`` (prompts → Scored), ``draw`` (a step's prompts)
    and the engine (``WeightTransfer``) whose weights it snapshots and applies in order."""

    def __init__(self, produce: Produce, draw: Callable[[], list[Any]], generator: WeightTransfer, max_staleness: int,
                 policy_step: int = 0, pending: Optional[list[list[Any]]] = None) -> None:
        self.produce = produce
        self.draw = draw
        self.generator = generator
        self.max_staleness = max_staleness
        self.thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="proctor-rollout")
        self.queue: deque[tuple[list[Any], Future]] = deque()
        # weight version → the number of optimizer steps in those weights
        self.version_step = {generator.weight_version: policy_step}
        self.next_version = generator.weight_version
        for items in pending or []:   # batches in flight at the checkpoint: their prompts, regenerated
            self._submit(items)

    def _submit(self, items: list[Any]) -> None:
        def produce() -> tuple[Scored, Stopwatch]:
            watch = Stopwatch()
            return self.produce(items, watch), watch

        self.queue.append((items, self.thread.submit(produce)))

    def fill(self) -> None:
        while len(self.queue) < self.max_staleness + 1:
            self._submit(self.draw())

    def take(self, policy_step: int, watch: Stopwatch) -> tuple[Scored, list[int]]:
        """The oldest batch, with each rollout's lag (optimizer steps) behind ``policy_step``."""
        self.fill()
        _, future = self.queue.popleft()
        with watch.section("rollout_wait"):   # generation the update did not hide
            scored, inner = future.result()
        for key, seconds in inner.totals.items():
            watch.totals[key] = watch.totals.get(key, 0.0) + seconds
        lags = [policy_step - self.version_step[r.weight_version] for r in scored.rollouts]
        if lags and max(lags) > self.max_staleness:
            raise RuntimeError(f"a rollout batch is {max(lags)} optimizer steps stale, over max_staleness="
                               f"{self.max_staleness}: the pipeline broke its bound (please report this)")
        return scored, lags

    def run(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` on the engine's thread, after everything queued (e.g. extra rollouts)."""
        return self.thread.submit(fn).result()

    def sync(self, policy_step: int) -> bool:
        """Queue the weights after ``policy_step`` updates (the trainer decides when:
        ``weight_sync.sync_due``); batches queued after this sample from them."""
        snapshot = self.generator.snapshot()
        self.next_version += 1
        version = self.next_version
        self.version_step[version] = policy_step
        self.thread.submit(self.generator.apply, snapshot, version)
        return True

    def pending_items(self) -> list[list[Any]]:
        return [items for items, _ in self.queue]

    def close(self) -> None:
        for _, future in self.queue:
            future.cancel()
        self.thread.shutdown(wait=True)


__all__ = ["RolloutPipeline"]
