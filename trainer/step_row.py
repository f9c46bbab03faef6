"""One metrics row per step, a pure function of the step's values (and its reduction over
data-parallel processes)."""

from __future__ import annotations

import math
from typing import Any, Callable, Iterator, Optional, Sequence

from proctor.envs import EnvSuite

from .metric_schema import Metric, metric_of, reduce_values
from .records import Ledger, Scored, StepValues
from .rollout.tool_turns import tool_episodes, tool_metrics

LEARN_KEYS = ("sampler_logp_diff_mean", "sampler_logp_diff_max", "sampler_ratio_min", "sampler_ratio_mean",
              "sampler_ratio_max", "is_weight_mean", "is_truncated_frac", "is_masked_frac")


def sampled_tokens(scored: Scored) -> list[int]:
    """Per rollout, the tokens the model sampled (env-inserted tokens are not counted)."""
    return [sum(r.learned()) for r in scored.rollouts]


def step_ledger(scored: Scored, weights: Sequence[float], dropped: Optional[Scored], update_taken: bool,
                skipped_estimate: int = 0) -> Ledger:
    """One step's tokens by fate: ``weights`` is each row's weight in the update (its advantage;
    0: it teaches nothing), ``dropped`` the groups dynamic sampling replaced."""
    lens = sampled_tokens(scored)
    if len(weights) != len(lens):
        raise ValueError(f"step_ledger: {len(weights)} row weights for {len(lens)} rollouts")
    weighed = sum(n for n, w in zip(lens, weights) if float(w) != 0.0)
    return Ledger(learned=weighed if update_taken else 0, zero_signal=sum(lens) - weighed,
                  dropped=sum(sampled_tokens(dropped)) if dropped is not None else 0,
                  unused=0 if update_taken else weighed, skipped_estimate=skipped_estimate)


def ledger_values(ledger: Ledger, totals: Ledger) -> dict[str, Any]:
    """The ledger's columns: this step's fates, and the run's so far (``*_cumulative``)."""
    return {
        "tokens_generated": ledger.rollouts,   # rollout tokens this step, every dynamic-sampling round
        "tokens_learned": ledger.learned,
        "tokens_zero_signal_kept": ledger.zero_signal,
        "tokens_dropped": ledger.dropped,
        "tokens_unused": ledger.unused,
        "zero_signal_tokens": ledger.taught_nothing,
        "zero_signal_token_frac": ledger.taught_nothing / ledger.rollouts if ledger.rollouts else 0.0,
        "tokens_skipped_estimate": ledger.skipped_estimate,
        "tokens_skipped_estimate_cumulative": totals.skipped_estimate,   # an estimate, run so far
        "tokens_cumulative": totals.rollouts,
        "tokens_learned_cumulative": totals.learned,
        "tokens_zero_signal_cumulative": totals.taught_nothing,
        "tokens_zero_signal_kept_cumulative": totals.zero_signal,
        "tokens_dropped_cumulative": totals.dropped,
        "tokens_unused_cumulative": totals.unused,
        "tokens_eval_cumulative": totals.eval,
        "tokens_all_cumulative": totals.generated,
    }


def with_eval_tokens(values: dict[str, Any], totals: Ledger,
                     total: Callable[[Sequence[int]], list[int]] = list) -> tuple[dict[str, Any], Ledger]:
    """An evaluation's values with its tokens in the ledger, and this process's ledger after it.

    This process's own eval tokens (``tokens_eval_process``) go into its ledger, like its
    rollouts; the values report the run's: ``tokens_eval`` of every process, and the
    cumulative counts summed by ``total`` over the processes (``Consensus.sum``)."""
    values = dict(values)
    own = int(values.pop("tokens_eval_process", values.get("tokens_eval")) or 0)
    totals = totals + Ledger(eval=own)
    eval_all, generated_all = total([totals.eval, totals.generated])
    return {**values, "tokens_eval": int(values.get("tokens_eval") or 0), "tokens_eval_cumulative": eval_all,
            "tokens_all_cumulative": generated_all}, totals


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
    row.update(tool_metrics(tool_episodes(drawn.rollouts, drawn.verdicts)))   # tool envs' episodes, if any
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
    lens = sampled_tokens(v.scored)
    return {
        "zero_signal_frac": v.zero_signal_frac,
        "dynamic_sampling_rounds": v.rounds,
        "completion_len_mean": sum(lens) / len(lens),
        "completion_len_max": max(lens),
        "completion_truncated_frac": sum(r.truncated for r in v.scored.rollouts) / len(lens),
        **ledger_values(v.ledger, v.totals),
        "tokens_per_s": v.ledger.rollouts / v.times["generate"] if v.times.get("generate") else math.nan,
    }


def sample_rows(step: int, scored: Scored, limit: int) -> Iterator[dict[str, Any]]:
    """The first completion of the first ``limit`` groups, with its verdict (samples.jsonl)."""
    rows = list(zip(scored.items, scored.rollouts, scored.verdicts))
    firsts = [rows[group.start] for group in scored.groups()][:limit]
    for item, r, v in firsts:
        yield {"step": step, "env": item.env, "task_id": item.task.id, "completion": r.text,
               "reward": v.reward if v.scored else None, "status": v.status, "correct": v.correct,
               "info": {k: str(x)[:300] for k, x in v.info.items()}}


def gather_row(accelerator: Any, row: dict[str, Any], warn: Callable[[str], None] = print) -> dict[str, Any]:
    """One row for the run from every process's: each metric combined as ``metric_schema``
    declares it (counts and tokens summed, times and peaks the largest, rates averaged)."""
    if accelerator.num_processes == 1:
        return row
    rows = accelerator.gather_for_metrics([row], use_gather_object=True)
    out: dict[str, Any] = {"step": row["step"], "processes": len(rows)}
    for key in row:
        values = [r[key] for r in rows if key in r]
        metric = metric_of(key)
        if metric is None:
            if key not in _WARNED:
                _WARNED.add(key)
                warn(f"metric {key!r} is declared nowhere (trainer/metric_schema.py): averaged over processes")
            metric = Metric(key, "mean", "", "undeclared")
        out[key] = reduce_values(metric, values)
    return out


_WARNED: set[str] = set()


__all__ = ["gather_row", "ledger_values", "sample_rows", "sampled_tokens", "step_ledger", "step_row", "with_eval_tokens"]
