"""The shape of a decoder-only transformer, as far as memory planning needs it.

Three ways in: a bare parameter count (a Llama-like shape is guessed around
it), a Hugging Face config (a directory, a ``config.json`` or a cached hub id),
or a live ``nn.Module`` (exact count, shape from its ``config``). Byte counts
always use ``params``; the rest of the shape only feeds activations, the
rollout KV cache and LoRA adapter sizes.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

# Llama-3-family shapes (Llama-like Qwen2.5/SmolLM2 ones where Llama 3 has no such size) used to guess a shape
# from a parameter count alone: (hidden, heads, kv_heads, intermediate, vocab, reference layers).
# The template whose reference model is nearest in log-size is taken and its
# depth refitted so that the shape holds about the requested count.
_TEMPLATES: tuple[tuple[int, int, int, int, int, int], ...] = (
    (576, 9, 3, 1536, 49_152, 30),         # SmolLM2-135M: Llama-like, small vocabulary
    (896, 14, 2, 4864, 151_936, 24),       # Qwen2.5-0.5B
    (2048, 32, 8, 8192, 128_256, 16),      # Llama-3.2-1B
    (3072, 24, 8, 8192, 128_256, 28),      # Llama-3.2-3B
    (4096, 32, 8, 14_336, 128_256, 32),    # Llama-3.1-8B
    (5120, 40, 8, 13_824, 152_064, 48),    # Qwen2.5-14B (no Llama-3 model of this width)
    (5120, 40, 8, 27_648, 152_064, 64),    # Qwen2.5-32B
    (8192, 64, 8, 28_672, 128_256, 80),    # Llama-3.1-70B
    (16_384, 128, 8, 53_248, 128_256, 126),  # Llama-3.1-405B
)


def human_count(n: int) -> str:
    """70B, 1.5B, 3.3M: the way model sizes are usually written."""
    for size, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= size:
            return f"{n / size:,.3g}{unit}"
    return str(n)


@dataclass(frozen=True)
class ModelShape:
    """Sizes of a Llama-like decoder: attention (GQA), gated MLP, untied or tied embeddings."""

    params: int                 # every parameter, shared (tied) tensors once
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    intermediate: int
    tied_embeddings: bool = False
    source: str = ""            # where the shape came from, for the report

    def __post_init__(self) -> None:
        for name in ("params", "layers", "hidden", "heads", "kv_heads", "head_dim", "vocab", "intermediate"):
            if getattr(self, name) < 1:
                raise ValueError(f"ModelShape.{name} must be >= 1 (got {getattr(self, name)})")

    def linear_shapes(self) -> list[tuple[int, int]]:
        """``(in, out)`` of every linear inside the decoder layers (the LoRA targets), all layers.

        The output head is left out, as peft's ``target_modules="all-linear"`` leaves it out.
        """
        q_out, kv_out = self.heads * self.head_dim, self.kv_heads * self.head_dim
        h, i = self.hidden, self.intermediate
        per_layer = [(h, q_out), (h, kv_out), (h, kv_out), (q_out, h), (h, i), (h, i), (i, h)]
        return per_layer * self.layers

    def lora_params(self, rank: int) -> int:
        """Trainable adapter parameters at ``rank``: ``rank * (in + out)`` per adapted linear."""
        return sum(rank * (n_in + n_out) for n_in, n_out in self.linear_shapes())

    def kv_bytes_per_token(self, bytes_per_value: int) -> int:
        """KV-cache bytes one token holds across all layers: K and V, ``kv_heads * head_dim`` each."""
        return 2 * self.layers * self.kv_heads * self.head_dim * bytes_per_value

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _dense_count(layers: int, hidden: int, heads: int, kv_heads: int, head_dim: int, vocab: int,
                 intermediate: int, tied: bool, qkv_bias: bool = False, extra_per_layer: int = 0) -> int:
    """Parameters of a Llama-like decoder with these sizes (RMSNorm weights included)."""
    q_out, kv_out = heads * head_dim, kv_heads * head_dim
    attention = hidden * q_out + 2 * hidden * kv_out + q_out * hidden
    if qkv_bias:
        attention += q_out + 2 * kv_out
    mlp = 3 * hidden * intermediate
    per_layer = attention + mlp + 2 * hidden + extra_per_layer     # two norms per layer
    embeddings = vocab * hidden * (1 if tied else 2)
    return layers * per_layer + embeddings + hidden                 # final norm


def shape_from_params(params: float) -> ModelShape:
    """A Llama-like shape for a bare parameter count.

    Heuristic: take the Llama-3-family width whose reference model is nearest
    to ``params`` on a log scale, keep its heads, GQA kv heads, MLP width and
    vocabulary, and choose the depth that brings the count closest to
    ``params`` (at least one layer). ``params`` itself is kept exactly.
    """
    n = int(params)
    if n < 1:
        raise ValueError(f"--params must be a positive parameter count such as 7e9 (got {params})")

    def ref_count(t: tuple[int, int, int, int, int, int]) -> int:
        hidden, heads, kv, inter, vocab, layers = t
        return _dense_count(layers, hidden, heads, kv, hidden // heads, vocab, inter, tied=False)

    hidden, heads, kv, inter, vocab, _ = min(_TEMPLATES, key=lambda t: abs(math.log(ref_count(t) / n)))
    head_dim = hidden // heads
    per_layer = _dense_count(1, hidden, heads, kv, head_dim, vocab, inter, False) - \
        _dense_count(0, hidden, heads, kv, head_dim, vocab, inter, False)
    embeddings = _dense_count(0, hidden, heads, kv, head_dim, vocab, inter, False)
    layers = max(1, round((n - embeddings) / per_layer))
    return ModelShape(params=n, layers=layers, hidden=hidden, heads=heads, kv_heads=kv, head_dim=head_dim,
                      vocab=vocab, intermediate=inter, tied_embeddings=False,
                      source=f"{n:,} parameters; Llama-like shape guessed (hidden {hidden}, {layers} layers)")


def shape_from_config(config: Any, source: str = "") -> ModelShape:
    """Shape and parameter count from a transformers ``PretrainedConfig`` of a dense decoder."""
    cfg = getattr(config, "text_config", None) or config          # multimodal configs nest the LM
    if getattr(cfg, "num_local_experts", None) or getattr(cfg, "num_experts", None):
        raise ValueError(f"{source or 'the model'} is a mixture-of-experts model, which the planner does not "
                         "shape; pass --params with its total parameter count instead of --model")
    missing = [k for k in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size",
                           "intermediate_size") if getattr(cfg, k, None) is None]
    if missing:
        raise ValueError(f"{source or 'the config'} lacks {', '.join(missing)}: not a Llama-like decoder; "
                         "pass --params with its parameter count instead of --model")
    hidden, layers, heads = cfg.hidden_size, cfg.num_hidden_layers, cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or hidden // heads
    model_type = getattr(cfg, "model_type", "") or ""
    bias = getattr(cfg, "attention_bias", None)
    qkv_bias = bool(bias) if bias is not None else model_type.startswith("qwen2")   # Qwen2 hard-codes q/k/v biases
    extra = 2 * head_dim if model_type.startswith("qwen3") else 0                   # Qwen3's q/k RMSNorms
    tied = bool(getattr(cfg, "tie_word_embeddings", False))
    count = _dense_count(layers, hidden, heads, kv_heads, head_dim, cfg.vocab_size, cfg.intermediate_size,
                         tied, qkv_bias, extra)
    return ModelShape(params=count, layers=layers, hidden=hidden, heads=heads, kv_heads=kv_heads,
                      head_dim=head_dim, vocab=cfg.vocab_size, intermediate=cfg.intermediate_size,
                      tied_embeddings=tied, source=source or f"{model_type or 'model'} config")


def load_shape(model: str) -> ModelShape:
    """Shape from a directory holding ``config.json``, the file itself, or a hub id already in the cache."""
    from transformers import AutoConfig

    path = Path(model).expanduser()
    # "org/name" is a hub id unless such a folder exists here; an explicit path or a .json is local.
    local = path.exists() or model.startswith((".", "/", "~")) or model.endswith(".json")
    if local:
        if path.is_file() and path.suffix != ".json":
            raise ValueError(f"--model {model}: give a model directory or its config.json, not another file")
        if not path.is_file() and not (path / "config.json").is_file():
            raise ValueError(f"--model {model}: no config.json at {path}; give a model directory, its "
                             "config.json, or a hub id")
    try:
        # Local first: no network is touched for a local path or a cached hub id.
        config = AutoConfig.from_pretrained(str(path) if local else model, local_files_only=True)
    except Exception as local_exc:  # noqa: BLE001 - any failure: try the hub, then explain
        if local or os.environ.get("HF_HUB_OFFLINE") == "1":
            raise ValueError(f"--model {model}: could not read its config ({local_exc}); hub ids work only when "
                             "cached while offline; download it first or pass --params") from None
        try:
            config = AutoConfig.from_pretrained(model)
        except Exception as exc:  # noqa: BLE001
            raise ValueError(f"--model {model}: not a local config and not fetchable from the hub ({exc}); "
                             "check the id, download it first, or pass --params") from None
    return shape_from_config(config, source=model)


def model_shape_from_model(model: Any) -> ModelShape:
    """Shape of a live model: sizes from its ``config``, the count from its tensors (tied ones once).

    Counting the tensors themselves makes the planner budget exactly what is
    allocated; for a peft model the base model's parameters are counted (adapters excluded).
    """
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    shape = shape_from_config(base.config, source=type(base).__name__)
    seen: set[int] = set()
    count = 0
    for name, p in base.named_parameters(remove_duplicate=True):
        if "lora_" in name or id(p) in seen:
            continue
        seen.add(id(p))
        count += p.numel()
    return ModelShape(**{**shape.to_dict(), "params": count})
