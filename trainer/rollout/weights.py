"""What a learner sends to an engine: its full weights (LoRA merged) or only its adapter,
cut into size-bounded buckets for transport."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch


def unwrap(learner: Any) -> Any:
    return getattr(learner, "module", learner)


def is_peft(learner: Any) -> bool:
    return hasattr(unwrap(learner), "get_base_model")


def policy_weights(learner: Any, *, copy: bool = False, merge: bool = True) -> list[tuple[str, torch.Tensor]]:
    """The learner's weights under Hugging Face names, as the engine loaded them.

    A LoRA learner is merged for the copy (W + BA, in the base layer's names) and unmerged
    again, so the engine samples from exactly the policy being trained; ``merge=False``
    gives its base weights alone (for an engine that applies the adapter itself). Tied
    weights are sent once. ``copy`` snapshots them (for a transfer that outlives the next
    optimizer step).
    """
    model = unwrap(learner)
    seen: set[int] = set()
    out: list[tuple[str, torch.Tensor]] = []

    def add(name: str, tensor: torch.Tensor) -> None:
        key = tensor.data_ptr()
        if key in seen and tensor.numel():   # a tied head shares the embedding's storage
            return
        seen.add(key)
        t = tensor.detach()
        out.append((name, t.clone() if copy else t))

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


__all__ = ["adapter_state", "buckets", "is_peft", "nbytes", "policy_weights", "unwrap", "write_adapter"]
