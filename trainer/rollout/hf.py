"""Rollouts with `transformers` `generate`: batched, on CPU or GPU, sharing the learner's model.

Sharing the model object means there is nothing to sync: the next call samples from
the weights the optimizer just wrote; ``weight_version`` still counts the syncs so
every rollout says which weights made it. A sharded model (FSDP2, ZeRO-3) gathers each
layer in its forward; every process then generates in lockstep (``synced_gpus``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch
import torch.distributed as dist

from .base import Rollout, SamplingParams, Snapshot, SyncInfo, cut_at_stop, stop_token_ids
from .weights import is_sharded


@dataclass(frozen=True)
class _Greedy:
    """Greedy decoding's settings: what of SamplingParams can change an argmax answer."""

    stop: tuple[str, ...] = ()
    repetition_penalty: float = 1.0


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
        # Sharded weights (FSDP2, ZeRO-3) are gathered layer by layer inside every forward, a
        # collective: each process keeps stepping until all are done, or one would wait forever.
        self.synced = is_sharded(model) and dist.is_initialized() and dist.get_world_size() > 1

    # The learner's own model: every weight method only counts versions.
    last_sync: Optional[SyncInfo] = None

    def sync_weights(self, force: bool = False) -> bool:
        self.weight_version += 1
        return True

    def snapshot(self) -> Snapshot:
        return Snapshot("shared")

    def apply(self, snapshot: Snapshot, version: Optional[int] = None) -> int:
        self.weight_version = self.weight_version + 1 if version is None else version
        return self.weight_version

    def restore(self, version: int) -> None:
        self.weight_version = version   # the learner's own weights: nothing to load

    def sleep(self) -> None:
        """Nothing to free: the learner's model is the sampler."""

    def wake_up(self) -> None:
        """Nothing was freed."""

    def sync_and_wake(self) -> bool:
        return self.sync_weights()

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
                         min_p=params.min_p or None, repetition_penalty=params.repetition_penalty)
                    if isinstance(params, SamplingParams) else
                    dict(do_sample=False, temperature=None, top_p=None, top_k=None,
                         repetition_penalty=params.repetition_penalty))
        if params.stop:   # generation ends early there; the cut is made below
            sampling.update(stop_strings=list(params.stop), tokenizer=self.tokenizer)
        out = self.model.generate(
            input_ids=input_ids, attention_mask=attention, max_new_tokens=max_new_tokens, pad_token_id=pad,
            eos_token_id=sorted(self.stop_ids), return_dict_in_generate=True, output_logits=True,
            synced_gpus=self.synced, **sampling)
        temperature = params.temperature if isinstance(params, SamplingParams) else 1.0
        new = out.sequences[:, width:]
        # Raw logits / temperature: the distribution the learner's log-probs use too (``output_logits``
        # are before the repetition penalty and the top_k/top_p/min_p warpers).
        logits = torch.stack(out.logits, dim=1)[:, :new.shape[1]].float() / temperature
        logp = torch.log_softmax(logits, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
        return [self._rollout(prompt, new[row].tolist(), logp[row], params.stop) for row, prompt in enumerate(prompts)]

    def _rollout(self, prompt: list[int], ids: list[int], logp: torch.Tensor, stop: Sequence[str]) -> Rollout:
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
        return Rollout(prompt_ids=tuple(prompt), completion_ids=tuple(ids), logprobs=tuple(logp[:len(ids)].tolist()),
                       text=self.tokenizer.decode(ids, skip_special_tokens=True),
                       finish_reason=reason, weight_version=self.weight_version)
