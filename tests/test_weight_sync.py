"""When the engine gets the learner's weights (trainer/rollout/weight_sync.py): optimizer steps, never
mid-generation, the same after a resume; and the trainer is the one that decides."""

from __future__ import annotations

import pytest

from proctor.trainer.rollout.weight_sync import sync_due


def test_one_step_per_generation_syncs_every_k_steps():
    assert [s for s in range(1, 13) if sync_due(s, every=1)] == list(range(1, 13))
    assert [s for s in range(1, 13) if sync_due(s, every=3)] == [3, 6, 9, 12]


def test_generation_batches_sync_at_their_end_counting_optimizer_steps():
    # 3 steps per generation batch: the weights change only between batches.
    assert [s for s in range(1, 13) if sync_due(s, every=1, steps_per_generation=3)] == [3, 6, 9, 12]
    # sync_every counts optimizer steps (as documented), not generations: every 4 steps means
    # the end of the batch in which step 4, 8, 12 fell.
    assert [s for s in range(1, 19) if sync_due(s, every=4, steps_per_generation=3)] == [6, 9, 12, 18]
    # every 6 steps with 3-step batches: every second batch (a generation counter would give every
    # sixth batch: 18 steps).
    assert [s for s in range(1, 19) if sync_due(s, every=6, steps_per_generation=3)] == [6, 12, 18]


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="every and steps_per_generation"):
        sync_due(3, every=0)


def test_engines_push_when_told_and_only_the_trainer_counts():
    """No backend keeps a counter of its own: sync_weights pushes every time it is called."""
    import inspect

    from proctor.trainer.rollout import base, hf, vllm_colocated, vllm_server

    assert list(inspect.signature(base.Generator.sync_weights).parameters) == ["self"]
    for module in (hf, vllm_colocated, vllm_server):
        source = inspect.getsource(module)
        assert "sync_every" not in source and "_steps_since_sync" not in source, module.__name__


def test_the_generator_protocol_lists_what_every_backend_does_and_no_stubs():
    """Seven members every backend really implements; what only engines with weights of their
    own do (the async pipeline's snapshot/apply, a colocated engine's sleep) is apart."""
    from proctor.trainer.rollout.base import Generator, Sleeper, WeightTransfer
    from proctor.trainer.rollout.hf import TransformersGenerator

    members = {n for n in vars(Generator) if not n.startswith("_")}
    assert members == {"weight_version", "last_sync", "generate", "greedy_rollouts", "sync_weights", "restore", "close"}
    extra = {n for proto in (Sleeper, WeightTransfer) for n in vars(proto) if not n.startswith("_")} - members
    assert extra == {"snapshot", "apply", "sleep", "wake_up", "sync_and_wake"}
    assert not extra & set(vars(TransformersGenerator))   # the learner's own model: nothing to stub


def test_a_transformers_engine_neither_transfers_nor_sleeps(tmp_path, model_and_tokenizer):
    from proctor.trainer.config import GRPOConfig
    from proctor.trainer.rollout.factory import make_engine

    model, tok = model_and_tokenizer
    engine = make_engine(GRPOConfig.from_flat().rollout, model, tok, tmp_path)
    try:
        assert engine.transfer is None and engine.sleeper is None and engine.generator.weight_version == 0
    finally:
        engine.close()
