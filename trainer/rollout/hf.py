"""Rollouts with `transformers` `generate`: batched, on CPU or GPU, sharing the learner's model.

Sharing the model object means there is nothing to sync: the next call samples from
the weights the optimizer just wrote; ``weight_version`` still counts the syncs so
every rollout says which weights made it. A sharded model (FSDP2, ZeRO-3) gathers each
layer in its forward; every process then generates in lockstep (``synced_gpus``).

Memory: the sampler's log-prob of each generated token is kept as one float per token
(:class:`SampledLogprobs`); no step's logits outlive the next step, so generation memory
does not grow with steps x vocabulary.

Speed (CPU; bench/generation_profile.py, bench/grpo_vs_trl.py --forced-tokens): two things took
about 40 % of a decoding step on the tiny model at 256 new tokens, and both are changed here
without changing a single sampled token or log-prob (bit for bit, tests/test_generation_speed.py):

* the KV cache: transformers' ``DynamicCache`` grows each layer's keys and values with
  ``torch.cat`` every step, copying the whole cache (quadratic in the length). :class:`KVBuffer`
  layers write into one buffer sized for prompt + max_new_tokens and hand attention a view;
* grouped-query attention with a padding mask: transformers' SDPA path copies the key/value heads
  ``num_key_value_groups`` times (``repeat_kv``) whenever there is a mask, i.e. whenever prompts
  differ in length. :func:`_gqa_decode_attention` lets torch's CPU SDPA kernel read the shared
  heads itself (``enable_gqa``) for one-token decoding steps; the arithmetic is the same kernel's.

Generation also runs under ``torch.inference_mode`` there (unless the weights are sharded), which
drops autograd's per-op bookkeeping: about 9 % of a step at 128 tokens on this small model.
"""

from __future__ import annotations

from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Iterator, Optional, Sequence

import torch
import torch.distributed as dist

from transformers import DynamicCache, LogitsProcessor, LogitsProcessorList, RepetitionPenaltyLogitsProcessor
from transformers.cache_utils import DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from .base import Rollout, SamplingParams, SyncInfo, cut_at_stop, stop_token_ids
from .weights import is_sharded


@dataclass(frozen=True)
class _Greedy:
    """Greedy decoding's settings: what of SamplingParams can change an argmax answer."""

    stop: tuple[str, ...] = ()
    repetition_penalty: float = 1.0


class SampledLogprobs(LogitsProcessor):
    """One log-prob per generated token: ``log_softmax(scores / T)`` at the token sampled there.

    ``generate`` calls it once per step, before sampling, with the step's scores [B, V] ahead of
    the repetition penalty and of the temperature, top-k/top-p/min-p warpers (it is the first
    processor Proctor passes, and the penalty is passed after it: the distribution the learner's
    log-probs use too). The token drawn from step t's scores is the last column of step t + 1's
    ``input_ids``, so step t's log-probs [B, V] are held one step and then reduced to [B];
    :meth:`finish` reads the last step's from the returned sequences.
    """

    def __init__(self, temperature: float) -> None:
        self.temperature = temperature
        self.previous: Optional[torch.Tensor] = None   # [B, V]: the step before's log-probs
        self.values: list[torch.Tensor] = []            # per step [B]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.previous is not None:
            self.values.append(self.previous.gather(-1, input_ids[:, -1:]).squeeze(-1))
        self.previous = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def finish(self, new: torch.Tensor) -> torch.Tensor:
        """[B, steps] log-probs of ``new`` [B, steps], the generated columns."""
        if self.previous is not None and len(self.values) < new.shape[1]:
            self.values.append(self.previous.gather(-1, new[:, -1:]).squeeze(-1))
        self.previous = None
        if not self.values:
            return torch.zeros(new.shape, dtype=torch.float32, device=new.device)
        return torch.stack(self.values, dim=1)[:, :new.shape[1]]


