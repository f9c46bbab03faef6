"""Checkpoints that resume exactly: weights, optimizer, scheduler, every RNG, the data
position and the pass-rate memory. On CPU the step after a resume equals the step that
would have run without the interruption (a test holds it to that).

The trainer writes the model, optimizer and scheduler through accelerate into the
step's directory, then hands ``save`` its own state as plain data: one file per
process (each process draws its own prompts, so each has its own RNGs, pass-rate
memory and batches in flight). Rank 0's file is written last of all and marks the
checkpoint complete. A policy proctor sharded itself (FSDP2 on CPU processes, which
accelerate does not shard) goes through ``save_sharded`` / ``load_sharded`` instead:
each process writes and reads its own shards with torch.distributed.checkpoint.
"""

from __future__ import annotations

import pickle
import re
import shutil
from pathlib import Path
from typing import Any, Optional

STATE_FILE = "proctor_state.pkl"          # rank 0 (and every checkpoint of a one-process run)
SHARDED_DIR = "sharded"                   # FSDP2 sharded without accelerate (CPU processes): model + optimizer
_STEP_DIR = re.compile(r"^step-(\d+)$")


def state_file(path: Path, rank: int) -> Path:
    return path / (STATE_FILE if rank == 0 else f"proctor_state.rank{rank}.pkl")


def checkpoint_dir(output_dir: str | Path, step: int) -> Path:
    return Path(output_dir) / "checkpoints" / f"step-{step}"


def latest_checkpoint(output_dir: str | Path) -> Optional[Path]:
    root = Path(output_dir) / "checkpoints"
    if not root.is_dir():
        return None
    steps = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)) and
             (p / STATE_FILE).exists()]
    return max(steps)[1] if steps else None


def prune(output_dir: str | Path, keep: Optional[int]) -> list[Path]:
    """Remove all but the newest ``keep`` complete checkpoints (none when ``keep`` is None);
    returns what was removed. Incomplete ones (no rank-0 state) are left for a person to see."""
    if keep is None:
        return []
    root = Path(output_dir) / "checkpoints"
    done = sorted((int(m.group(1)), p) for p in root.iterdir()
                  if (m := _STEP_DIR.match(p.name)) and (p / STATE_FILE).exists()) if root.is_dir() else []
    removed = [p for _, p in done[:-keep]] if len(done) > keep else []
    for p in removed:
        shutil.rmtree(p)
    return removed


def save(path: str | Path, state: dict[str, Any], rank: int = 0) -> Path:
    """Write one process's state into the checkpoint directory ``path`` (via a temporary
    file and a rename: a crash mid-save never leaves a file that looks complete)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    target = state_file(path, rank)
    tmp = target.with_suffix(".tmp")
    with open(tmp, "wb") as f:
        pickle.dump(state, f)
    tmp.replace(target)
    return path


def load(path: str | Path, rank: int = 0) -> dict[str, Any]:
    """One process's state from a checkpoint directory."""
    path = Path(path)
    if not (path / STATE_FILE).exists():
        raise FileNotFoundError(f"{path} is not a complete proctor checkpoint (no {STATE_FILE}); "
                                "pick another under checkpoints/ or start afresh")
    own = state_file(path, rank)
    if not own.exists():
        raise FileNotFoundError(f"{path} has no state for process {rank} ({own.name}): it was saved by fewer "
                                "processes; resume with the number of processes that saved it")
    with open(own, "rb") as f:
        return pickle.load(f)   # our own file, written by save() above


def save_sharded(path: str | Path, model: Any, optimizer: Any) -> Path:
    """An FSDP2 model and its optimizer, each process writing its shards (a collective)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_state, optim_state = get_state_dict(model, optimizer)
    target = Path(path) / SHARDED_DIR
    dcp.save({"model": model_state, "optimizer": optim_state}, checkpoint_id=str(target))
    return target


def load_sharded(path: str | Path, model: Any, optimizer: Any) -> None:
    """``save_sharded``'s model and optimizer state, into the same sharding (a collective)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    source = Path(path) / SHARDED_DIR
    if not source.is_dir():
        raise FileNotFoundError(f"{path} has no {SHARDED_DIR}/ (the sharded model and optimizer): it was not saved "
                                "by an FSDP run on CPU processes; resume it with the launch that saved it")
    model_state, optim_state = get_state_dict(model, optimizer)
    state = {"model": model_state, "optimizer": optim_state}
    dcp.load(state, checkpoint_id=str(source))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
