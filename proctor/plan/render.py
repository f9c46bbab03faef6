"""A plan as JSON, or as Rich tables with the difference and the assumptions under them."""

from __future__ import annotations

from typing import Any

from .memory import AlgorithmPlan, Plan
from .model_shape import human_count

_UNITS = ((1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "kB"))


def human_bytes(n: float, signed: bool = False) -> str:
    """Decimal units (GB = 10^9), as GPU spec sheets and the write-up use them."""
    sign = ("+" if n > 0 else "-" if n < 0 else "") if signed else ("-" if n < 0 else "")
    n = abs(n)
    for size, unit in _UNITS:
        if n >= size:
            return f"{sign}{n / size:,.2f} {unit}"
    return f"{sign}{n:,.0f} B"


def algorithm_dict(ap: AlgorithmPlan) -> dict[str, Any]:
    return {
        "total_bytes": ap.total_bytes,
        "per_gpu_bytes": ap.per_gpu_bytes,
        "cpu_bytes": ap.cpu_bytes,
        "rollout_tokens_per_step": ap.rollout_tokens_per_step,
        "sequences_per_step": ap.sequences_per_step,
        "trainable_params": ap.trainable_params,
        "training_state_bytes": ap.training_state_bytes,
        "training_state_bytes_per_trainable_param": ap.state_cost.total,
        "components": [c.to_dict() for c in ap.components],
    }


def plan_dict(p: Plan) -> dict[str, Any]:
    """Everything the tables show; one key per planned algorithm, each with its ``total_bytes``."""
    inp = {k: v for k, v in vars(p.input).items() if k != "shape"}
    out: dict[str, Any] = {"model": p.shape.to_dict(), "input": inp, "algorithms": list(p.algorithms)}
    for name, ap in p.algorithms.items():
        out[name] = algorithm_dict(ap)
    if p.difference_bytes is not None:
        out["difference_bytes"] = p.difference_bytes               # PPO minus GRPO, all GPUs
        out["difference_per_gpu_bytes"] = p.difference_per_gpu_bytes
        out["difference_rollout_tokens_per_step"] = (p.algorithms["grpo"].rollout_tokens_per_step
                                                     - p.algorithms["ppo"].rollout_tokens_per_step)
    out["assumptions"] = list(p.assumptions)
    return out


def _table(p: Plan, ap: AlgorithmPlan) -> Any:
    from rich.table import Table

    gpus = p.input.gpus
    table = Table(title=f"{ap.algorithm.upper()}: {human_count(p.shape.params)}-parameter actor on {gpus} GPU(s)",
                  title_justify="left", show_footer=True)
    offload = p.input.offload
    # Names and numbers never wrap (an 80-column terminal folds the note instead).
    table.add_column("component", footer="total", no_wrap=True)
    table.add_column("per GPU", justify="right", footer=human_bytes(ap.per_gpu_bytes), no_wrap=True)
    table.add_column("total\n(all GPUs)", justify="right", footer=human_bytes(ap.total_bytes), no_wrap=True)
    if offload:
        table.add_column("CPU\nRAM", justify="right", footer=human_bytes(ap.cpu_bytes), no_wrap=True)
    table.add_column("note", overflow="fold", min_width=12)
    for c in ap.components:
        cells = [c.name, human_bytes(c.bytes_per_gpu), human_bytes(c.bytes_total)]
        if offload:
            cells.append(human_bytes(c.cpu_bytes))
        cells.append(c.note)
        table.add_row(*cells, style="dim" if not (c.bytes_total or c.cpu_bytes) else None)
    return table


def render(p: Plan, console: Any) -> None:
    """Print the tables, rollout tokens, the GRPO/PPO difference and the assumptions to a Rich console."""
    from rich.markup import escape

    for ap in p.algorithms.values():
        console.print(_table(p, ap))
        console.print(f"rollout tokens per step: {ap.rollout_tokens_per_step:,} "
                      f"({ap.sequences_per_step:,} sequences x {p.input.completion_len:,} completion tokens)")
        console.print(f"training state (actor{' + critic' if ap.algorithm == 'ppo' else ''}): "
                      f"{human_bytes(ap.training_state_bytes)} = {ap.state_cost.total} bytes x "
                      f"{ap.trainable_params:,} trainable params"
                      + (" + frozen LoRA bases" if p.input.lora_rank else ""))
        console.print()
    if p.difference_bytes is not None:
        grpo, ppo = p.algorithms["grpo"], p.algorithms["ppo"]
        extra_tokens = grpo.rollout_tokens_per_step - ppo.rollout_tokens_per_step
        ratio = grpo.rollout_tokens_per_step / ppo.rollout_tokens_per_step
        console.print(f"[bold]PPO - GRPO:[/bold] {human_bytes(p.difference_bytes, signed=True)} in total, "
                      f"{human_bytes(p.difference_per_gpu_bytes or 0, signed=True)} per GPU; GRPO generates "
                      f"{abs(extra_tokens):,} {'more' if extra_tokens >= 0 else 'fewer'} rollout tokens per step "
                      f"({ratio:.3g}x PPO's)")
        console.print()
    console.print("[bold]Assumptions[/bold]")
    for line in p.assumptions:
        console.print(f"- {escape(line)}")
