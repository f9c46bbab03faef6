"""Selections over metrics.jsonl rows and the smoothing the plots use: plain functions
that the writer and reader (``metrics.py``) and the ledger's views (``ledger_view.py``) share."""

from __future__ import annotations

import math
from typing import Any, Iterable


def train_rows(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows of training steps (an evaluation before step 1 has a row of eval_* values only)."""
    return [r for r in rows if "reward_mean" in r]


def eval_rows(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows that carry an evaluation (``eval_*`` keys; see ``proctor.trainer.evaluation``)."""
    return [r for r in rows if "eval_prompts" in r]


def moving_average(values: list[float], window: int) -> list[float]:
    out = []
    for i in range(len(values)):
        chunk = [v for v in values[max(0, i - window + 1):i + 1] if not math.isnan(v)]
        out.append(sum(chunk) / len(chunk) if chunk else float("nan"))
    return out


def skipped_estimate(row: dict[str, Any]) -> int:
    """The run's estimate of tokens not generated for skipped prompts, as of ``row``
    (``tokens_saved_by_skip`` in runs logged before the key was named for what it is)."""
    return int(row.get("tokens_skipped_estimate_cumulative", row.get("tokens_saved_by_skip")) or 0)


__all__ = ["eval_rows", "moving_average", "skipped_estimate", "train_rows"]
