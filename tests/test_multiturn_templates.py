"""Multi-turn episodes are the chat template's rendering of the conversation, token for token.

Published templates (tests/data/chat_templates, see its NOTICE) on the project's tiny
tokenizer, with a scripted generator whose replies are known ids: the episode (prompt ids +
completion ids) must be the template's tokens of the whole conversation, with no second
system prompt or BOS where a feedback turn begins, and the sampled ids kept as sampled."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
pytest.importorskip("transformers")

from proctor.envs import EnvSuite, ListSource, SuiteItem, Task, VerifiableEnv, Verdict, Verifier  # noqa: E402
from proctor.trainer.rollout.multiturn import ChatTurns, TemplateSplitError, continue_turns  # noqa: E402
from proctor.trainer.rollout import Rollout, SamplingParams  # noqa: E402

TEMPLATES = Path(__file__).parent / "data" / "chat_templates"


@dataclass(frozen=True)
class Style:
    file: str
    eot: str                                  # the token a reply ends with (the model's end of turn)
    added: tuple[str, ...] = ()               # special tokens the template names
    bos: str | None = None
    eos: str | None = None
    lead: str = ""                            # what a reply starts with (Mixtral's space after [/INST])
    once: tuple[str, ...] = field(default=())  # text the conversation must hold exactly once


STYLES = {
    "qwen2_5": Style("qwen2_5.jinja", "<|im_end|>", once=(
        "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.", "<|im_start|>system")),
    "llama3_1": Style("llama3_1.jinja", "<|eot_id|>", ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
                      bos="<|begin_of_text|>",
                      once=("<|begin_of_text|>", "Cutting Knowledge Date", "system<|end_header_id|>")),
    "gemma": Style("gemma.jinja", "<end_of_turn>", ("<start_of_turn>", "<end_of_turn>"), bos="<bos>", once=("<bos>",)),
    "mixtral": Style("mixtral.jinja", "</s>", bos="<s>", eos="</s>", lead=" ", once=("<s>",)),
}


def tokenizer_with(template: str, style: Style | None = None):
    from transformers import AutoTokenizer

    from proctor.tiny_model import tiny_model_path

    tok = AutoTokenizer.from_pretrained(tiny_model_path(pretrain_steps=0))
    if style is not None:
        tokens = {k: v for k, v in (("bos_token", style.bos), ("eos_token", style.eos)) if v}
        if tokens:
            tok.add_special_tokens(tokens)
        if style.added:
            tok.add_tokens(list(style.added), special_tokens=True)
    tok.chat_template = template
    return tok


def template_ids(tok, messages, generation_prompt: bool, **kwargs) -> list[int]:
    ids = tok.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=True, **kwargs)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


class NeverRight(Verifier):
    def verify(self, task, completion):
        return Verdict(reward=0.0, correct=False, feedback=f"Not quite: {task.answer} was expected.")


class Scripted:
    """A generator that 'samples' the given replies, in order: their canonical ids plus ``end``."""

    weight_version = 0

    def __init__(self, tok, replies: list[str], end: list[int]) -> None:
        self.tok, self.replies, self.end, self.prompts = tok, list(replies), end, []

    def ids(self, text: str) -> tuple[int, ...]:
        return tuple(self.tok.encode(text, add_special_tokens=False)) + tuple(self.end)

    def generate(self, prompts, params):
        out = []
        for p in prompts:
            self.prompts.append(list(p))
            text = self.replies.pop(0)
            ids = self.ids(text)
            out.append([Rollout(tuple(p), ids, (-0.5,) * len(ids), text, "stop")] * params.n)
        return out


def episode(tok, replies, *, env=None, end=None, kwargs=None, prompt=None):
    """Run one episode through ``continue_turns``; returns (rollout, verdict, turns, generator, messages)."""
    prompt = prompt or [{"role": "user", "content": "What is 2 + 2?"}]
    env = env or VerifiableEnv(ListSource([Task("t", prompt, "4")]), NeverRight(), max_turns=len(replies))
    suite = EnvSuite({"fix": env})
    item = SuiteItem("fix", env.source[0])
    gen = Scripted(tok, replies, end if end is not None else [])
    first = gen.generate([template_ids(tok, suite.prompt_of(item), True, **(kwargs or {}))],
                         SamplingParams(n=1))[0]
    score = lambda items, rollouts: suite.score_batch(items, [r.text for r in rollouts])  # noqa: E731
    rollouts, verdicts, turns = continue_turns(suite, gen, tok, SamplingParams(n=1), [item], first,
                                               score([item], first), score, chat_template_kwargs=kwargs)
    feedback = env.feedback_turn(verdicts[0])
    messages = list(suite.prompt_of(item))
    for reply in replies[:turns]:
        messages += [{"role": "assistant", "content": reply}, feedback]
    return rollouts[0], verdicts[0], turns, gen, messages[:-1]


@pytest.mark.parametrize("name", list(STYLES))
def test_episode_is_the_templates_rendering_of_the_conversation(name):
    style = STYLES[name]
    tok = tokenizer_with((TEMPLATES / style.file).read_text(), style)
    eot = tok.convert_tokens_to_ids(style.eot)
    replies = [style.lead + r for r in ("It is 5.", "It is 3, surely.", "Fine: 4.")]
    r, _, turns, gen, messages = episode(tok, replies, end=[eot])
    assert turns == 3 and r.extra["turns"] == 3
    ids = list(r.prompt_ids) + list(r.completion_ids)
    # The whole conversation (every reply, every feedback turn) as the template renders it; the
    # template closes the last reply after the sampled end of turn (ChatML adds "\n").
    full = template_ids(tok, messages, False)
    assert ids == full[:len(ids)], (tok.decode(ids), tok.decode(full))
    assert tok.decode(full[len(ids):]).strip() in ("", style.eot)
    # ... and each turn was sampled after the template's generation prompt for the conversation so far.
    assert gen.prompts[-1] == template_ids(tok, messages[:-1], True)
    text = tok.decode(ids)
    for once in style.once:
        assert text.count(once) == 1, f"{once!r} appears {text.count(once)} times mid-episode"
    # The sampled ids are kept as sampled and learned; the template's tokens are context.
    sampled = [t for t, keep in zip(r.completion_ids, r.learned()) if keep]
    assert sampled == [t for reply in replies for t in gen.ids(reply)]
    env_text = tok.decode([t for t, keep in zip(r.completion_ids, r.learned()) if not keep])
    assert env_text.count("Please fix your answer.") == 2 and not env_text.startswith(style.eot)
    assert len(r.logprobs) == len(r.completion_ids) == len(r.learned())


def test_reply_without_the_end_of_turn_token_gets_the_templates_end_of_turn():
    """A reply ended by a stop string has no end-of-turn token: the template's is inserted, as context."""
    tok = tokenizer_with((TEMPLATES / "qwen2_5.jinja").read_text())
    r, _, _, gen, messages = episode(tok, ["It is 5.", "It is 4."], end=[])
    ids = list(r.prompt_ids) + list(r.completion_ids)
    assert ids == template_ids(tok, messages, False)[:len(ids)]
    first_env = r.learned().index(0)
    assert r.completion_ids[first_env] == tok.convert_tokens_to_ids("<|im_end|>")


