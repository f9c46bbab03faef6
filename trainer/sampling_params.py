"""How completions are sampled (``SamplingParams``) and which vLLM log-probs match the learner.

Torch-free, so validating a run config (``proctor.trainer.config``) checks
``rollout.generation_kwargs`` without loading torch or a backend; ``proctor.trainer.rollout``
re-exports these names.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal, Mapping, Optional

# The generation_kwargs every backend takes (``SamplingParams.with_kwargs``); anything else is refused.
GENERATION_KWARGS = ("top_p", "top_k", "min_p", "repetition_penalty", "stop")


@dataclass(frozen=True)
class SamplingParams:
    """How completions are sampled. ``temperature`` also scales the learner's log-probs.

    ``top_p``, ``top_k``, ``min_p`` and ``repetition_penalty`` change which token is drawn,
    never the log-probs a backend reports: those are of the full softmax at ``temperature``,
    the distribution the learner scores (docs/training.md, "Batches, generation, prompts, rewards")."""

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


__all__ = ["GENERATION_KWARGS", "SamplingParams", "check_logprobs_mode", "logprobs_mode"]
