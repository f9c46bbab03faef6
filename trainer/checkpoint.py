"""Checkpoints that resume exactly: weights, optimizer, scheduler, every RNG, the data
position and the pass-rate memory. On CPU the step after a resume equals the step that
would have run without the interruption (a test holds it to that)."""

from __future__ import annotations

import json
import pickle
import re
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from .passrate import PromptRecord

if TYPE_CHECKING:
    from .grpo import GRPOTrainer

STATE_FILE = "proctor_state.pkl"
_STEP_DIR = re.compile(r"^step-(\d+)$")


def checkpoint_dir(output_dir: str | Path, step: int) -> Path:
    return Path(output_dir) / "checkpoints" / f"step-{step}"


def latest_checkpoint(output_dir: str | Path) -> Optional[Path]:
    root = Path(output_dir) / "checkpoints"
    if not root.is_dir():
        return None
    steps = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)) and
             (p / STATE_FILE).exists()]
    return max(steps)[1] if steps else None


def save(trainer: "GRPOTrainer", step: int) -> Path:
    """Everything needed to continue after ``step``; written last-file-last so a crash
    mid-save leaves no checkpoint that looks complete."""
    path = checkpoint_dir(trainer.cfg.output_dir, step)
    trainer.accelerator.save_state(str(path))   # model (safetensors), optimizer, scheduler, torch/numpy/python RNGs
    if trainer.accelerator.is_main_process:
        state = {
            "step": step,
            "rng": trainer.rng.getstate(),
            "np_rng": trainer.np_rng.bit_generator.state,
            "memory": {k: asdict(v) for k, v in trainer.memory.records.items()},
            "memory_counters": (trainer.memory.skipped, trainer.memory.tokens_saved),
            "totals": dict(trainer.totals),
            "weight_version": trainer.generator.weight_version,
            # Async: prompts drawn for batches still being generated; regenerated after a resume.
            "pending_batches": trainer.pipeline.pending_items() if trainer.pipeline else [],
            "config": trainer.cfg.to_dict(),
        }
        with open(path / STATE_FILE, "wb") as f:
            pickle.dump(state, f)
    trainer.accelerator.wait_for_everyone()
    return path


def load(trainer: "GRPOTrainer", path: str | Path) -> int:
    """Restore a checkpoint into a freshly built trainer; returns the step it was taken after."""
    path = Path(path)
    if not (path / STATE_FILE).exists():
        raise FileNotFoundError(f"{path} is not a complete proctor checkpoint (no {STATE_FILE}); "
                                "pick another under checkpoints/ or start afresh")
    with open(path / STATE_FILE, "rb") as f:
        state = pickle.load(f)   # our own file, written by save() above
    trainer.accelerator.load_state(str(path))
    trainer.rng.setstate(state["rng"])
    trainer.np_rng.bit_generator.state = state["np_rng"]
    trainer.memory.records = {k: PromptRecord(**v) for k, v in state["memory"].items()}
    trainer.memory.skipped, trainer.memory.tokens_saved = state["memory_counters"]
    trainer.totals.update(state["totals"])
    # The engine holds the initial weights: give it the restored ones (never resume stale).
    trainer.generator.restore(state["weight_version"])
    trainer.pending_batches = state.get("pending_batches", [])
    return int(state["step"])


def read_metrics(metrics_path: Path) -> list[dict]:
    if not metrics_path.exists():
        return []
    return [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
