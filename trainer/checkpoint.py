"""Checkpoints that resume exactly: weights, optimizer, scheduler, every RNG, the data
position and the pass-rate memory. On CPU the step after a resume equals the step that
would have run without the interruption (a test holds it to that).

The trainer first writes the training state (``save_training``), then hands ``save`` its own
state: one per process (each process draws its own prompts, so each has its own RNGs,
pass-rate memory and batches in flight). Everything is plain data, never pickled, on one
process and in data-parallel runs (DDP on CPU or CUDA: ``plain_training_state``):

    model.safetensors                  rank 0: the policy's weights (tied weights once);
    model_1.safetensors                  PPO's critic's
    training_state.json                rank 0: each trainable part's optimizer state_dict and LR
    training_state.safetensors           scheduler state, the fp16 grad scaler, accelerate's step
                                         counter; the optimizer's tensors by name
    rng_state.json                     each process's python, numpy, torch CPU (and CUDA) RNGs
    rng_state.rank{N}.json               (generator states as bytes; JSON only)
    proctor_state[.rank{N}].json       each process's own state (below)
    proctor_state[.rank{N}].safetensors

Two launches keep other formats, written by the libraries that shard: a policy proctor
sharded itself (FSDP2 on CPU processes, which accelerate does not shard) has its weights and
optimizer in ``sharded/`` (``save_sharded`` / ``load_sharded``: each process writes and reads
its own shards with torch.distributed.checkpoint, whose ``.metadata`` is pickled), the rest
(schedule, RNGs, proctor's state) as above. Under DeepSpeed (and accelerate's FSDP on
accelerator devices) accelerate's ``save_state`` / ``load_state`` write and read the engine's
checkpoint (``pytorch_model/``: DeepSpeed's ``*_model_states.pt`` / ``*_optim_states.pt``), the
scheduler (``custom_checkpoint_0.pkl``) and the RNGs (``random_states_N.pkl``), all pickled;
only proctor's own state is plain data there. A checkpoint is read by the kind of launch
that wrote it; another kind is refused with what to do, as is a checkpoint whose optimizer,
scheduler and RNGs an earlier proctor left to accelerate's pickles (``OldCheckpointFormat``).

Each of the JSON files (proctor_state, training_state, rng_state) goes through ``state_codec.py``:

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

STATE_STEM = "proctor_state"
STATE_FILE = "proctor_state.json"         # rank 0 (and every checkpoint of a one-process run); marks it complete
TRAINING_STEM = "training_state"          # rank 0: optimizers, schedulers, grad scaler (plain data-parallel runs)
RNG_STEM = "rng_state"                    # each process's RNGs (plain data-parallel runs)
WEIGHTS_FILE = "model.safetensors"        # the policy's weights (model_1.safetensors: PPO's critic)
LEGACY_STATE_FILE = "proctor_state.pkl"   # rank 0's file in the pickle format of earlier versions (refused)
SHARDED_DIR = "sharded"                   # FSDP2 sharded without accelerate (CPU processes): model + optimizer
FORMAT, VERSION = "proctor-state", 1
_STEP_DIR = re.compile(r"^step-(\d+)$")


class OldCheckpointFormat(ValueError):
    """A checkpoint written in the pickle format of an earlier proctor."""


def state_file(path: Path, rank: int) -> Path:
    return _doc_file(path, STATE_STEM, rank)


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


def _doc_file(path: Path, stem: str, rank: int) -> Path:
    return path / (f"{stem}.json" if rank == 0 else f"{stem}.rank{rank}.json")


def _save_doc(path: Path, stem: str, state: dict[str, Any], rank: int) -> None:
    """``state`` as ``{stem}[.rankN].json`` plus its tensors in ``.safetensors`` (none when it has
    none): tensors first, then the JSON naming them by ``save_id``."""
    from safetensors.torch import save_file

    plain, tensors = state_codec.encode(state)
    save_id = secrets.token_hex(8)
    json_at = _doc_file(path, stem, rank)
    tensors_at = json_at.with_suffix(".safetensors")
    doc = {"format": FORMAT, "version": VERSION, "rank": rank, "save_id": save_id,
           "tensors_file": tensors_at.name if tensors else None, "state": plain}
    text = state_codec.dumps(doc) + "\n"
    path.mkdir(parents=True, exist_ok=True)
    if tensors:
        _write(tensors_at, lambda tmp: save_file(tensors, str(tmp), metadata={"format": FORMAT, "save_id": save_id}))
    else:
        tensors_at.unlink(missing_ok=True)   # one of an earlier save of this step
    _write(json_at, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def _load_doc(path: Path, stem: str, rank: int) -> dict[str, Any]:
    """``_save_doc``'s state back, its tensors on the CPU."""
    from safetensors import safe_open

    own = _doc_file(path, stem, rank)
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


