"""The generator interface every rollout backend implements (transformers, vLLM in-process, vLLM servers).

A backend turns prompts into G sampled completions each, token in / token out:
the learner trains on exactly the token ids that were sampled (no re-tokenization
drift), with the sampler's log-probs kept for importance-sampling corrections.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal, Mapping, Optional, Protocol, Sequence, runtime_checkable

FinishReason = Literal["stop", "length"]


# The generation_kwargs every backend takes (``SamplingParams.with_kwargs``); anything else is refused.
GENERATION_KWARGS = ("top_p", "top_k", "min_p", "repetition_penalty", "stop")


@dataclass(frozen=True)
class SamplingParams:
    """How completions are sampled. ``temperature`` also scales the learner's log-probs.

    ``top_p``, ``top_k``, ``min_p`` and ``repetition_penalty`` change which token is drawn,
    never the log-probs a backend reports: those are of the full softmax at ``temperature``,
    the distribution the learner scores (README, "Generation knobs")."""

    n: int = 8                      # completions per prompt (G)
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0                  # 0: off
    max_new_tokens: int = 256
    seed: Optional[int] = None
    min_p: float = 0.0              # 0: off
    repetition_penalty: float = 1.0  # 1: off
    stop: tuple[str, ...] = ()      # a completion ends after the token that completes one of these

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"SamplingParams.n (completions per prompt) must be >= 1, got {self.n}")
        if not self.temperature > 0:
            raise ValueError(f"SamplingParams.temperature must be > 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"SamplingParams.top_k must be >= 0 (0: off), got {self.top_k}")
        if not 0 <= self.min_p < 1:
            raise ValueError(f"SamplingParams.min_p must be in [0, 1), got {self.min_p}")
        if not self.repetition_penalty > 0:
            raise ValueError(f"SamplingParams.repetition_penalty must be > 0 (1: off), got {self.repetition_penalty}")
        if not all(isinstance(s, str) and s for s in self.stop):
            raise ValueError(f"SamplingParams.stop must be non-empty strings, got {self.stop!r}")
        if self.max_new_tokens < 1:
            raise ValueError(f"SamplingParams.max_new_tokens must be >= 1, got {self.max_new_tokens}")

    @property
    def filters(self) -> bool:
        """True when something besides the temperature shapes the distribution sampled from."""
        return self.top_p < 1 or self.top_k > 0 or self.min_p > 0 or self.repetition_penalty != 1

    def with_kwargs(self, kwargs: Mapping[str, Any], backend: str) -> "SamplingParams":
        """These params with ``generation_kwargs`` applied over them; an unknown key is refused."""
        unknown = sorted(set(kwargs) - set(GENERATION_KWARGS))
        if unknown:
            raise ValueError(f"rollout.generation_kwargs: {', '.join(map(repr, unknown))} is not supported by the "
                             f"{backend} backend (supported on every backend: {', '.join(GENERATION_KWARGS)})")
        given = dict(kwargs)
        if "stop" in given:
            stop = given["stop"]
            given["stop"] = (stop,) if isinstance(stop, str) else tuple(stop or ())
        try:
            return replace(self, **given)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"rollout.generation_kwargs for the {backend} backend: {exc}") from None


def logprobs_mode(params: SamplingParams) -> Literal["raw_logprobs", "processed_logprobs"]:
    """The vLLM ``logprobs_mode`` whose log-probs are the learner's (full softmax at the temperature).

    vLLM's "raw_logprobs" are of the raw logits (temperature 1, before penalties and filters);
    "processed_logprobs" are after the temperature but also after penalties, min_p, top_k and
    top_p (renormalised over what is kept). With a temperature other than 1 and a filter on,
    neither is the learner's distribution, and the mismatch could not be measured: refused."""
    if params.temperature == 1.0:
        return "raw_logprobs"
    if params.filters:
        raise ValueError(
            f"vLLM cannot report log-probs of the unfiltered softmax at temperature {params.temperature} while "
            "top_p/top_k/min_p/repetition_penalty filter (its processed log-probs are of the filtered distribution, "
            "the learner scores the unfiltered one, so the sampler/learner mismatch would be misreported): use "
            "rollout.temperature 1.0 with the filters, drop the filters, or use rollout.backend transformers")
    return "processed_logprobs"


def check_logprobs_mode(mode: str, params: SamplingParams, where: str) -> None:
    """Refuse to sample with ``params`` from an engine whose log-probs would not be the learner's."""
    need = logprobs_mode(params)
    if mode != need and (params.temperature != 1.0 or params.filters):
        raise ValueError(f"{where} runs with vLLM logprobs_mode {mode}, but temperature {params.temperature} with "
                         f"top_p={params.top_p}, top_k={params.top_k}, min_p={params.min_p}, repetition_penalty="
                         f"{params.repetition_penalty} needs {need} for the sampler's log-probs to be the learner's "
                         f"distribution: start it with logprobs_mode={need} (proctor serve --logprobs-mode {need})")


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

    ``kind``: "full" (every weight), "lora" (the adapter only), or "shared" (the backend
    samples with the learner's own model object, so there is nothing to copy)."""

    kind: Literal["full", "lora", "shared"]
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
    """A rollout backend: every method the trainer, its pipeline and its checkpoints call."""

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

    def greedy(self, prompts: Sequence[list[int]], max_new_tokens: int, *, stop: tuple[str, ...] = (),
               repetition_penalty: float = 1.0) -> list[str]:
        """One greedy completion per prompt, as text (evaluation), ended by the stop tokens or
        ``stop`` strings (cut there, as sampled completions are), under ``repetition_penalty``."""
        ...

    def sync_weights(self, force: bool = False) -> bool:
        """Make the next rollouts come from the learner's current weights (a backend may
        sync only every k calls unless ``force``); True when it synced."""
        ...

    def snapshot(self) -> Snapshot:
        """The learner's policy now, safe to ``apply`` after the learner has moved on."""
        ...

    def apply(self, snapshot: Snapshot, version: Optional[int] = None) -> int:
        """Load a snapshot (as ``version``, default the next one); returns the version."""
        ...

    def restore(self, version: int) -> None:
        """After a resume: load the restored learner's weights and call them ``version``."""
        ...

    def sleep(self) -> None:
        """Free the engine's accelerator memory for the update (a no-op where nothing is held)."""
        ...

    def wake_up(self) -> None:
        """Take back what ``sleep`` freed."""
        ...

    def sync_and_wake(self) -> bool:
        """After a sleeping update: wake, load the new weights, then the cache; True when synced."""
        ...

    def close(self) -> None:
        """Release threads and connections (not a server the run started: its owner stops it)."""
        ...
