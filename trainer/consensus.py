"""Decisions that change control flow, taken once for every process.

Data-parallel processes meet in collectives: the gradient all-reduce of every backward (DDP),
the parameter all-gather of every forward of a sharded model (FSDP2, ZeRO-3). A process that
decides alone to skip an update, to run one more resampling round or to evaluate, while
another does not, leaves the other waiting in a collective forever. So each such decision is
made from the values of every process, and all of them reach the same answer:

    agree = Consensus.of(accelerator)
    agree.sum([failed, judged])     # -> the counts over all processes (every process gets them)
    agree.max(missing)              # -> the largest value any process has
    agree.any(flag)                 # -> True on every process if it is True on one

With one process each is the identity and no collective runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch


@dataclass(frozen=True)
class Consensus:
    """All-reduces small integer vectors over the default process group (``processes`` of them)."""

    processes: int = 1
    device: Any = "cpu"

    @classmethod
    def of(cls, accelerator: Any) -> "Consensus":
        return cls(accelerator.num_processes, accelerator.device)

    def _reduce(self, values: Sequence[int], op: str) -> list[int]:
        if self.processes == 1:
            return [int(v) for v in values]
        import torch.distributed as dist

        tensor = torch.tensor([int(v) for v in values], dtype=torch.int64, device=self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
        return [int(v) for v in tensor.tolist()]

    def sum(self, values: Sequence[int]) -> list[int]:
        """Each value summed over the processes."""
        return self._reduce(values, "sum")

    def max(self, value: int) -> int:
        """The largest ``value`` of any process."""
        return self._reduce([value], "max")[0]

    def any(self, flag: bool) -> bool:
        """True everywhere when ``flag`` is True on some process."""
        return self.max(int(flag)) > 0


__all__ = ["Consensus"]
