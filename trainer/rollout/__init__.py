"""Rollout backends behind one interface: transformers here; vLLM in its own issue."""

from .base import Generator, Rollout, SamplingParams
from .hf import TransformersGenerator

__all__ = ["Generator", "Rollout", "SamplingParams", "TransformersGenerator"]
