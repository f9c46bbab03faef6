"""What a learner sends to an engine: its full weights (LoRA merged) or only its adapter,
cut into size-bounded buckets for transport.

A sharded learner (FSDP2, FSDP1, DeepSpeed ZeRO-3) holds a slice of each weight per
process: ``policy_weights`` gathers them one parameter at a time, a collective every
process must join, and only the processes that keep the result hold full tensors.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch
from torch.distributed.tensor import DTensor


def unwrap(learner: Any) -> Any:
    return getattr(learner, "module", learner)


def is_peft(learner: Any) -> bool:
    return hasattr(unwrap(learner), "get_base_model")


def is_fsdp1(model: Any) -> bool:
    from torch.distributed.fsdp import FullyShardedDataParallel

    return isinstance(model, FullyShardedDataParallel)


def is_zero3() -> bool:
    """DeepSpeed ZeRO-3 is on for this process (transformers' global flag, set by accelerate)."""
    from transformers.integrations import is_deepspeed_zero3_enabled

    return is_deepspeed_zero3_enabled()


def is_sharded(learner: Any) -> bool:
    """Each process holds only a slice of the weights (FSDP2 DTensors, FSDP1, ZeRO-3)."""
    model = unwrap(learner)
    return (is_fsdp1(learner) or is_zero3()
            or any(isinstance(p, DTensor) for p in model.parameters()))


@contextlib.contextmanager
def full_parameters(learner: Any) -> Iterator[Any]:
    """The learner's module with FSDP1 / ZeRO-3 parameters gathered (read-only) for the
    duration; FSDP2 DTensors are gathered one by one by ``policy_weights`` instead."""
    if is_fsdp1(learner):
        from torch.distributed.fsdp import FullyShardedDataParallel

        with FullyShardedDataParallel.summon_full_params(learner, writeback=False):
            yield learner.module
    elif is_zero3():
        import deepspeed

        model = unwrap(learner)
        with deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=None):
            yield model
    else:
        yield unwrap(learner)


def policy_weights(learner: Any, *, copy: bool = False, merge: bool = True,
                   keep: bool = True) -> list[tuple[str, torch.Tensor]]:
    """The learner's weights under Hugging Face names, as the engine loaded them.

    A LoRA learner is merged for the copy (W + BA, in the base layer's names) and unmerged
    again, so the engine samples from exactly the policy being trained; ``merge=False``
    gives its base weights alone (for an engine that applies the adapter itself). Tied
    weights are sent once. ``copy`` snapshots them (for a transfer that outlives the next
    optimizer step).

    Sharded: every process must call this (each gather is a collective); a process with
    ``keep=False`` (one that does not send) drops each gathered tensor at once and gets [].
    """
    seen: set[int] = set()
    out: list[tuple[str, torch.Tensor]] = []

    def add(name: str, tensor: torch.Tensor) -> None:
        local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
        key = local.data_ptr() if local.numel() else id(tensor)   # empty shards share address 0
        if key in seen and tensor.numel():   # a tied head shares the embedding's storage
            return
        seen.add(key)
        if isinstance(tensor, DTensor):
            full = tensor.detach().full_tensor()   # a fresh tensor: no copy needed
            if keep:
                out.append((name, full))
        elif keep:
            out.append((name, tensor.detach().clone() if copy else tensor.detach()))

    with full_parameters(learner) as model:
        if not is_peft(model):
            for name, tensor in model.state_dict().items():
                add(name, tensor)
            return out
        if merge:
            model.merge_adapter()
        try:
            for name, tensor in model.get_base_model().state_dict().items():
                if "lora_" not in name:
                    add(name.replace(".base_layer.", "."), tensor.clone() if merge else tensor)   # copy before unmerge
        finally:
            if merge:
                model.unmerge_adapter()
    return out


def adapter_state(learner: Any) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The LoRA adapter alone (tensors named as PEFT saves them, and its config): what an
    engine with LoRA enabled needs, a small fraction of the model."""
    from peft import get_peft_model_state_dict

    model = unwrap(learner)
    tensors = {k: v.detach().to("cpu", copy=True).contiguous() for k, v in get_peft_model_state_dict(model).items()}
    config = model.peft_config[model.active_adapter].to_dict()
    config = json.loads(json.dumps(config, default=lambda o: sorted(o) if isinstance(o, set) else str(o)))
    return tensors, config


def write_adapter(directory: "str | Path", tensors: dict[str, torch.Tensor], config: dict[str, Any]) -> Path:
    """Save as PEFT does (adapter_model.safetensors + adapter_config.json), for vLLM to load."""
    from safetensors.torch import save_file

    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    # Config last and via rename: a reader never sees a config without its tensors.
    save_file(tensors, str(path / "adapter_model.safetensors"))
    tmp = path / "adapter_config.json.tmp"
    tmp.write_text(json.dumps(config))
    tmp.replace(path / "adapter_config.json")
    return path


def nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def buckets(named: Sequence[tuple[str, torch.Tensor]], max_bytes: int) -> Iterator[list[tuple[str, torch.Tensor]]]:
    """Consecutive groups of at most ``max_bytes`` (a larger tensor travels alone)."""
    bucket: list[tuple[str, torch.Tensor]] = []
    size = 0
    for name, tensor in named:
        n = nbytes(tensor)
        if bucket and size + n > max_bytes:
            yield bucket
            bucket, size = [], 0
        bucket.append((name, tensor))
        size += n
    if bucket:
        yield bucket


__all__ = ["adapter_state", "buckets", "full_parameters", "is_peft", "is_sharded", "nbytes", "policy_weights", "unwrap",
           "write_adapter"]
