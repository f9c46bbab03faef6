"""Rollout backends behind one ``Generator`` protocol: transformers (the learner's own model),
vLLM in this process (``vllm_colocated``) and ``proctor serve`` engines (``vllm_server``);
``factory.make_engine`` builds the one a run config names (with what else it can do:
the async pipeline's ``WeightTransfer``, a colocated engine's ``Sleeper``)."""

from .base import Generator, Rollout, SamplingParams, Snapshot, SyncInfo
from .hf import TransformersGenerator

__all__ = ["Generator", "Rollout", "SamplingParams", "Snapshot", "SyncInfo", "TransformersGenerator"]
