"""``proctor tiny-model OUT``: build the tiny offline model used by tests and demos."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape


class ArchChoice(str, Enum):
    qwen2 = "qwen2"
    llama = "llama"


def tiny_model(
    out: Annotated[Path, typer.Argument(help="Folder to write the model and tokenizer into (empty or new).")],
    arch: Annotated[ArchChoice, typer.Option(help="Model architecture.")] = ArchChoice.qwen2,
    pretrain_steps: Annotated[int, typer.Option(
        min=0, help="Steps of next-token pretraining on the arithmetic corpus (batch 32); ~200 makes it answer "
                    "with a number then <|im_end|>, 0 leaves random weights.")] = 0,
    seed: Annotated[int, typer.Option(help="Seed for the corpus, the weights and pretraining.")] = 0,
    untie: Annotated[bool, typer.Option(
        "--untie", help="Separate lm_head from the embedding (simplest for vLLM weight-sync tests).")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Write into OUT even if it is not empty.")] = False,
) -> None:
    """Build a tiny Qwen2/Llama model with its own tokenizer: offline, in seconds, deterministic for a seed."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from proctor.tiny_model import count_parameters, make_tiny_model

    console = Console()
    try:
        if pretrain_steps:
            with Progress(TextColumn("pretraining"), BarColumn(), MofNCompleteColumn(),
                          TextColumn("loss {task.fields[loss]}"), TimeElapsedColumn(), console=console) as bar:
                job = bar.add_task("pretrain", total=pretrain_steps, loss="-")

                def show(step: int, total: int, loss: float) -> None:
                    bar.update(job, completed=step, loss=f"{loss:.3f}")

                path = make_tiny_model(out, arch=arch.value, seed=seed, pretrain_steps=pretrain_steps,
                                       tie_embeddings=not untie, progress=show, overwrite=overwrite)
        else:
            path = make_tiny_model(out, arch=arch.value, seed=seed, tie_embeddings=not untie, overwrite=overwrite)
    except (FileExistsError, ValueError) as exc:
        console.print(f"[red]error:[/red] {escape(str(exc))}")
        raise typer.Exit(2) from None
    console.print(f"wrote {escape(str(path))} ({arch.value}, {count_parameters(path):,} parameters)")
