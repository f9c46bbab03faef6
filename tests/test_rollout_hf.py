"""The transformers rollout backend: grouping, stop handling, log-probs the learner agrees with."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch = pytest.importorskip("torch")
from engine_reference import chat_prompt, hf_logprobs  # noqa: E402


def test_groups_in_prompt_order_with_sampler_logprobs(model_and_tokenizer):
    from proctor.trainer.rollout import SamplingParams, TransformersGenerator

    model, tok = model_and_tokenizer
    gen = TransformersGenerator(model, tok, batch_size=4)
    prompts = [chat_prompt(tok, "What is 2 + 3?"), chat_prompt(tok, "What is 10 - 4?")]
    groups = gen.generate(prompts, SamplingParams(n=3, max_new_tokens=6, temperature=0.7, seed=1))
    assert [len(g) for g in groups] == [3, 3]
    for prompt, group in zip(prompts, groups):
        for r in group:
            assert list(r.prompt_ids) == prompt and len(r.logprobs) == len(r.completion_ids) <= 6
            assert r.finish_reason in ("stop", "length") and (r.truncated == (r.finish_reason == "length"))
            # The learner's log-probs of the same tokens at the same temperature agree.
            assert torch.allclose(hf_logprobs(model, r, 0.7), torch.tensor(r.logprobs), atol=1e-4)


def test_seed_makes_sampling_reproducible_and_version_counts_syncs(model_and_tokenizer):
    from proctor.trainer.rollout import SamplingParams, TransformersGenerator

    model, tok = model_and_tokenizer
    gen = TransformersGenerator(model, tok)
    p = [chat_prompt(tok, "What is 7 + 1?")]
    a = gen.generate(p, SamplingParams(n=2, max_new_tokens=5, seed=3))
    b = gen.generate(p, SamplingParams(n=2, max_new_tokens=5, seed=3))
    assert [r.completion_ids for r in a[0]] == [r.completion_ids for r in b[0]]
    gen.sync_weights()
    assert gen.generate(p, SamplingParams(n=1, max_new_tokens=2))[0][0].weight_version == 1


def test_stop_token_ends_a_completion(model_and_tokenizer):
    from proctor.trainer.rollout import SamplingParams, TransformersGenerator

    model, tok = model_and_tokenizer
    gen = TransformersGenerator(model, tok)
    with torch.no_grad():
        # Make the end-of-turn token overwhelmingly likely: every completion is one token, "stop".
        head = model.get_output_embeddings()
        saved = head.weight.data.clone()
        head.weight.data[tok.eos_token_id] *= 0
        bias = torch.zeros(head.weight.shape[0])
        bias[tok.eos_token_id] = 1e4
        handle = head.register_forward_hook(lambda m, i, o: o + bias)
    try:
        group = gen.generate([chat_prompt(tok, "Hi")], SamplingParams(n=2, max_new_tokens=5))[0]
    finally:
        handle.remove()
        head.weight.data.copy_(saved)
    assert all(r.finish_reason == "stop" and r.completion_ids == (tok.eos_token_id,) and r.text == "" for r in group)


def test_bad_sampling_params_name_the_field():
    from proctor.trainer.rollout import SamplingParams

    for kwargs, field in (({"n": 0}, "n"), ({"temperature": 0}, "temperature"), ({"top_p": 0}, "top_p")):
        with pytest.raises(ValueError, match=field):
            SamplingParams(**kwargs)
