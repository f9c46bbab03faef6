"""Rollouts with `transformers` `generate`: batched, on CPU or GPU, sharing the learner's model.

Sharing the model object means there is nothing to sync: the next call samples from
the weights the optimizer just wrote; ``weight_version`` still counts the syncs so
every rollout says which weights made it. A sharded model (FSDP2, ZeRO-3) gathers each
layer in its forward; every process then generates in lockstep (``synced_gpus``).

Memory: the sampler's log-prob of each generated token is kept as one float per token
(:class:`SampledLogprobs`); no step's logits outlive the next step, so generation memory
does not grow with steps x vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

import torch
import torch.distributed as dist

from transformers import LogitsProcessor, LogitsProcessorList, RepetitionPenaltyLogitsProcessor

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
        if params.stop:   # generation ends early there; the cut is made below
            sampling.update(stop_strings=list(params.stop), tokenizer=self.tokenizer)
        temperature = params.temperature if isinstance(params, SamplingParams) else 1.0
        logprobs = SampledLogprobs(temperature)
        processors = LogitsProcessorList([logprobs])
        if params.repetition_penalty != 1.0:   # after the log-probs are read: part of the behaviour policy
            processors.append(RepetitionPenaltyLogitsProcessor(penalty=params.repetition_penalty))
        out = self.model.generate(
            input_ids=input_ids, attention_mask=attention, max_new_tokens=max_new_tokens, pad_token_id=pad,
            eos_token_id=sorted(self.stop_ids), return_dict_in_generate=True, synced_gpus=self.synced,
            repetition_penalty=1.0, logits_processor=processors, **sampling)
        new = out.sequences[:, width:]
        logp = logprobs.finish(new)   # [B, steps]
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
