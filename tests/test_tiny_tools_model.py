"""The tool-using tiny model ("tiny-tools:STEPS"): its corpus's tool episodes are what its chat template
renders, no held-out question is in them, and the default tiny model (the main job's) is unchanged:
the same corpus, template and cache keys as before tool examples existed."""

from __future__ import annotations

import hashlib
import json

import pytest

from proctor.tiny_model import (CHATML_TEMPLATE, EOS_TOKEN, HELDOUT_FRACTION, _cache_entry, synthetic_corpus,
                                tiny_model_path, tiny_spec)
from proctor.tiny_tools import TOOLS_CHAT_TEMPLATE, tool_pairs, tools_prompt

# Measured at the commit before tool examples (bcea1f7): a change here changes the main job's model.
DEFAULT_CORPUS_SHA256 = "6c3fda84b884741a975a437153e18f355282f582081e2d6b730633dfbef16e7d"
CHATML_SHA256 = "5958bf5c3ae31d278e5e65f37ea7119df04b5d56564d8fd802a8c6692567db17"


def test_the_default_tiny_model_is_unchanged():
    corpus = synthetic_corpus(0)
    assert len(corpus) == 20008
    assert hashlib.sha256(json.dumps(corpus).encode()).hexdigest() == DEFAULT_CORPUS_SHA256
    assert hashlib.sha256(CHATML_TEMPLATE.encode()).hexdigest() == CHATML_SHA256
    # the cache keys of models built before tool_examples existed still find them
    assert _cache_entry(None, {"pretrain_steps": 3000}).name == "tiny-model-d6cc55352ba9f862"
    assert _cache_entry(None, {"pretrain_steps": 0}).name == "tiny-model-2407ab06db53d6a8"
    assert _cache_entry(None, {"pretrain_steps": 0, "tool_examples": False}).name == "tiny-model-2407ab06db53d6a8"
    assert _cache_entry(None, {"pretrain_steps": 0, "tool_examples": True}).name != "tiny-model-2407ab06db53d6a8"
    assert synthetic_corpus(0, tool_examples=True)[:len(corpus)] == corpus


def test_model_specs():
    assert tiny_spec("tiny") == {"pretrain_steps": 800} and tiny_spec("tiny:30") == {"pretrain_steps": 30}
    assert tiny_spec("tiny-tools:30") == {"pretrain_steps": 30, "tool_examples": True}
    assert tiny_spec("Qwen/Qwen2.5-0.5B") is None and tiny_spec("./tiny-dir") is None
    with pytest.raises(ValueError, match="tiny-tools:STEPS with STEPS a whole number"):
        tiny_spec("tiny-tools:many")


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_path(pretrain_steps=0))
    tok.chat_template = TOOLS_CHAT_TEMPLATE
    return tok


def test_tools_template_is_chatml_without_tools(tok):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"},
                {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3 + 3?"}]
    for generation_prompt in (True, False):
        assert (tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)
                == tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt,
                                           chat_template=CHATML_TEMPLATE))


def test_corpus_tool_episodes_are_the_templates_rendering(tok):
    from proctor.envs.tools import PythonTool

    tools = [PythonTool().schema()]
    pairs = tool_pairs(0, HELDOUT_FRACTION, EOS_TOKEN, n=50)
    calls = [i for i, (_, reply) in enumerate(pairs) if reply.startswith("<tool_call>")]
    assert calls and len(pairs) == 2 * 50                   # the first reply, and the answer after a result
    assert all(pairs[i + 1][0].startswith(pairs[i][0]) for i in range(0, 100, 2))
    i = calls[0]
    (prompt, call), (after, answer) = pairs[i], pairs[i + 1]
    question = prompt.split("<|im_start|>user\n")[1].split(EOS_TOKEN)[0]
    user = [{"role": "user", "content": question}]
    assert prompt == tools_prompt(question) == tok.apply_chat_template(user, tools=tools, tokenize=False,
                                                                        add_generation_prompt=True)
    code = question.removeprefix("What is ").removesuffix("?")
    result = answer.removesuffix(f"{EOS_TOKEN}\n")
    assert str(eval(code)) == result   # noqa: S307 - the corpus's own arithmetic
    episode = user + [{"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "python", "arguments": {"code": code}}}]},
        {"role": "tool", "name": "python", "content": result}]
    assert after == tok.apply_chat_template(episode, tools=tools, tokenize=False, add_generation_prompt=True)
    assert after.startswith(prompt + call.removesuffix("\n"))


def test_no_held_out_question_is_in_the_tool_corpus():
    from proctor.envs.core.splits import in_eval_partition
    from proctor.envs.procedural.arithmetic import question_key

    pairs = tool_pairs(0, HELDOUT_FRACTION, EOS_TOKEN, n=300)
    questions = {p.split("<|im_start|>user\nWhat is ")[1].split("?")[0] for p, _ in pairs}
    assert len(questions) == 300
    assert not any(in_eval_partition(question_key(q), HELDOUT_FRACTION) for q in questions)


def test_the_corpus_calls_the_tool_on_a_quarter_of_the_questions():
    """Recipe 3: a quarter of the first replies are a call (at a half, greedy decoding called on 92 % of
    held-out questions and the demo had little left to learn); every question teaches the copy."""
    from proctor.tiny_tools import DIRECT_SHARE

    pairs = tool_pairs(0, HELDOUT_FRACTION, EOS_TOKEN, n=2000)
    first = [reply for prompt, reply in pairs if "<|im_start|>tool" not in prompt]   # no result yet
    calls = sum(reply.startswith("<tool_call>") for reply in first)
    assert DIRECT_SHARE == 0.75 and len(first) == 2000
    assert 0.22 < calls / len(first) < 0.28, calls / len(first)
    assert len(pairs) - len(first) == 2000   # the copy after a result, on every question