def test_generation_prompt_text_a_past_turn_does_not_render_is_kept_as_sampled():
    """Qwen3 with enable_thinking=False opens the reply with an empty think block that it does not
    render for past replies: the reply was sampled after it, so the episode keeps it; the rest of
    each feedback turn (with the next empty think block) is the template's."""
    thinking = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and "
                "not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}")
    tok = tokenizer_with(thinking)
    end = [tok.convert_tokens_to_ids("<|im_end|>")]
    r, _, _, gen, messages = episode(tok, ["It is 5.", "It is 4."], end=end, kwargs={"enable_thinking": False})
    text = tok.decode(list(r.prompt_ids) + list(r.completion_ids))
    assert text.count("<think>\n\n</think>\n\n") == 2
    assert gen.prompts[-1] == list(r.prompt_ids) + list(r.completion_ids[:-len(gen.ids("It is 4."))])
    assert tok.decode(gen.prompts[-1]).endswith("Please fix your answer.<|im_end|>\n<|im_start|>assistant\n"
                                                "<think>\n\n</think>\n\n")


def test_template_that_moves_the_system_prompt_to_the_last_user_turn_is_refused():
    # Mistral v0.3-like: the system prompt goes into the last user message, so the conversation
    # before a reply renders differently once a feedback turn follows.
    moving = ("{% for m in messages %}{% if m.role == 'system' %}{% elif m.role == 'user' and loop.last %}"
              "<|im_start|>user\n{{ messages[0].content }} {{ m.content }}<|im_end|>\n{% else %}"
              "<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
              "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    tok = tokenizer_with(moving)
    prompt = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2 + 2?"}]
    with pytest.raises(TemplateSplitError, match="differently once a feedback turn follows"):
        episode(tok, ["It is 5.", "It is 4."], end=[tok.eos_token_id], prompt=prompt)


def test_template_that_drops_past_replies_is_refused():
    dropping = ("{% for m in messages %}{% if m.role == 'assistant' %}<|im_start|>assistant\n(earlier)<|im_end|>\n"
                "{% else %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endif %}{% endfor %}"
                "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    tok = tokenizer_with(dropping)
    with pytest.raises(TemplateSplitError, match="0 times, not once"):
        episode(tok, ["It is 5.", "It is 4."], end=[tok.eos_token_id])


def test_prompt_ids_of_another_rendering_are_refused():
    tok = tokenizer_with((TEMPLATES / "qwen2_5.jinja").read_text())
    chat = ChatTurns(tok)
    messages = [{"role": "user", "content": "What is 2 + 2?"}]
    ids = template_ids(tok, messages, True)
    assert chat.start(messages, ids[5:]).context.endswith("<|im_start|>assistant\n")   # truncate_left: its end
    with pytest.raises(TemplateSplitError, match="same template and chat_template_kwargs"):
        chat.start(messages, ids[:-1])


def test_the_env_alone_decides_whether_an_episode_goes_on():
    class TwoTurnsAtMost(VerifiableEnv):
        def continues(self, verdict, turn):
            return turn < 2 and super().continues(verdict, turn)

    tok = tokenizer_with((TEMPLATES / "qwen2_5.jinja").read_text())
    end = [tok.convert_tokens_to_ids("<|im_end|>")]
    tasks = [Task("t", [{"role": "user", "content": "What is 2 + 2?"}], "4")]
    env = TwoTurnsAtMost(ListSource(tasks), NeverRight(), max_turns=4)
    r, _, turns, _, _ = episode(tok, ["a", "b", "c", "d"], end=end, env=env)
    assert turns == 2 and r.extra["turns"] == 2
    # step() follows the same rule
    env.reset(options={"index": 0})
    assert env.step("a")[2:4] == (False, False)
    assert env.step("b")[2] is True


def test_text_mode_feedback_joins_turns_as_the_env_observation_does():
    from proctor.envs.core.env import TEXT_TURN_SEPARATOR

    tok = tokenizer_with(None)
    env = VerifiableEnv(ListSource([Task("t", "What is 2 + 2?", "4")]), NeverRight(), chat=False, max_turns=2)
    suite = EnvSuite({"fix": env})
    item = SuiteItem("fix", env.source[0])
    gen = Scripted(tok, ["It is 5.", "It is 4."], [tok.eos_token_id])
    first = gen.generate([tok("What is 2 + 2?")["input_ids"]], SamplingParams(n=1))[0]
    score = lambda items, rollouts: suite.score_batch(items, [r.text for r in rollouts])  # noqa: E731
    rollouts, _, turns = continue_turns(suite, gen, tok, SamplingParams(n=1), [item], first, score([item], first),
                                        score)
    env_ids = [t for t, keep in zip(rollouts[0].completion_ids, rollouts[0].learned()) if not keep]
    assert turns == 2 and tok.decode(env_ids) == (TEXT_TURN_SEPARATOR + "Not quite: 4 was expected.\n\n"
                                                  "Please fix your answer.")
