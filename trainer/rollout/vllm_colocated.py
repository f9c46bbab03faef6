"""Rollouts from an in-process vLLM engine beside the learner, with in-place weight sync.

The engine loads the model once; after every optimizer step (or every k steps) the
learner's policy is pushed into it: the full weights, or, for a LoRA learner, only the
adapter (unmerged, replaced in place; ``lora_sync="merged"`` pushes W + BA instead).
Every rollout carries the weight version that sampled it: stale weights never pass
silently. With sleep mode (GPU) the engine frees its memory while the learner works.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import weakref
from typing import Any, Literal, Optional, Sequence

from .base import Rollout, SamplingParams, Snapshot, SyncInfo, check_logprobs_mode, stop_token_ids
from .vllm_engine import VLLMEngine
from .weights import adapter_state, is_peft, policy_weights, unwrap, write_adapter


class VLLMColocatedGenerator:
    """Implements the ``Generator`` interface with ``vllm.LLM`` in this process."""

    def __init__(self, model_path: str, learner: Any, tokenizer: Any, *, dtype: str = "auto",
                 max_model_len: Optional[int] = None, gpu_memory_utilization: float = 0.3, seed: int = 0,
                 enforce_eager: bool = True, lora_sync: Literal["adapter", "merged"] = "adapter",
                 sleep_mode: bool = False, sleep_level: int = 1, **engine_kwargs: Any) -> None:
        self.learner = learner
        self.tokenizer = tokenizer
        self.adapter_sync = lora_sync == "adapter" and is_peft(learner)
        rank = unwrap(learner).peft_config[unwrap(learner).active_adapter].r if self.adapter_sync else 16
        self.engine = VLLMEngine(model_path, dtype=dtype, max_model_len=max_model_len,
                                 gpu_memory_utilization=gpu_memory_utilization, seed=seed,
                                 enforce_eager=enforce_eager, enable_lora=self.adapter_sync, max_lora_rank=rank,
                                 sleep_mode=sleep_mode, **engine_kwargs)
        self.llm = self.engine.llm
        self.sleep_level = sleep_level
        self._adapter_dir = tempfile.mkdtemp(prefix="proctor-lora-") if self.adapter_sync else None
        if self._adapter_dir:
            weakref.finalize(self, shutil.rmtree, self._adapter_dir, True)
        self.stop_ids = stop_token_ids(tokenizer)
        self.last_sync: Optional[SyncInfo] = None
        if self.adapter_sync:   # the engine serves the adapter from the first rollout on
            self.apply(self.snapshot(), version=0)

    @property
    def weight_version(self) -> int:
        return self.engine.weight_version

    # ------------------------------------------------------------------ weights
    def sync_weights(self) -> bool:
        """Push the learner's policy into the engine now (the trainer decides when: weight_sync.py)."""
        self.apply(self.snapshot(copy=False))
        return True

    def snapshot(self, copy: bool = True) -> Snapshot:
        """The learner's policy now; ``copy`` (the default) makes it safe to apply after the
        learner moves on; ``copy=False`` shares the learner's tensors (an immediate push)."""
        if self.adapter_sync:
            tensors, config = adapter_state(self.learner)
            return Snapshot("lora", tensors, config)
        return Snapshot("full", policy_weights(self.learner, copy=copy))

    def apply(self, snapshot: Snapshot, version: Optional[int] = None) -> int:
        t0 = time.perf_counter()
        if snapshot.kind == "lora":
            write_adapter(self._adapter_dir, snapshot.payload, snapshot.config)
            out = self.engine.load_lora(self._adapter_dir, version=version)
            named = list(snapshot.payload.items())
        elif snapshot.kind == "full":
            out = self.engine.load_weights(snapshot.payload, version=version)
            named = list(snapshot.payload)
        else:
            raise ValueError(f"the vLLM engine cannot load a {snapshot.kind!r} snapshot (it holds its own weights)")
        size = float(sum(t.numel() * t.element_size() for _, t in named))
        self.last_sync = SyncInfo(bytes=size, buckets=1, seconds=time.perf_counter() - t0)
        return out

    def restore(self, version: int) -> None:
        """After a resume: the engine takes the restored learner's policy, under its version."""
        self.apply(self.snapshot(copy=False), version=version)

    def close(self) -> None:
        """The engine lives as long as this object (vLLM frees it on collection)."""

    # ------------------------------------------------------------------ sampling
    def generate(self, prompts: Sequence[list[int]], params: SamplingParams) -> list[list[Rollout]]:
        check_logprobs_mode(self.engine.logprobs_mode, params, "the in-process vLLM engine")
        groups = self.engine.generate(prompts, n=params.n, temperature=params.temperature, top_p=params.top_p,
                                      top_k=params.top_k, max_new_tokens=params.max_new_tokens,
                                      stop_ids=self.stop_ids, min_p=params.min_p,
                                      repetition_penalty=params.repetition_penalty, stop=params.stop)
        version = self.engine.weight_version
        return [[Rollout(prompt_ids=tuple(prompt), completion_ids=tuple(s.completion_ids), logprobs=tuple(s.logprobs),
                         text=self.tokenizer.decode(s.completion_ids, skip_special_tokens=True),
                         finish_reason="stop" if s.finish_reason == "stop" else "length", weight_version=version)
                 for s in group] for prompt, group in zip(prompts, groups)]

    def greedy(self, prompts: Sequence[list[int]], max_new_tokens: int, *, stop: tuple[str, ...] = (),
               repetition_penalty: float = 1.0) -> list[str]:
        return [r.text for r in self.greedy_rollouts(prompts, max_new_tokens, stop=stop,
                                                     repetition_penalty=repetition_penalty)]

    def greedy_rollouts(self, prompts: Sequence[list[int]], max_new_tokens: int, *, stop: tuple[str, ...] = (),
                        repetition_penalty: float = 1.0) -> list[Rollout]:
        groups = self.engine.generate(prompts, temperature=0.0, max_new_tokens=max_new_tokens, stop_ids=self.stop_ids,
                                      repetition_penalty=repetition_penalty, stop=stop)
        version = self.engine.weight_version
        return [Rollout(prompt_ids=tuple(prompt), completion_ids=tuple(g[0].completion_ids),
                        logprobs=tuple(g[0].logprobs),
                        text=self.tokenizer.decode(g[0].completion_ids, skip_special_tokens=True),
                        finish_reason="stop" if g[0].finish_reason == "stop" else "length", weight_version=version)
                for prompt, g in zip(prompts, groups)]

    # ------------------------------------------------------------------ memory (GPU sleep mode)
    def sleep(self) -> None:
        """Free the engine's GPU memory for the learner's update."""
        self.engine.sleep(level=self.sleep_level)

    def wake_up(self) -> None:
        self.engine.wake_up()

    def sync_and_wake(self) -> bool:
        """After the update: weights back first, the new ones loaded, then the KV cache —
        so an update never writes into released memory and the cache never coexists with
        the learner's gradients."""
        self.engine.wake_up(["weights"])
        synced = self.sync_weights()
        self.engine.wake_up(["kv_cache"])
        return synced


__all__ = ["VLLMColocatedGenerator"]
