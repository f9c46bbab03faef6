"""One metrics row per step (and its reduction over data-parallel processes)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Optional

from proctor.envs import EnvSuite

from .metrics import Stopwatch, peak_memory_bytes

if TYPE_CHECKING:
    from .grpo import GRPOTrainer, Scored


def step_metrics(trainer: "GRPOTrainer", step: int, scored: "Scored", adv: Any, learn: dict[str, float],
                 watch: Stopwatch, rounds: int, step_s: float, lags: Optional[list[int]] = None) -> dict[str, Any]:
    """The step's row: rewards, zero-signal, the token ledger, the sampler mismatch, time, memory."""
    g = trainer.cfg.group_size
    judged = [v for v in scored.verdicts if v.scored]
    lens = [sum(r.learned()) for r in scored.rollouts]   # sampled tokens (not env-inserted ones)
    zero = adv.zero_signal.tolist()
    zero_tokens = sum(n for n, z in zip(lens, zero) if z)
    generated = sum(lens)
    trainer.totals["tokens_generated"] += generated
    trainer.totals["tokens_learned"] += generated - zero_tokens
    trainer.totals["tokens_zero_signal"] += zero_tokens
    kind, peak = peak_memory_bytes()
    rewards = [v.reward for v in judged]
    mean = sum(rewards) / len(rewards) if rewards else math.nan
    row: dict[str, Any] = {
        "step": step,
        "reward_mean": mean,
        "reward_std": (sum((r - mean) ** 2 for r in rewards) / max(1, len(rewards) - 1)) ** 0.5 if rewards else math.nan,
        "pass_rate": sum(v.correct for v in judged) / len(judged) if judged else math.nan,
        "infra_dropped": len(scored.verdicts) - len(judged),
        "zero_signal_frac": adv.frac_zero_signal,
        "zero_signal_tokens": zero_tokens,
        "zero_signal_token_frac": zero_tokens / generated if generated else 0.0,
        "dynamic_sampling_rounds": rounds,
        "completion_len_mean": generated / len(lens),
        "completion_len_max": max(lens),
        "completion_truncated_frac": sum(r.truncated for r in scored.rollouts) / len(lens),
        "tokens_generated": generated,
        "tokens_learned": generated - zero_tokens,
        "tokens_saved_by_skip": trainer.memory.tokens_saved,
        "tokens_cumulative": trainer.totals["tokens_generated"],
        "tokens_learned_cumulative": trainer.totals["tokens_learned"],
        "tokens_zero_signal_cumulative": trainer.totals["tokens_zero_signal"],
        "tokens_per_s": generated / watch.totals["generate"] if watch.totals.get("generate") else math.nan,
        "kl": learn.get("kl_mean", math.nan),
        "clip_low": learn.get("clip_low_frac", math.nan),
        "clip_high": learn.get("clip_high_frac", math.nan),
        "entropy": learn.get("entropy_mean", math.nan),
        "loss": learn["loss"],
        "grad_norm": learn["grad_norm"],
        "skipped_nonfinite": learn["skipped_nonfinite"],
        **{k: learn[k] for k in ("sampler_logp_diff_mean", "sampler_logp_diff_max", "sampler_ratio_min",
                                 "sampler_ratio_mean", "sampler_ratio_max", "is_weight_mean") if k in learn},
        "learned_rows": learn["learned_rows"],
        "lr": trainer.scheduler.get_last_lr()[0],
        "time_step_s": step_s,
        **{f"time_{k}_s": v for k, v in watch.totals.items()},
        "memory_kind": kind,
        "peak_memory_bytes": peak,
        "memory_peak_gb": peak / 2**30,
        # async: the version the engine holds once the queued syncs land (the applied one races the thread)
        "weight_version": trainer.pipeline.next_version if lags else trainer.generator.weight_version,
        "rollout_version_min": min(r.weight_version for r in scored.rollouts),
        "rollout_version_max": max(r.weight_version for r in scored.rollouts),
        "turns_max": getattr(trainer, "_turns", 1),
    }
    if lags:
        row.update(staleness_mean=sum(lags) / len(lags), staleness_max=max(lags))
    if getattr(trainer.generator, "last_sync", None):
        row["sync_mib"] = trainer.generator.last_sync["bytes"] / 2**20
    for env, rep in EnvSuite.report(scored.items, scored.verdicts).items():
        row[f"env_{env}_reward"] = rep["reward_mean"]
        row[f"env_{env}_pass_rate"] = rep["pass_rate"]
    trainer.log.samples({"step": step, "env": item.env, "task_id": item.task.id, "completion": r.text,
                      "reward": v.reward if v.scored else None, "status": v.status, "correct": v.correct,
                      "info": {k: str(x)[:300] for k, x in v.info.items()}}
                     for item, r, v in list(zip(scored.items, scored.rollouts, scored.verdicts))[::g][
                         :trainer.cfg.sample_completions])
    return row


def gather_row(accelerator: Any, row: dict[str, Any]) -> dict[str, Any]:
    """One row for the run: token and count metrics summed over processes, the rest averaged."""
    if accelerator.num_processes == 1:
        return row
    rows = accelerator.gather_for_metrics([row], use_gather_object=True)
    out: dict[str, Any] = {"step": row["step"], "processes": len(rows)}
    for key in row:
        values = [r.get(key) for r in rows if isinstance(r.get(key), (int, float))]
        if key == "step" or not values:
            out.setdefault(key, row[key])
        elif key.startswith(("tokens_", "zero_signal_tokens", "infra_")):
            out[key] = sum(values)
        elif key.startswith(("peak_memory", "memory_peak", "time_", "completion_len_max")):
            out[key] = max(values)
        else:
            finite = [v for v in values if not (isinstance(v, float) and math.isnan(v))]
            out[key] = sum(finite) / len(finite) if finite else math.nan
    return out


__all__ = ["gather_row", "step_metrics"]
