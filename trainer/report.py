"""`proctor report RUN_DIR`: a finished (or running) run's ledger as a summary and plots."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from .ledger_view import last_ledger
from .metric_rows import skipped_estimate
from .metrics import METRICS_FILE, mean_of, plot_run, read_metrics, train_rows


@dataclass(frozen=True)
class RunReport:
    steps: int
    reward_first: Optional[float]      # mean over the first tenth of the steps
    reward_last: Optional[float]       # mean over the last tenth
    zero_signal_frac: Optional[float]  # mean over the run
    tokens_generated: int              # rollout tokens, every dynamic-sampling round
    tokens_learned: int                # in rows the update weighed (non-zero advantage)
    tokens_zero_signal: int            # in groups that taught nothing, kept or dropped
    tokens_saved_by_skip: int          # an estimate: not generated
    tokens_probed: int                 # read forward-only by the answer probe: not generated
    tokens_dropped: Optional[int]      # the ledger's other fates (None: a run written before it)
    tokens_unused: Optional[int]
    tokens_eval: Optional[int]
    tokens_all: Optional[int]          # every generated token: rollouts + evaluation
    peak_memory_bytes: Optional[int]
    seconds: float
    plots: tuple[Path, ...]


def load_rows(run_dir: Path) -> list[dict[str, Any]]:
    if not (run_dir / METRICS_FILE).exists():
        raise FileNotFoundError(f"{run_dir / METRICS_FILE} not found: RUN_DIR must be a `proctor train --output-dir` "
                                "directory")
    rows = train_rows(read_metrics(run_dir))   # an evaluation before step 1 is not a step
    if not rows:
        raise ValueError(f"{run_dir / METRICS_FILE} has no steps yet")
    return rows


def build_report(run_dir: str | Path, plots: bool = True) -> RunReport:
    run_dir = Path(run_dir)
    rows = load_rows(run_dir)
    n = max(1, len(rows) // 10)
    total = lambda key: int(sum(r.get(key) or 0 for r in rows))  # noqa: E731
    peaks = [r.get("peak_memory_bytes") for r in rows if r.get("peak_memory_bytes")]
    ledger = last_ledger(read_metrics(run_dir)) or {}   # the last evaluation's tokens count too
    return RunReport(
        steps=len(rows),
        reward_first=mean_of([r.get("reward_mean") for r in rows[:n]]),
        reward_last=mean_of([r.get("reward_mean") for r in rows[-n:]]),
        zero_signal_frac=mean_of([r.get("zero_signal_frac") for r in rows]),
        tokens_generated=total("tokens_generated"),
        tokens_learned=total("tokens_learned"),
        tokens_zero_signal=total("zero_signal_tokens"),
        tokens_saved_by_skip=skipped_estimate(rows[-1]),
        tokens_probed=int(max((r.get("tokens_probed_cumulative") or 0 for r in rows), default=0)),
        tokens_dropped=ledger.get("tokens_dropped_cumulative"),
        tokens_unused=ledger.get("tokens_unused_cumulative"),
        tokens_eval=ledger.get("tokens_eval_cumulative"),
        tokens_all=ledger.get("tokens_all_cumulative"),
        peak_memory_bytes=max(peaks) if peaks else None,
        seconds=float(sum(r.get("time_step_s") or 0.0 for r in rows)),
        plots=tuple(plot_run(run_dir)) if plots else (),
    )