class KVBuffer(DynamicLayer):
    """A ``DynamicLayer`` whose keys and values live in one buffer of ``capacity`` positions.

    ``update`` writes the new positions in place and returns views of the filled part, instead
    of ``torch.cat`` copying the whole cache every step; the values attention sees are the same.
    The buffer doubles if a call needs more. Whatever replaces ``keys``/``values`` from outside
    (``crop``, ``batch_select_indices``, ``reset``...) is adopted at the next update."""

    def __init__(self, capacity: int) -> None:
        super().__init__()
        self.capacity = capacity
        self._k: Optional[torch.Tensor] = None
        self._v: Optional[torch.Tensor] = None
        self._kv: tuple[Optional[torch.Tensor], Optional[torch.Tensor]] = (None, None)

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        super().lazy_initialization(key_states, value_states)
        self._k = self._v = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any
               ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        if self._k is None or self.keys is not self._kv[0]:   # first call, or keys replaced from outside
            self._adopt(self.keys, self.values, key_states, value_states)
        n, m = self.keys.shape[-2], key_states.shape[-2]
        if n + m > self._k.shape[-2]:
            self._adopt(self.keys, self.values, key_states, value_states, max(2 * self._k.shape[-2], n + m))
        self._k[:, :, n:n + m] = key_states
        self._v[:, :, n:n + m] = value_states
        self.keys, self.values = self._k[:, :, :n + m], self._v[:, :, :n + m]
        self._kv = (self.keys, self.values)
        return self.keys, self.values

    def _adopt(self, keys: torch.Tensor, values: torch.Tensor, new_k: torch.Tensor, new_v: torch.Tensor,
               capacity: int = 0) -> None:
        """A fresh buffer holding ``keys``/``values`` (possibly empty), room for ``capacity`` positions."""
        n = keys.shape[-2] if keys.numel() else 0
        capacity = max(capacity, self.capacity, n + new_k.shape[-2])
        self._k = new_k.new_empty((*new_k.shape[:2], capacity, new_k.shape[-1]))
        self._v = new_v.new_empty((*new_v.shape[:2], capacity, new_v.shape[-1]))
        if n:
            self._k[:, :, :n] = keys
            self._v[:, :, :n] = values
        self.keys, self.values = self._k[:, :, :n], self._v[:, :, :n]
        self._kv = (self.keys, self.values)


def decode_cache(model: Any, capacity: int) -> Optional[DynamicCache]:
    """The model's own ``DynamicCache`` with its plain layers as :class:`KVBuffer`; None (generate's
    default) for a model whose cache is another kind (encoder-decoder, ...)."""
    config = getattr(model, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False):
        return None
    cache = DynamicCache(config=config)
    if not cache.layers:
        return None
    cache.layers = [KVBuffer(capacity) if type(layer) is DynamicLayer else layer for layer in cache.layers]
    return cache


