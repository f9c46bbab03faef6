"""Rollout backends behind one ``Generator`` protocol: transformers (the learner's own model),
vLLM in this process (``vllm_colocated``) and ``proctor serve`` engines (``vllm_server``);
``factory.make_generator`` builds the one a run config names."""

from .base import Generator, Rollout, SamplingParams, Snapshot, SyncInfo
from .hf import TransformersGenerator

__all__ = ["Generator", "Rollout", "SamplingParams", "Snapshot", "SyncInfo", "TransformersGenerator"]
