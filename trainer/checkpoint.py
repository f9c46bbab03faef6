"""Checkpoints that resume exactly: weights, optimizer, scheduler, every RNG, the data
position and the pass-rate memory. On CPU the step after a resume equals the step that
would have run without the interruption (a test holds it to that).

The trainer writes the model, optimizer and scheduler through accelerate into the
step's directory, then hands ``save`` its own state: one state per process (each process
draws its own prompts, so each has its own RNGs, pass-rate memory and batches in flight).
A policy proctor sharded itself (FSDP2 on CPU processes, which accelerate does not shard)
goes through ``save_sharded`` / ``load_sharded`` instead: each process writes and reads its
own shards with torch.distributed.checkpoint.

A process's state is plain data, never pickled (``state_codec.py``):

    proctor_state.json                 rank 0: {"format", "version", "rank", "save_id",
    proctor_state.safetensors            "tensors_file", "state"}; its tensors by name
    proctor_state.rank{N}.json         process N's, the same
    proctor_state.rank{N}.safetensors    (a state without tensors has no tensors file)

The JSON is strict (``json.load`` reads it; NaN and inf are tagged) and holds no Python
module or class path: records (tasks, rollouts, verdicts, a generation batch in flight,
...) are their fields by name under a kind name, so moving or renaming a class does not
break resume. Each file is written to a temporary name and renamed; the tensors go before
the JSON that names them (their ``save_id`` must match), and rank 0's JSON goes last of all:
it marks the checkpoint complete (``latest_checkpoint`` and ``prune`` look for it).

Checkpoints of earlier versions (``proctor_state.pkl``) are refused at resume with a
message saying what to do (finish that run with the proctor that wrote it, or start
afresh): reading them would mean unpickling, which this format exists to avoid. They
still count as complete checkpoints for ``latest_checkpoint`` (so "latest" reaches that
message rather than "no checkpoint") and for ``prune``.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
from pathlib import Path
from typing import Any, Optional

from . import state_codec

STATE_FILE = "proctor_state.json"         # rank 0 (and every checkpoint of a one-process run); marks it complete
LEGACY_STATE_FILE = "proctor_state.pkl"   # rank 0's file in the pickle format of earlier versions (refused)
SHARDED_DIR = "sharded"                   # FSDP2 sharded without accelerate (CPU processes): model + optimizer
FORMAT, VERSION = "proctor-state", 1
_STEP_DIR = re.compile(r"^step-(\d+)$")


class OldCheckpointFormat(ValueError):
    """A checkpoint written in the pickle format of an earlier proctor."""


def state_file(path: Path, rank: int) -> Path:
    return path / (STATE_FILE if rank == 0 else f"proctor_state.rank{rank}.json")


def tensors_file(path: Path, rank: int) -> Path:
    return state_file(path, rank).with_suffix(".safetensors")


def checkpoint_dir(output_dir: str | Path, step: int) -> Path:
    return Path(output_dir) / "checkpoints" / f"step-{step}"


def _complete(p: Path) -> bool:
    return (p / STATE_FILE).exists() or (p / LEGACY_STATE_FILE).exists()


def _complete_steps(output_dir: str | Path) -> list[tuple[int, Path]]:
    root = Path(output_dir) / "checkpoints"
    if not root.is_dir():
        return []
    return sorted((int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)) and _complete(p))


def latest_checkpoint(output_dir: str | Path) -> Optional[Path]:
    steps = _complete_steps(output_dir)
    return steps[-1][1] if steps else None


def prune(output_dir: str | Path, keep: Optional[int]) -> list[Path]:
    """Remove all but the newest ``keep`` complete checkpoints (none when ``keep`` is None);
    returns what was removed. Incomplete ones (no rank-0 state) are left for a person to see."""
    if keep is None:
        return []
    done = _complete_steps(output_dir)
    removed = [p for _, p in done[:-keep]] if len(done) > keep else []
    for p in removed:
        shutil.rmtree(p)
    return removed


def _write(target: Path, write: Any) -> None:
    """``write(tmp)`` then rename onto ``target``: a crash mid-save never leaves a file that looks complete."""
    tmp = target.with_name(target.name + ".tmp")
    write(tmp)
    tmp.replace(target)


def save(path: str | Path, state: dict[str, Any], rank: int = 0) -> Path:
    """Write one process's state into the checkpoint directory ``path``: its tensors as
    safetensors, then the rest as JSON (see the module's docstring). A value that is not plain
    data fails here (``state_codec.NotPlainData``), before anything is written."""
    from safetensors.torch import save_file

    path = Path(path)
    plain, tensors = state_codec.encode(state)
    save_id = secrets.token_hex(8)
    tensors_at = tensors_file(path, rank)
    doc = {"format": FORMAT, "version": VERSION, "rank": rank, "save_id": save_id,
           "tensors_file": tensors_at.name if tensors else None, "state": plain}
    text = state_codec.dumps(doc) + "\n"
    path.mkdir(parents=True, exist_ok=True)
    if tensors:
        _write(tensors_at, lambda tmp: save_file(tensors, str(tmp), metadata={"format": FORMAT, "save_id": save_id}))
    else:
        tensors_at.unlink(missing_ok=True)   # one of an earlier save of this step
    _write(state_file(path, rank), lambda tmp: tmp.write_text(text, encoding="utf-8"))
    return path


def load(path: str | Path, rank: int = 0) -> dict[str, Any]:
    """One process's state from a checkpoint directory."""
    from safetensors import safe_open

    path = Path(path)
    if not (path / STATE_FILE).exists():
        if (path / LEGACY_STATE_FILE).exists():
            raise OldCheckpointFormat(
                f"{path} is a checkpoint of an earlier proctor: its state is pickled ({LEGACY_STATE_FILE}), and this "
                f"version reads only plain-data checkpoints ({STATE_FILE} + safetensors). Finish that run with the "
                "proctor that wrote it, or start afresh (unset checkpoint.resume_from, or pick a newer checkpoint)")
        raise FileNotFoundError(f"{path} is not a complete proctor checkpoint (no {STATE_FILE}); "
                                "pick another under checkpoints/ or start afresh")
    own = state_file(path, rank)
    if not own.exists():
        raise FileNotFoundError(f"{path} has no state for process {rank} ({own.name}): it was saved by fewer "
                                "processes; resume with the number of processes that saved it")
    doc = json.loads(own.read_text(encoding="utf-8"))
    if doc.get("format") != FORMAT or not isinstance(doc.get("version"), int) or doc["version"] > VERSION:
        raise ValueError(f"{own} is not a proctor state this version reads (format {doc.get('format')!r}, "
                         f"version {doc.get('version')!r}; this proctor reads {FORMAT!r} up to version {VERSION})")
    tensors = {}
    if doc.get("tensors_file"):
        source = path / doc["tensors_file"]
        if not source.exists():
            raise FileNotFoundError(f"{own.name} names {source.name}, which is missing from {path}: the checkpoint "
                                    "is damaged; pick another under checkpoints/")
        with safe_open(str(source), framework="pt", device="cpu") as f:
            if (f.metadata() or {}).get("save_id") != doc["save_id"]:
                raise ValueError(f"{source.name} in {path} is not the one {own.name} was saved with (another save's); "
                                 "the checkpoint is damaged: pick another under checkpoints/")
            tensors = {name: f.get_tensor(name) for name in f.keys()}
    return state_codec.decode(doc["state"], tensors)


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
