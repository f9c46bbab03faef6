"""Every metric of a row, declared once: its unit, and how processes' values combine.

A data-parallel step has one row per process; ``step_row.gather_row`` makes the run's row
from them with each metric's reduction:

    sum     counts and tokens (each process's own share: the run's is the sum)
    max     times (the slowest process sets the step's), peaks, upper extremes, and values
            every process holds alike (the step, the learning rate, decisions taken together)
    min     lower extremes
    mean    rates, means and estimates over each process's share
    first   text, and values computed from every process already (evaluation)

A key is matched exactly, else by the longest pattern (``fnmatch``: ``env_*_reward``). A key
declared nowhere is an error in the tests (``tests/test_metric_schema.py``) and averaged with a
warning at run time.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass
from typing import Literal, Optional

Reduce = Literal["sum", "max", "min", "mean", "first"]


@dataclass(frozen=True)
class Metric:
    key: str            # the key, or an fnmatch pattern
    reduce: Reduce
    unit: str
    help: str


def _m(key: str, reduce: Reduce, unit: str, help: str) -> Metric:
    return Metric(key, reduce, unit, help)


METRICS: tuple[Metric, ...] = (
    _m("step", "max", "step", "the optimizer step the row is after"),
    _m("processes", "max", "count", "data-parallel processes the row was gathered from"),
    _m("algorithm", "first", "text", "ppo on PPO's rows"),
    # rewards, over every group scored this step (after dynamic sampling: *_filtered)
    _m("reward_mean", "mean", "reward", "mean reward of the judged completions"),
    _m("reward_std", "mean", "reward", "their standard deviation"),
    _m("pass_rate", "mean", "fraction", "share of judged completions that are correct"),
    _m("*_filtered", "mean", "as unfiltered", "the same over the groups the update used (dynamic sampling)"),
    _m("infra_dropped", "sum", "completions", "completions not judged (infra error): excluded, never wrong"),
    _m("env_*_reward", "mean", "reward", "mean reward per env"),
    _m("env_*_pass_rate", "mean", "fraction", "pass rate per env"),
    # learning signal and the token ledger (per step; *_cumulative: the run so far)
    _m("zero_signal_frac", "mean", "fraction", "groups whose completions all got one reward"),
    _m("zero_signal_token_frac", "mean", "fraction", "rollout tokens in such groups"),
    _m("zero_signal_tokens", "sum", "tokens", "rollout tokens in zero-signal groups"),
    _m("dynamic_sampling_rounds", "max", "rounds", "resampling rounds (decided together)"),
    _m("tokens_*", "sum", "tokens", "the token ledger: each process's tokens, summed"),
    _m("tokens_per_s", "sum", "tokens/s", "generation throughput (processes generate in parallel)"),
    _m("completion_len_mean", "mean", "tokens", "sampled tokens per completion"),
    _m("completion_len_max", "max", "tokens", "the longest completion"),
    _m("completion_truncated_frac", "mean", "fraction", "completions cut at max_new_tokens"),
    _m("prompts_truncated", "sum", "prompts", "prompts cut to data.max_prompt_length"),
    _m("prompts_dropped", "sum", "prompts", "prompts over the limit, replaced"),
    _m("turns_max", "max", "turns", "the most turns an episode ran"),
    # tool envs' episodes (rollout/tool_turns.py): only when the suite has a tool env
    _m("tool_episodes", "sum", "episodes", "episodes of tool envs"),
    _m("tool_calls_per_episode", "mean", "calls", "tool calls per episode, errors included"),
    _m("tool_errors_per_episode", "mean", "calls", "calls that were answered with an error, per episode"),
    _m("tool_error_frac", "mean", "fraction", "share of tool calls answered with an error"),
    _m("tool_errors_*", "sum", "calls", "tool errors of one kind (malformed, unknown_tool, bad_arguments, limit, "
       "error, timeout)"),
    _m("tool_time_s", "sum", "s", "seconds spent in tools, every episode's summed"),
    _m("tool_time_per_call_s", "mean", "s", "seconds per tool call"),
    _m("tool_use_frac", "mean", "fraction", "episodes that made at least one tool call"),
    _m("tool_infra_errors", "sum", "episodes", "episodes ended by a tool's infrastructure failure (not judged)"),
    _m("turns_mean", "mean", "turns", "model replies per episode of a tool env"),
    _m("reward_with_tools", "mean", "reward", "mean reward of judged episodes that called a tool"),
    _m("reward_without_tools", "mean", "reward", "mean reward of judged episodes that did not"),
    _m("pass_rate_with_tools", "mean", "fraction", "pass rate of judged episodes that called a tool"),
    _m("pass_rate_without_tools", "mean", "fraction", "pass rate of judged episodes that did not"),
    # the update
    _m("loss", "mean", "loss", "the policy loss"),
    _m("grad_norm", "max", "norm", "gradient norm before clipping (the all-reduced gradient's)"),
    _m("kl", "mean", "nats", "KL to the reference per token"),
    _m("clip_low", "mean", "fraction", "tokens whose ratio was clipped below"),
    _m("clip_high", "mean", "fraction", "tokens whose ratio was clipped above"),
    _m("entropy", "mean", "nats", "policy entropy per token"),
    _m("learned_rows", "sum", "rows", "rows the update's forward and backward ran on"),
    _m("skipped_nonfinite", "max", "passes", "optimizer passes skipped on a non-finite loss or gradient"),
    _m("skipped_infra", "max", "steps", "1 when the step's update was skipped (too many infra errors)"),
    _m("lr", "max", "lr", "learning rate"),
    _m("sampler_logp_diff_mean", "mean", "nats", "|log pi_learner - log pi_sampler| per token"),
    _m("sampler_logp_diff_max", "max", "nats", "its largest"),
    _m("sampler_ratio_min", "min", "ratio", "smallest pi_learner / pi_sampler"),
    _m("sampler_ratio_mean", "mean", "ratio", "mean pi_learner / pi_sampler"),
    _m("sampler_ratio_max", "max", "ratio", "largest pi_learner / pi_sampler"),
    _m("is_*", "mean", "as named", "importance-sampling correction statistics"),
    _m("value_loss", "mean", "loss", "PPO: the critic's loss"),
    _m("value_clip_frac", "mean", "fraction", "PPO: values clipped"),
    _m("explained_variance", "mean", "fraction", "PPO: the critic's explained variance"),
    # weights and the engine
    _m("weight_version", "max", "version", "weights the engine samples from"),
    _m("rollout_version_min", "min", "version", "oldest weights a rollout of the step came from"),
    _m("rollout_version_max", "max", "version", "newest"),
    _m("staleness_mean", "mean", "steps", "async: policy steps between sampling and learning"),
    _m("staleness_max", "max", "steps", "async: the largest"),
    _m("sync_mib", "max", "MiB", "weights sent to the engine"),
    # time and memory
    _m("time_*_s", "max", "s", "seconds per section (the slowest process's)"),
    _m("memory_kind", "first", "text", "cuda (allocated) or rss (resident)"),
    _m("peak_memory_bytes", "max", "bytes", "peak memory"),
    _m("memory_peak_gb", "max", "GiB", "peak memory"),
    # prompt selection (the drawer's report)
    _m("frontier_*_level", "mean", "level", "difficulty level the frontier draws at, per env"),
    _m("frontier_*_predicted_pass", "mean", "fraction", "its predicted pass rate"),
    _m("probe_in_band_frac", "mean", "fraction", "probed candidates predicted inside the band"),
    _m("probe_topped_up", "sum", "prompts", "slots filled from outside the band"),
    _m("probe_predicted_pass", "mean", "fraction", "the chosen prompts' predicted pass rate"),
    _m("probe_predicted_signal", "mean", "fraction", "their predicted chance of a group with signal"),
    _m("probe_group_size", "mean", "completions", "their mean group size (rollout.adaptive_group_size)"),
    # evaluation (computed over every process's share already)
    _m("eval_*", "first", "as named", "held-out evaluation (evaluation.py)"),
)

_EXACT = {m.key: m for m in METRICS if not any(c in m.key for c in "*?[")}
_PATTERNS = sorted((m for m in METRICS if m.key not in _EXACT), key=lambda m: -len(m.key))


def metric_of(key: str) -> Optional[Metric]:
    """The declaration of ``key`` (exact, else the longest matching pattern); None if undeclared."""
    if key in _EXACT:
        return _EXACT[key]
    return next((m for m in _PATTERNS if fnmatch.fnmatchcase(key, m.key)), None)


def reduce_values(metric: Metric, values: list) -> object:
    """One value from every process's (non-empty ``values``), by ``metric.reduce``; NaNs are left
    out of means and extremes (nothing but NaN gives NaN)."""
    if metric.reduce == "first" or not all(isinstance(v, (int, float)) for v in values):
        return values[0]
    if metric.reduce == "sum":
        return sum(values)
    finite = [v for v in values if v == v]
    if not finite:
        return float("nan")
    if metric.reduce == "max":
        return max(finite)
    if metric.reduce == "min":
        return min(finite)
    return sum(finite) / len(finite)


__all__ = ["METRICS", "Metric", "Reduce", "metric_of", "reduce_values"]
