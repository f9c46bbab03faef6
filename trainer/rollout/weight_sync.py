"""When the rollout engine gets the learner's weights: decided here, and only here.

A rule of optimizer steps, the unit ``rollout.vllm.sync_every`` is documented in:

    the weights reach the engine at the end of the generation batch in which a multiple of
    ``every`` optimizer steps was reached (a batch of ``steps_per_generation`` steps samples
    from one set of weights, so never in the middle of one)

With one step per generation that is every ``every``-th step; with ``every`` = 1, after every
generation batch. The rule is a function of the step alone, so it needs no counter and holds
across a resume. The engines themselves push whenever they are told to (``sync_weights``).
"""

from __future__ import annotations

from typing import Any


def sync_due(step: int, every: int = 1, steps_per_generation: int = 1) -> bool:
    """Whether the engine gets the weights after optimizer step ``step`` (1-based)."""
    if every < 1 or steps_per_generation < 1:
        raise ValueError(f"sync_due: every and steps_per_generation must be >= 1 (got {every}, {steps_per_generation})")
    if step % steps_per_generation:
        return False   # later steps of this generation batch still learn from it
    previous_end = step - steps_per_generation
    return step // every > previous_end // every


def sync_every(rollout: Any) -> int:
    """Optimizer steps between pushes: ``rollout.vllm.sync_every`` for the vLLM backends; 1 for
    transformers, which samples from the learner's own weights (its sync only counts versions)."""
    return 1 if rollout.backend == "transformers" else rollout.vllm.sync_every


__all__ = ["sync_due", "sync_every"]