def _sdpa_gqa(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attention_mask: Optional[torch.Tensor], dropout: float = 0.0, scaling: Optional[float] = None,
              is_causal: Optional[bool] = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' SDPA attention, except a one-token step on CPU without autograd with grouped
    key/value heads: the kernel reads the shared heads (``enable_gqa``) instead of copies of them."""
    if (query.shape[2] == 1 and query.device.type == "cpu" and not torch.is_grad_enabled()
            and getattr(module, "num_key_value_groups", 1) > 1 and kwargs.get("position_bias") is None
            and kwargs.get("cache") is None and not kwargs.get("output_attentions", False)):
        # sdpa_attention_forward's own call for one query position: is_causal is False there.
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=False,
            enable_gqa=True)
        return out.transpose(1, 2).contiguous(), None
    return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                  is_causal=is_causal, **kwargs)


@contextmanager
def _gqa_decode_attention() -> Iterator[None]:
    """While generating: the "sdpa" attention is :func:`_sdpa_gqa` (the same outputs, bit for bit;
    it only acts without autograd, so a concurrent training forward is untouched either way)."""
    before = ALL_ATTENTION_FUNCTIONS["sdpa"]   # the public mapping: whatever "sdpa" means now
    ALL_ATTENTION_FUNCTIONS["sdpa"] = _sdpa_gqa
    try:
        yield
    finally:
        ALL_ATTENTION_FUNCTIONS["sdpa"] = before


class TransformersGenerator:
    """Samples with ``model.generate``; ``batch_size`` sequences (prompts × n) per call."""

    def __init__(self, model: Any, tokenizer: Any, *, batch_size: int = 64) -> None:
        if tokenizer.pad_token_id is None:
            raise ValueError("the tokenizer has no pad token: set tokenizer.pad_token (e.g. to its eos token)")
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.weight_version = 0
        self.stop_ids = set(stop_token_ids(tokenizer))
        # Benchmarks only (bench/grpo_vs_trl.py --forced-tokens): no stop token before this many new
        # tokens (transformers' min_new_tokens, as TRL is given it), so every completion has a fixed length.
        self.min_new_tokens = 0
        # Sharded weights (FSDP2, ZeRO-3) are gathered layer by layer inside every forward, a
        # collective: each process keeps stepping until all are done, or one would wait forever.
        self.sharded = is_sharded(model)
        self.synced = self.sharded and dist.is_initialized() and dist.get_world_size() > 1
        # The CPU decoding fast paths above (KVBuffer, enable_gqa attention, inference mode); off:
        # transformers' own path under no_grad.
        self.fast_decode = True

    # The learner's own model: syncing only counts versions.
    last_sync: Optional[SyncInfo] = None

    def sync_weights(self) -> bool:
        self.weight_version += 1
        return True

    def restore(self, version: int) -> None:
        self.weight_version = version   # the learner's own weights: nothing to load

    def close(self) -> None:
        """No threads or connections."""

    @torch.no_grad()
    def greedy(self, prompts: Sequence[list[int]], max_new_tokens: int, *, stop: tuple[str, ...] = (),
               repetition_penalty: float = 1.0) -> list[str]:
        return [r.text for r in self.greedy_rollouts(prompts, max_new_tokens, stop=stop,
                                                     repetition_penalty=repetition_penalty)]

    @torch.no_grad()
    def greedy_rollouts(self, prompts: Sequence[list[int]], max_new_tokens: int, *, stop: tuple[str, ...] = (),
                        repetition_penalty: float = 1.0) -> list[Rollout]:
        greedy = _Greedy(stop, repetition_penalty)
        out: list[Rollout] = []
        was_training = self.model.training
        self.model.eval()
        try:
            for start in range(0, len(prompts), self.batch_size):
                chunk = [list(p) for p in prompts[start:start + self.batch_size]]
                out += self._generate_chunk(chunk, greedy, max_new_tokens)
        finally:
            self.model.train(was_training)
        return out

    @torch.no_grad()
    def generate(self, prompts: Sequence[list[int]], params: SamplingParams) -> list[list[Rollout]]:
        if params.seed is not None:
            torch.manual_seed(params.seed)
        flat = [list(p) for p in prompts for _ in range(params.n)]
        rollouts: list[Rollout] = []
        was_training = self.model.training
        self.model.eval()
        try:
            for start in range(0, len(flat), self.batch_size):
                rollouts += self._generate_chunk(flat[start:start + self.batch_size], params, params.max_new_tokens)
        finally:
            self.model.train(was_training)
        return [rollouts[i * params.n:(i + 1) * params.n] for i in range(len(prompts))]

    def _generate_chunk(self, prompts: list[list[int]], params: "SamplingParams | _Greedy",
                        max_new_tokens: int) -> list[Rollout]:
        """Sampled with ``params``, or greedy."""
        device = next(self.model.parameters()).device
        pad = self.tokenizer.pad_token_id
        width = max(len(p) for p in prompts)
        # Left padding: every prompt ends at the same position, so new tokens line up.
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=device)
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
        sampling = (dict(do_sample=True, temperature=params.temperature, top_p=params.top_p, top_k=params.top_k or None,
                         min_p=params.min_p or None)
                    if isinstance(params, SamplingParams) else
                    dict(do_sample=False, temperature=None, top_p=None, top_k=None))
        if self.min_new_tokens:
            sampling.update(min_new_tokens=min(self.min_new_tokens, max_new_tokens))
        if params.stop:   # generation ends early there; the cut is made below
            sampling.update(stop_strings=list(params.stop), tokenizer=self.tokenizer)
        temperature = params.temperature if isinstance(params, SamplingParams) else 1.0
        logprobs = SampledLogprobs(temperature)
        processors = LogitsProcessorList([logprobs])
        if params.repetition_penalty != 1.0:   # after the log-probs are read: part of the behaviour policy
            processors.append(RepetitionPenaltyLogitsProcessor(penalty=params.repetition_penalty))
        fast = self.fast_decode and device.type == "cpu"
        if fast:
            cache = decode_cache(self.model, width + max_new_tokens)
            if cache is not None:
                sampling["past_key_values"] = cache
        # Inference mode skips autograd's per-op bookkeeping (~9 % of a step at 128 tokens here); not
        # with sharded weights, whose gathered copies may outlive the call and be trained through.
        with (torch.inference_mode() if fast and not self.sharded else nullcontext()), \
                (_gqa_decode_attention() if fast else nullcontext()):
            sequences = self.model.generate(
                input_ids=input_ids, attention_mask=attention, max_new_tokens=max_new_tokens, pad_token_id=pad,
                eos_token_id=sorted(self.stop_ids), synced_gpus=self.synced, repetition_penalty=1.0,
                logits_processor=processors, **sampling)
            new = sequences[:, width:].tolist()
            logp = logprobs.finish(sequences[:, width:]).tolist()   # [B, steps]
        return [self._rollout(prompt, new[row], logp[row], params.stop) for row, prompt in enumerate(prompts)]

    def _rollout(self, prompt: list[int], ids: list[int], logp: list[float], stop: Sequence[str]) -> Rollout:
        """The completion up to its first stop token or stop string (finish "stop"), else all of it."""
        end, reason = len(ids), "length"
        for i, tok in enumerate(ids):
            if tok in self.stop_ids:
                end, reason = i + 1, "stop"
                break
        ids = ids[:end]
        cut = cut_at_stop(self.tokenizer, ids, stop)
        if cut is not None:
            ids, reason = ids[:cut], "stop"
        return Rollout(prompt_ids=tuple(prompt), completion_ids=tuple(ids), logprobs=tuple(logp[:len(ids)]),
                       text=self.tokenizer.decode(ids, skip_special_tokens=True),
                       finish_reason=reason, weight_version=self.weight_version)