def save(path: str | Path, state: dict[str, Any], rank: int = 0) -> Path:
    """Write one process's state into the checkpoint directory ``path``: its tensors as
    safetensors, then the rest as JSON (see the module's docstring). A value that is not plain
    data fails here (``state_codec.NotPlainData``), before anything is written."""
    path = Path(path)
    _save_doc(path, STATE_STEM, state, rank)
    return path


def load(path: str | Path, rank: int = 0) -> dict[str, Any]:
    """One process's state from a checkpoint directory."""
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
    return _load_doc(path, STATE_STEM, rank)


# ---------------------------------------------------------------- the training state (what accelerate wrote before)

def plain_training_state(accelerator: Any) -> bool:
    """Proctor writes the weights, optimizer, scheduler and RNGs itself, as plain data: one
    process or data parallel (DDP, CPU processes, FSDP2 on CPU processes, whose sharded policy
    goes through ``save_sharded``) on CPU or CUDA. Elsewhere (DeepSpeed, accelerate's FSDP on
    accelerator devices, other devices) accelerate's ``save_state`` writes them: its engines'
    own checkpoint formats, pickled."""
    from accelerate.utils import DistributedType

    return (accelerator.state.deepspeed_plugin is None
            and accelerator.distributed_type in (DistributedType.NO, DistributedType.MULTI_CPU,
                                                 DistributedType.MULTI_GPU)
            and accelerator.device.type in ("cpu", "cuda"))


def weights_file(path: Path, index: int) -> Path:
    """The weights of the run's ``index``-th trainable part (0: the policy; 1: PPO's critic)."""
    return path / (WEIGHTS_FILE if index == 0 else WEIGHTS_FILE.replace(".", f"_{index}."))


def _rng_state() -> dict[str, Any]:
    import random

    import numpy as np
    import torch

    def raw(t: Any) -> bytes:
        return t.cpu().numpy().tobytes()

    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": raw(torch.get_rng_state()),
            "cuda": [raw(t) for t in torch.cuda.get_rng_state_all()] if torch.cuda.is_available() else None}


def _set_rng_state(state: dict[str, Any], where: Path) -> None:
    import random

    import numpy as np
    import torch

    def tensor(b: bytes) -> Any:
        return torch.frombuffer(bytearray(b), dtype=torch.uint8)

    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(tensor(state["torch"]))
    cuda = state.get("cuda")
    if torch.cuda.is_available():
        if cuda is None or len(cuda) != torch.cuda.device_count():
            raise ValueError(f"{where} holds the CUDA random states of {0 if cuda is None else len(cuda)} devices and "
                             f"this process sees {torch.cuda.device_count()}: resume on the devices that saved it")
        torch.cuda.set_rng_state_all([tensor(b) for b in cuda])


def _accelerate_files(path: Path) -> list[str]:
    """What accelerate's ``save_state`` leaves in a checkpoint (any of it)."""
    return sorted(p.name for p in path.iterdir()
                  if p.name.startswith(("random_states_", "custom_checkpoint_", "optimizer", "scheduler", "scaler.pt",
                                        "pytorch_model")))


