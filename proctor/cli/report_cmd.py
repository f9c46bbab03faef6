"""``proctor report RUN_DIR``: summary and plots of a training run."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

console = Console()


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return f"{value:,}" if isinstance(value, int) else str(value)


def report(
    run_dir: Annotated[Path, typer.Argument(help="A `proctor train --output-dir` directory.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print the summary as JSON.")] = False,
) -> None:
    """Summarise a run's ledger (reward, zero-signal groups, tokens, memory) and write its plots."""
    from proctor.trainer.report import build_report

    try:
        rep = build_report(run_dir)
    except (FileNotFoundError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from None
    if as_json:
        print(json.dumps({**asdict(rep), "plots": [str(p) for p in rep.plots]}, indent=2))
        return
    table = Table(title=f"{run_dir}: {rep.steps} steps")
    table.add_column("")
    table.add_column("value", justify="right")
    learned_share = rep.tokens_learned / rep.tokens_generated if rep.tokens_generated else None
    for label, value in (("reward, first tenth of the steps", rep.reward_first),
                         ("reward, last tenth of the steps", rep.reward_last),
                         ("zero-signal groups (mean fraction)", rep.zero_signal_frac),
                         ("rollout tokens generated", rep.tokens_generated),
                         ("  learned (rows the update weighed)", rep.tokens_learned),
                         ("  in zero-signal groups (kept or dropped)", rep.tokens_zero_signal),
                         ("    of which dropped by dynamic sampling", rep.tokens_dropped),
                         ("  unused (update not taken)", rep.tokens_unused),
                         ("  share learned", learned_share),
                         ("evaluation tokens", rep.tokens_eval),
                         ("every generated token", rep.tokens_all),
                         ("not generated: skipped prompts (estimate)", rep.tokens_saved_by_skip),
                         ("not generated: read by the answer probe (forward only)", rep.tokens_probed),
                         ("peak memory (bytes)", rep.peak_memory_bytes),
                         ("training time (s)", rep.seconds)):
        table.add_row(label, _fmt(value))
    console.print(table)
    console.print("plots: " + ", ".join(str(p) for p in rep.plots))
