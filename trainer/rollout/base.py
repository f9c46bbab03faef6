"""The generator interface every rollout backend implements (transformers, vLLM in-process, vLLM servers).

A backend turns prompts into G sampled completions each, token in / token out:
the learner trains on exactly the token ids that were sampled (no re-tokenization
drift), with the sampler's log-probs kept for importance-sampling corrections.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Protocol, Sequence, runtime_checkable

from ..sampling_params import GENERATION_KWARGS, SamplingParams, check_logprobs_mode, logprobs_mode  # noqa: F401 (re-exported)

FinishReason = Literal["stop", "length"]


def cut_at_stop(tokenizer: Any, ids: list[int], stop: Sequence[str]) -> Optional[int]:
    """The length of ``ids`` up to the token whose text completes the first stop string, or None."""
    if not stop or not any(s in tokenizer.decode(ids, skip_special_tokens=True) for s in stop):
        return None
    for end in range(1, len(ids) + 1):   # the shortest prefix whose text holds a stop string
        text = tokenizer.decode(ids[:end], skip_special_tokens=True)
        if any(s in text for s in stop):
            return end
    return None


@dataclass(frozen=True)
class Rollout:
    """One sampled completion, as token ids, with what the learner needs to train on it."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]      # includes the stop token when it stopped
    logprobs: tuple[float, ...]          # sampler's log-prob of each completion token (temperature-scaled)
    text: str                            # decoded completion, special tokens dropped
    finish_reason: FinishReason
    weight_version: int = 0              # which weights sampled it (never silently stale)
    extra: dict = field(default_factory=dict)
    # Multi-turn: 1 for tokens the model sampled, 0 for tokens the env inserted (feedback,
    # tool results), which are context, not actions; empty means all sampled.
    learn_mask: tuple[int, ...] = ()

    def learned(self) -> tuple[int, ...]:
        return self.learn_mask or (1,) * len(self.completion_ids)

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"


def stop_token_ids(tokenizer: Any) -> list[int]:
    """The ids that end a completion: the tokenizer's eos id, or its list of them."""
    eos = tokenizer.eos_token_id
    return [eos] if isinstance(eos, int) else list(eos or [])


@dataclass(frozen=True)
class Snapshot:
    """The learner's policy at one moment, in the form a backend loads it.

    ``kind``: "full" (every weight) or "lora" (the adapter only)."""

    kind: Literal["full", "lora"]
    payload: Any = None                 # named tensors, or serialized buckets for a server
    config: Optional[dict] = None       # the adapter's config for "lora"


@dataclass(frozen=True)
class SyncInfo:
    """What the last weight push moved."""

    bytes: float
    buckets: int
    seconds: float


@runtime_checkable
class Generator(Protocol):
    """A rollout backend: every method the trainer, its evaluation and its checkpoints call.
    Engines that hold weights of their own also serve the async pipeline (``WeightTransfer``);
    one on the learner's GPU can free its memory for the update (``Sleeper``)."""

    @property
    def weight_version(self) -> int:
        """The version of the weights the next rollouts are sampled with."""
        ...

    @property
    def last_sync(self) -> Optional[SyncInfo]:
        """The last push's size and time; None when nothing was pushed (shared weights)."""
        ...

    def generate(self, prompts: Sequence[list[int]], params: SamplingParams) -> list[list[Rollout]]:
        """``params.n`` rollouts for each tokenized prompt, grouped by prompt, in prompt order."""
        ...

    def greedy_rollouts(self, prompts: Sequence[list[int]], max_new_tokens: int, *, stop: tuple[str, ...] = (),
                        repetition_penalty: float = 1.0) -> list[Rollout]:
        """One greedy completion per prompt (evaluation: its tokens count in the ledger), ended by the
        stop tokens or ``stop`` strings (cut there, as sampled completions are), under
        ``repetition_penalty``."""
        ...

    def sync_weights(self) -> bool:
        """Make the next rollouts come from the learner's current weights, now; True when it
        pushed (the trainer alone decides when: ``trainer/rollout/weight_sync.py``)."""
        ...

    def restore(self, version: int) -> None:
        """After a resume: load the restored learner's weights and call them ``version``."""
        ...

    def close(self) -> None:
        """Release threads and connections (not a server the run started: its owner stops it)."""
        ...


class WeightTransfer(Protocol):
    """An engine with weights of its own (vLLM): what the async pipeline needs to take the
    learner's weights on its thread and load them later, in order."""

    @property
    def weight_version(self) -> int:
        ...

    def snapshot(self) -> Snapshot:
        """The learner's policy now, safe to ``apply`` after the learner has moved on."""
        ...

    def apply(self, snapshot: Snapshot, version: Optional[int] = None) -> int:
        """Load a snapshot (as ``version``, default the next one); returns the version."""
        ...


class Sleeper(Protocol):
    """An engine on the learner's GPU (colocated vLLM) that frees its memory for the update."""

    def sleep(self) -> None:
        """Free the engine's accelerator memory for the update."""
        ...

    def wake_up(self) -> None:
        """Take back what ``sleep`` freed (the weights unchanged)."""
        ...

    def sync_and_wake(self) -> bool:
        """After a sleeping update: wake, load the new weights, then the cache; True when synced."""
        ...