def save_training(path: str | Path, accelerator: Any, parts: list[Any], sharded: bool = False) -> None:
    """The weights, optimizer and scheduler of each trainable part (``Trainable``: the policy,
    PPO's critic), the grad scaler and every RNG. With ``plain_training_state``: rank 0 writes
    ``model[_i].safetensors`` and ``training_state.json`` (+ ``.safetensors``), every process its
    ``rng_state[.rankN].json`` (``sharded``: the policy's weights and optimizer are in
    ``save_sharded``'s files instead). Otherwise accelerate's ``save_state`` (every process calls it)."""
    from safetensors.torch import save_model

    path = Path(path)
    if not plain_training_state(accelerator):
        accelerator.save_state(str(path))
        return
    path.mkdir(parents=True, exist_ok=True)
    rank = accelerator.process_index
    if rank == 0:
        for i, part in enumerate(parts):
            if not (sharded and i == 0):
                model = accelerator.unwrap_model(part.model)
                # tied weights (shared storage) written once, as safetensors requires
                _write(weights_file(path, i), lambda tmp, m=model: save_model(m, str(tmp), metadata={"format": "pt"}))
        scaler = accelerator.scaler
        _save_doc(path, TRAINING_STEM, {
            "optimizers": [None if sharded and i == 0 else p.optimizer.state_dict() for i, p in enumerate(parts)],
            "schedulers": [None if p.scheduler is None else p.scheduler.state_dict() for p in parts],
            "scaler": None if scaler is None else scaler.state_dict(),
            "accelerate_step": accelerator.step}, 0)
    _save_doc(path, RNG_STEM, _rng_state(), rank)


def load_training(path: str | Path, accelerator: Any, parts: list[Any], sharded: bool = False) -> None:
    """``save_training``'s files back into the prepared parts, the scaler and the RNGs."""
    from safetensors.torch import load_model

    path = Path(path)
    training = _doc_file(path, TRAINING_STEM, 0)
    if not plain_training_state(accelerator):
        if training.exists() and not _accelerate_files(path):
            raise ValueError(f"{path} was saved by a single-process or data-parallel run (weights, optimizer and "
                             f"scheduler as plain data: {training.name}), which this launch (DeepSpeed or accelerate's "
                             "FSDP) cannot read: resume it with the launch that saved it")
        accelerator.load_state(str(path))
        return
    rank = accelerator.process_index
    rng = _doc_file(path, RNG_STEM, rank)
    if not training.exists():
        found = _accelerate_files(path)
        if found:
            raise OldCheckpointFormat(
                f"{path} holds its optimizer, scheduler and random states as accelerate writes them, pickled "
                f"({', '.join(found)}): an earlier proctor's checkpoint, or one of a DeepSpeed or accelerate-FSDP run. "
                f"This run reads them only as plain data ({training.name}). Resume it with the proctor or the launch "
                "that saved it, or start afresh (unset checkpoint.resume_from, or pick a newer checkpoint)")
        raise FileNotFoundError(f"{path} has no {training.name} (the optimizer and scheduler): the checkpoint is "
                                "damaged; pick another under checkpoints/")
    if not rng.exists():
        raise FileNotFoundError(f"{path} has no random states for process {rank} ({rng.name}): it was saved by fewer "
                                "processes; resume with the number of processes that saved it")
    state = _load_doc(path, TRAINING_STEM, 0)
    if len(state["optimizers"]) != len(parts):
        raise ValueError(f"{path} holds {len(state['optimizers'])} trainable parts and this run has {len(parts)} "
                         "(the policy, and PPO's critic): resume it with the algorithm that saved it")
    for i, part in enumerate(parts):
        if sharded and i == 0:
            continue   # load_sharded's
        if state["optimizers"][i] is None:
            raise ValueError(f"{path} holds the policy's weights and optimizer sharded ({SHARDED_DIR}/): it was saved "
                             "by an FSDP run on CPU processes; resume it with the launch that saved it")
        load_model(accelerator.unwrap_model(part.model), str(weights_file(path, i)), device="cpu")
        part.optimizer.load_state_dict(state["optimizers"][i])
    for i, (part, scheduler) in enumerate(zip(parts, state["schedulers"])):
        if (part.scheduler is None) != (scheduler is None):
            raise ValueError(f"{path}: trainable part {i} was saved {'without' if scheduler is None else 'with'} a "
                             "learning-rate schedule and this run's is the other way: resume with the run that saved it")
        if scheduler is not None:
            part.scheduler.load_state_dict(scheduler)
    if accelerator.scaler is not None:
        if state["scaler"] is None:
            raise ValueError(f"{path} was saved without fp16's grad scaler and this run has one "
                             "(optim.mixed_precision): resume with the precision that saved it")
        accelerator.scaler.load_state_dict(state["scaler"])
    accelerator.step = state["accelerate_step"]
    _set_rng_state(_load_doc(path, RNG_STEM, rank), rng)


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
