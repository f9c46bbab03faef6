"""The token ledger for people: the console table at the end of a run and tokens.png.

Every generated token has one fate (``records.Ledger``): learned, zero-signal, dropped by
dynamic sampling, unused, or evaluation; the rows of ``metrics.jsonl`` carry each fate per
step and cumulatively (``tokens_<fate>_cumulative``). Here they are shown against the
currency they cost: rollout tokens on the x-axis, so two runs (or two arms of
``bench/signal_efficiency.py``) compare by what they paid, not by their step count.
"""

from __future__ import annotations

from typing import Any, Optional

from rich.table import Table

from .metric_rows import eval_rows, moving_average, skipped_estimate, train_rows

# (row key of the cumulative count, what it means)
FATES = (
    ("tokens_learned_cumulative", "learned: in rows the update weighed"),
    ("tokens_zero_signal_kept_cumulative", "zero-signal: kept, weighed 0"),
    ("tokens_dropped_cumulative", "dropped by dynamic sampling"),
    ("tokens_unused_cumulative", "unused: update not taken"),
    ("tokens_eval_cumulative", "evaluation"),
)
COLORS = ("tab:green", "tab:gray", "tab:red", "tab:purple", "tab:orange")


def last_ledger(rows: list[dict[str, Any]]) -> Optional[dict[str, Any]]:
    """The run's ledger so far: the last row that carries it (None for a run written before it)."""
    found = [r for r in rows if r.get("tokens_all_cumulative") is not None]
    return found[-1] if found else None


def ledger_table(rows: list[dict[str, Any]]) -> Optional[Table]:
    """Each fate's tokens and share of everything generated, and the estimate of what skipping saved."""
    last = last_ledger(rows)
    if last is None or not last["tokens_all_cumulative"]:
        return None
    total = last["tokens_all_cumulative"]
    table = Table(title=f"token ledger: where the {total:,} generated tokens went")
    table.add_column("fate")
    table.add_column("tokens", justify="right")
    table.add_column("share", justify="right")
    for key, label in FATES:
        n = int(last.get(key) or 0)
        table.add_row(label, f"{n:,}", f"{n / total:.1%}")
    table.add_row("[bold]generated[/bold]", f"[bold]{total:,}[/bold]", "100.0%")
    skipped = skipped_estimate(last)
    if skipped:
        table.add_row("not generated: skipped prompts (estimate)", f"~{skipped:,}", "-")
    probed = max((int(r.get("tokens_probed_cumulative") or 0) for r in rows), default=0)
    if probed:   # forward-only (prompt + reference reply), like a prefill: not generated
        table.add_row("not generated: read by the answer probe (forward only)", f"{probed:,}", "-")
    return table


def rollout_tokens(steps: list[dict[str, Any]]) -> list[int]:
    """Each step's rollout tokens so far: its ``tokens_cumulative``, or (a run written before the
    ledger) the running sum of ``tokens_generated``."""
    out, running = [], 0
    for r in steps:
        running += int(r.get("tokens_generated") or 0)
        out.append(int(r["tokens_cumulative"]) if r.get("tokens_cumulative") is not None else running)
    return out


def ledger_figure(rows: list[dict[str, Any]]) -> Any:
    """Left: cumulative tokens by fate (stacked) against rollout tokens; right: the train pass rate and
    the held-out eval against rollout tokens. None when no row carries the ledger."""
    import matplotlib.pyplot as plt

    steps = [r for r in train_rows(rows) if r.get("tokens_generated") is not None]
    if not steps:
        return None
    x = rollout_tokens(steps)
    at = {r["step"]: t for r, t in zip(steps, x)}
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4))
    stacks = [(label, [r.get(key) or 0 for r in steps]) for key, label in FATES[:-1]
              if any(r.get(key) for r in steps)]
    if stacks:
        left.stackplot(x, *(values for _, values in stacks), labels=[label for label, _ in stacks],
                       colors=COLORS[:len(stacks)], alpha=0.8)
    left.set_title("where the rollout tokens went (cumulative)")
    left.set_ylabel("tokens")
    key = "pass_rate" if any(r.get("pass_rate") is not None for r in steps) else "reward_mean"
    values = [r.get(key) if r.get(key) is not None else float("nan") for r in steps]
    right.plot(x, values, alpha=0.3, color="tab:blue")
    right.plot(x, moving_average(values, max(1, len(values) // 10)), color="tab:blue", linewidth=2,
               label=f"train {key.replace('_', ' ')} (sampled), moving avg")
    points = [(at.get(r["step"], 0), r["eval_greedy_pass_rate"]) for r in eval_rows(rows)
              if isinstance(r.get("eval_greedy_pass_rate"), (int, float))]
    if points:
        right.plot(*zip(*points), color="tab:orange", linestyle="--", marker="o", linewidth=2,
                   label="held-out eval: greedy pass rate")
    right.set_ylim(-0.02, 1.02)
    right.set_title("pass rate against what it cost")
    for ax in (left, right):
        ax.set_xlabel("rollout tokens generated")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


__all__ = ["FATES", "last_ledger", "ledger_figure", "ledger_table", "rollout_tokens"]
