"""``proctor train``: GRPO against a suite of environments."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.markup import escape

console = Console()


def read_config(path: Path) -> dict:
    """A run config file (YAML or JSON) as a mapping; errors name the file."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc.strerror}") from None
    if path.suffix in (".yaml", ".yml"):
        import yaml

        data = yaml.safe_load(text)
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise typer.BadParameter(f"{path}: not valid JSON at line {exc.lineno}: {exc.msg}") from None
    if not isinstance(data, dict):
        raise typer.BadParameter(f"{path}: the config must be a mapping of GRPOConfig fields")
    return data


def train(
    config: Annotated[Optional[Path], typer.Option("--config", "-c", help="YAML or JSON with GRPOConfig fields.")] = None,
    model: Annotated[Optional[str], typer.Option(help="Model path, or 'tiny' / 'tiny:STEPS' for the offline tiny model.")] = None,
    max_steps: Annotated[Optional[int], typer.Option(help="Optimizer steps.")] = None,
    output_dir: Annotated[Optional[str], typer.Option(help="Where metrics.jsonl, samples.jsonl and the plots go.")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Seed for prompts, sampling and initialisation.")] = None,
) -> None:
    """Train a model with GRPO; writes metrics.jsonl, samples.jsonl and reward/signal/tokens/memory plots."""
    from proctor.trainer.build import build_trainer
    from proctor.trainer.config import GRPOConfig

    data = read_config(config) if config is not None else {}
    for key, value in (("model", model), ("max_steps", max_steps), ("output_dir", output_dir), ("seed", seed)):
        if value is not None:
            data[key] = value
    try:
        cfg = GRPOConfig.from_dict(data, where=str(config or "options"))
    except (TypeError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from None
    trainer = build_trainer(cfg)
    try:
        trainer.train()
    finally:
        trainer.suite.close()
    console.print(f"run written to [bold]{escape(cfg.output_dir)}[/bold]: metrics.jsonl, samples.jsonl, "
                  + ", ".join(p.name for p in trainer.plots))
