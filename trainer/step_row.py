"""One metrics row per step, a pure function of the step's values (and its reduction over
data-parallel processes)."""

from __future__ import annotations

import math
from typing import Any, Iterator

from proctor.envs import EnvSuite

from .records import Scored, StepValues

LEARN_KEYS = ("sampler_logp_diff_mean", "sampler_logp_diff_max", "sampler_ratio_min", "sampler_ratio_mean",
              "sampler_ratio_max", "is_weight_mean")


def token_counts(scored: Scored, zero_signal: list[bool]) -> tuple[int, int]:
    """(sampled tokens, sampled tokens in zero-signal groups); env-inserted tokens are not counted."""
    lens = [sum(r.learned()) for r in scored.rollouts]
    return sum(lens), sum(n for n, z in zip(lens, zero_signal) if z)


def step_row(v: StepValues) -> dict[str, Any]:
    """The step's row: rewards, zero-signal, the token ledger, the sampler mismatch, time, memory."""
    drawn = v.scored if v.dropped is None else v.scored + v.dropped   # every group scored this step
    row: dict[str, Any] = {"step": v.step, **_reward_values(drawn), **_token_values(v)}
    if v.dropped is not None:   # dynamic sampling: what the update saw, after filtering, under its own names
        row.update({f"{k}_filtered": x for k, x in _reward_values(v.scored).items() if k != "infra_dropped"})
    row.update({
        "kl": v.learn.get("kl_mean", math.nan),
        "clip_low": v.learn.get("clip_low_frac", math.nan),
        "clip_high": v.learn.get("clip_high_frac", math.nan),
        "entropy": v.learn.get("entropy_mean", math.nan),
        "loss": v.learn["loss"],
        "grad_norm": v.learn["grad_norm"],
        "skipped_nonfinite": v.learn["skipped_nonfinite"],
        "skipped_infra": v.learn.get("skipped_infra", 0),
        **{k: v.learn[k] for k in LEARN_KEYS if k in v.learn},
        "learned_rows": v.learn["learned_rows"],
        "lr": v.learn["lr"] if not math.isnan(v.learn.get("lr", math.nan)) else v.lr,
        "time_step_s": v.step_s,
        **{f"time_{k}_s": s for k, s in v.times.items()},
        "memory_kind": v.memory_kind,
        "peak_memory_bytes": v.peak_memory_bytes,
        "memory_peak_gb": v.peak_memory_bytes / 2**30,
        "weight_version": v.weight_version,
        "rollout_version_min": min(r.weight_version for r in v.scored.rollouts),
        "rollout_version_max": max(r.weight_version for r in v.scored.rollouts),
        "turns_max": v.scored.turns,
        "prompts_truncated": v.scored.prompts_truncated,   # data.max_prompt_length: never silent
        "prompts_dropped": v.scored.prompts_dropped,
    })
    if v.lags:
        row.update(staleness_mean=sum(v.lags) / len(v.lags), staleness_max=max(v.lags))
    if v.sync_bytes is not None:
        row["sync_mib"] = v.sync_bytes / 2**20
    for env, rep in EnvSuite.report(v.scored.items, v.scored.verdicts).items():
        row[f"env_{env}_reward"] = rep["reward_mean"]
        row[f"env_{env}_pass_rate"] = rep["pass_rate"]
    row.update(v.extra)
    return row


def _reward_values(scored: Scored) -> dict[str, Any]:
    judged = [v for v in scored.verdicts if v.scored]
    rewards = [v.reward for v in judged]
    mean = sum(rewards) / len(rewards) if rewards else math.nan
    return {
        "reward_mean": mean,
        "reward_std": (sum((r - mean) ** 2 for r in rewards) / max(1, len(rewards) - 1)) ** 0.5 if rewards else math.nan,
        "pass_rate": sum(v.correct for v in judged) / len(judged) if judged else math.nan,
        "infra_dropped": len(scored.verdicts) - len(judged),
    }


def _token_values(v: StepValues) -> dict[str, Any]:
    generated, zero_tokens = token_counts(v.scored, v.zero_signal)
    lens = [sum(r.learned()) for r in v.scored.rollouts]
    if v.dropped is not None:   # the dropped groups' tokens were generated too, and taught nothing
        extra = token_counts(v.dropped, [True] * len(v.dropped.rollouts))[0]
        generated, zero_tokens = generated + extra, zero_tokens + extra
    return {
        "zero_signal_frac": v.zero_signal_frac,
        "zero_signal_tokens": zero_tokens,
        "zero_signal_token_frac": zero_tokens / generated if generated else 0.0,
        "dynamic_sampling_rounds": v.rounds,
        "completion_len_mean": sum(lens) / len(lens),
        "completion_len_max": max(lens),
        "completion_truncated_frac": sum(r.truncated for r in v.scored.rollouts) / len(lens),
        "tokens_generated": generated,
        "tokens_learned": generated - zero_tokens,
        "tokens_saved_by_skip": v.tokens_saved_by_skip,
        "tokens_cumulative": v.totals.tokens_generated,
        "tokens_learned_cumulative": v.totals.tokens_learned,
        "tokens_zero_signal_cumulative": v.totals.tokens_zero_signal,
        "tokens_per_s": generated / v.times["generate"] if v.times.get("generate") else math.nan,
    }


def sample_rows(step: int, scored: Scored, group_size: int, limit: int) -> Iterator[dict[str, Any]]:
    """The first completion of the first ``limit`` groups, with its verdict (samples.jsonl)."""
    firsts = list(zip(scored.items, scored.rollouts, scored.verdicts))[::group_size][:limit]
    for item, r, v in firsts:
        yield {"step": step, "env": item.env, "task_id": item.task.id, "completion": r.text,
               "reward": v.reward if v.scored else None, "status": v.status, "correct": v.correct,
               "info": {k: str(x)[:300] for k, x in v.info.items()}}


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
            finite = [x for x in values if not (isinstance(x, float) and math.isnan(x))]
            out[key] = sum(finite) / len(finite) if finite else math.nan
    return out


__all__ = ["gather_row", "sample_rows", "step_row", "token_counts"]
