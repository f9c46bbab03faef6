"""The transformers generator's CPU decoding fast paths change nothing that is sampled.

``TransformersGenerator`` decodes on CPU with a preallocated KV cache (``KVBuffer``) and lets
torch's SDPA kernel read grouped key/value heads itself (``enable_gqa``) instead of copies.
Both are speed only: with the same seed every token and every sampler log-prob is bit for bit
what transformers' own path (``fast_decode = False``) gives, prompts of different lengths
(a padding mask: the case where transformers copies the heads) and a stop token included.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch = pytest.importorskip("torch")
from engine_reference import chat_prompt, hf_logprobs  # noqa: E402


def _both(gen, prompts, params):
    gen.fast_decode = False
    slow = gen.generate(prompts, params)
    gen.fast_decode = True
    fast = gen.generate(prompts, params)
    return slow, fast


def test_fast_decoding_samples_the_same_tokens_and_logprobs(model_and_tokenizer, monkeypatch):
    from proctor.trainer.rollout import SamplingParams, TransformersGenerator
    from proctor.trainer.rollout import hf

    calls = {"buffer": 0, "gqa": 0}
    update, sdpa = hf.KVBuffer.update, hf._sdpa_gqa

    def counted_update(self, *a, **kw):
        calls["buffer"] += 1
        return update(self, *a, **kw)

    def counted_sdpa(module, query, *a, **kw):
        calls["gqa"] += query.shape[2] == 1
        return sdpa(module, query, *a, **kw)

    monkeypatch.setattr(hf.KVBuffer, "update", counted_update)
    monkeypatch.setattr(hf, "_sdpa_gqa", counted_sdpa)
    model, tok = model_and_tokenizer
    assert model.config.num_attention_heads > model.config.num_key_value_heads   # grouped heads: the GQA path
    gen = TransformersGenerator(model, tok)
    prompts = [chat_prompt(tok, "What is 2 + 3?"), chat_prompt(tok, "What is 117 - 48 + 9?"), chat_prompt(tok, "Hi")]
    assert len({len(p) for p in prompts}) == 3   # left padding, so an attention mask
    for params in (SamplingParams(n=3, max_new_tokens=40, temperature=0.8, seed=5),
                   SamplingParams(n=2, max_new_tokens=24, temperature=1.0, top_k=20, seed=9)):
        slow, fast = _both(gen, prompts, params)
        for gs, gf in zip(slow, fast):
            for a, b in zip(gs, gf):
                assert a.completion_ids == b.completion_ids and a.finish_reason == b.finish_reason
                assert a.logprobs == b.logprobs   # bit for bit
    assert calls["buffer"] > 0 and calls["gqa"] > 0   # the fast paths did run
    # and still the learner's log-probs
    r = fast[1][0]
    assert torch.allclose(hf_logprobs(model, r, 1.0), torch.tensor(r.logprobs), atol=1e-4)


def test_forced_lengths_and_greedy_agree_too(model_and_tokenizer):
    from proctor.trainer.rollout import SamplingParams, TransformersGenerator

    model, tok = model_and_tokenizer
    gen = TransformersGenerator(model, tok)
    gen.min_new_tokens = 30
    prompts = [chat_prompt(tok, "What is 6 - 2?"), chat_prompt(tok, "What is 13 * 7?")]
    slow, fast = _both(gen, prompts, SamplingParams(n=2, max_new_tokens=30, seed=2))
    assert all(len(r.completion_ids) == 30 for g in fast for r in g)
    assert [[r.completion_ids for r in g] for g in slow] == [[r.completion_ids for r in g] for g in fast]
    gen.min_new_tokens = 0
    gen.fast_decode = False
    slow = gen.greedy(prompts, 20)
    gen.fast_decode = True
    assert gen.greedy(prompts, 20) == slow


def test_kv_buffer_returns_what_concatenation_would_and_grows():
    from transformers.cache_utils import DynamicLayer

    from proctor.trainer.rollout.hf import KVBuffer

    torch.manual_seed(0)
    plain, buffered = DynamicLayer(), KVBuffer(capacity=5)
    for m in (3, 1, 1, 4, 1):   # 3 + 1 + 1 fills the buffer; 4 more doubles it
        k, v = torch.randn(2, 2, m, 4), torch.randn(2, 2, m, 4)
        a, b = plain.update(k, v), buffered.update(k, v)
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        assert buffered.get_seq_length() == plain.get_seq_length()
    assert buffered._k.shape[-2] == 10
    buffered.crop(-2)   # replaced from outside: adopted at the next update
    plain.crop(-2)
    k, v = torch.randn(2, 2, 1, 4), torch.randn(2, 2, 1, 4)
    a, b = plain.update(k, v), buffered.update(k, v)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and buffered.get_seq_length() == 9
    buffered.reset()
    assert buffered.get_seq_length() == 0
    assert buffered.update(k, v)[0].shape[-2] == 1


def test_generation_leaves_training_as_it_was(model_and_tokenizer):
    """The attention override ends with the call, and nothing made in inference mode reaches a
    training forward and backward afterwards (the learner shares the model)."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    from proctor.trainer.rollout import SamplingParams, TransformersGenerator

    model, tok = model_and_tokenizer
    before = ALL_ATTENTION_FUNCTIONS["sdpa"]
    gen = TransformersGenerator(model, tok)
    r = gen.generate([chat_prompt(tok, "Hi")], SamplingParams(n=1, max_new_tokens=3))[0][0]
    assert ALL_ATTENTION_FUNCTIONS["sdpa"] is before
    assert isinstance(r.logprobs, tuple) and all(isinstance(x, float) for x in r.logprobs)
    ids = torch.tensor([list(r.prompt_ids) + list(r.completion_ids)])
    model.train()
    try:
        model(ids, labels=ids).loss.backward()
        assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
    finally:
        model.zero_grad(set_to_none=True)
        model.eval()
