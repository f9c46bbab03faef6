"""``strict=True`` (issue 25): the answer must be in the configured format and end the
turn (which ends at a complete end-of-turn token); trailing text, broken template tokens
and an unclosed ``<think>`` are rejected.
The default stays lenient. Per call (``verify``, ``extract``), per verifier
(``MathVerifier``) and per env (``proctor/Math-v0``)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proctor.envs.core.types import Task
from proctor.envs.math import MathVerifier, extract, verify

SETTINGS = settings(max_examples=30, deadline=None, derandomize=True)
values = st.integers(-10**6, 10**6)
REASONING = ["", "Let me compute. 2 + 2 = 4, so ", "<think>draft \\boxed{0}</think>\n"]
CLOSERS = ["", ".", " ", "$", "$.", "\\]", "\n", "**"]
TRAILERS = [" I hope it is correct.", "\nLet me know if you need more.", " and that is all", "\n\nAnswer: 0"]
END_TOKENS = ["<|im_end|>", "<|endoftext|>", "</s>", "<|eot_id|>", "<|im_start|>", "<｜end▁of▁sentence｜>"]
BROKEN_TOKENS = ["im_end|>", "|eot_id|>", "<|im_end", "<|eot_id", "</s", "endoftext|>"]


def formats(v: int) -> dict[str, list[str]]:
    """Answers written in each format, as the rule describes it."""
    return {
        "boxed": [f"\\boxed{{{v}}}", f"$\\boxed{{{v}}}$", f"\\[\\boxed{{{v}}}\\]", f"\\beginboxed{{{v}}}"],
        "tags": [f"<answer>{v}</answer>", f"<answer> ${v}$ </answer>", f"<answer>\\boxed{{{v}}}</answer>"],
        "answer_is": [f"\nAnswer: {v}", f"\n**Answer:** ${v}$", f"\nFinal Answer: {v}", f"\n#### {v}"],
    }


@SETTINGS
@given(values, st.sampled_from(REASONING), st.sampled_from(CLOSERS))
def test_strict_accepts_each_format_at_the_end(v, before, closer):
    for mode, answers in formats(v).items():
        for answer in answers:
            if mode != "boxed" and closer in ("$", "$.", "\\]"):
                continue                    # an unopened $ after tags or a line is not a closer
            text = before + answer + closer
            assert verify(text, str(v), extract=mode, strict=True), (mode, text)
            assert verify(text, str(v), strict=True), ("auto", text)
            assert not verify(text, str(v + 1), extract=mode, strict=True), (mode, text)


@SETTINGS
@given(values, st.sampled_from(TRAILERS))
def test_strict_rejects_trailing_text_that_lenient_accepts(v, trailer):
    for mode, answers in formats(v).items():
        for answer in answers:
            text = "Work. " + answer + trailer
            if mode != "answer_is" or not trailer.startswith("\n\nAnswer"):
                assert not verify(text, str(v), extract=mode, strict=True), (mode, text)
            ex = extract(text, mode, strict=True)
            assert ex.answer is None or ex.answer != str(v)


@SETTINGS
@given(values, st.sampled_from(END_TOKENS), st.sampled_from(["", "\nuser: next question \\boxed{0}"]))
def test_the_turn_ends_at_a_complete_end_of_turn_token(v, token, after):
    for mode, answers in formats(v).items():
        for answer in answers:
            text = "<|im_start|>" + answer + token + after
            assert verify(text, str(v), extract=mode, strict=True), (mode, text)


@SETTINGS
@given(values, st.sampled_from(BROKEN_TOKENS))
def test_strict_rejects_chat_template_debris(v, debris):
    for mode, answers in formats(v).items():
        for answer in answers:
            text = answer + debris                   # a broken token is trailing text
            assert not verify(text, str(v), extract=mode, strict=True), (mode, text)
            assert extract(text, mode, strict=True).answer != str(v)
            text = "Work <|fim_middle|> more. " + answer     # a special token inside the turn
            assert not verify(text, str(v), extract=mode, strict=True), (mode, text)
    assert verify(f"\\boxed{{{v}}}im_end|>", str(v))                 # lenient reads the box all the same


@SETTINGS
@given(values)
def test_strict_rejects_what_is_not_in_the_format(v):
    assert not verify(f"<think>x\n<answer>{v}</answer>", str(v), strict=True)      # think never closed
    assert verify(f"<think>x\n<answer>{v}</answer>", str(v))                        # lenient: tags count
    assert not verify(f"The answer is {v}.", str(v), strict=True)                   # no format at all
    assert not verify(f"<answer>The answer is {v}</answer>", str(v), extract="tags", strict=True)
    assert not verify(f"\\boxed{{{v}}}", str(v), extract="tags", strict=True)       # a box is not a tag
    assert not verify(f"<answer>{v}</answer>", str(v), extract="boxed", strict=True)
    assert not verify(f"Answer: {v} because it works", str(v), extract="answer_is", strict=True)
    assert verify(f"The answer is {v}.", str(v))                                    # lenient still reads it


def test_strict_keeps_the_last_box_rule_and_truncation():
    assert verify("\\boxed{3}\\boxed{5}", "5", strict=True)
    assert not verify("\\boxed{3}\\boxed{5}", "3", strict=True)
    assert extract("\\boxed{5", "boxed", strict=True).reason == "truncated"


def test_strict_is_an_option_of_the_verifier_and_the_env():
    task = Task(id="t", prompt="?", answer="12")
    lenient, strict = MathVerifier(), MathVerifier(strict=True)
    text = "So the answer is \\boxed{12}. I hope it is correct."
    assert lenient.verify(task, text).reward == 1.0
    v = strict.verify(task, text)
    assert v.reward == 0.0 and v.info["reason"] == "format"
    assert strict.verify(task, "So the answer is \\boxed{12}.").reward == 1.0

    from proctor.envs.registry import make_math
    env = make_math(strict=True, extract="boxed", n=4)
    assert env.rubric.verifier.strict and env.rubric.verifier.extract_mode == "boxed"
    assert not make_math(n=4).rubric.verifier.strict                            # default stays lenient


@pytest.mark.parametrize("kwargs, field", [
    ({"extract": "last_number", "strict": True}, "extract"),
    ({"extract": "nope"}, "extract"),
    ({"strict": "yes"}, "strict"),
])
def test_bad_options_name_the_field_and_the_fix(kwargs, field):
    with pytest.raises(ValueError, match=field):
        MathVerifier(**kwargs)
    with pytest.raises(ValueError, match=field):
        verify("\\boxed{1}", "1", **kwargs)
