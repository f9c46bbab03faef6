"""`extract_code`: fences, language tags, modes, truncation, thinking, the no-fence fallback."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proctor.envs.code.extract import MODES, extract_code, fenced_blocks

F = "```"


def fence(code: str, tag: str = "python") -> str:
    return f"{F}{tag}\n{code}\n{F}"


# --------------------------------------------------------------------------- fences and tags

def test_a_python_block_between_prose():
    text = "Here you go:\n" + fence("def f():\n    return 1") + "\nThis returns 1."
    assert extract_code(text) == "def f():\n    return 1\n"


@pytest.mark.parametrize("tag", ["python", "py", "Python3", "PY", "python title=sol.py", "{.python}", "py:main.py"])
def test_python_tag_spellings(tag):
    assert extract_code(fence("x = 1", tag)) == "x = 1\n"


def test_tagged_blocks_win_over_untagged_and_other_languages():
    text = fence("print('untagged')", "") + "\n" + fence("x = 'tagged'") + "\n" + fence("ls -la", "bash")
    assert extract_code(text) == "x = 'tagged'\n"
    assert extract_code(text, mode="first") == "x = 'tagged'\n"


def test_untagged_blocks_are_the_fallback_and_other_tags_never_count():
    assert extract_code(fence("y = 2", "") + "\n" + fence("echo hi", "bash")) == "y = 2\n"
    assert extract_code(fence("echo hi", "bash") + "\n" + fence("some output", "text")) is None


@pytest.mark.parametrize("tag", ["cpp", "c++", "C++", "cxx", "cc"])
def test_cpp_tags(tag):
    text = fence("int x;", tag) + "\n" + fence("x = 1", "python")
    assert extract_code(text, "cpp") == "int x;\n"
    assert extract_code(text, "c++") == "int x;\n"


def test_c_and_cpp_keep_apart_except_c_code_for_a_cpp_task():
    c_only = fence("int f(void) { return 1; }", "c")
    assert extract_code(c_only, "c") == "int f(void) { return 1; }\n"
    assert extract_code(c_only, "cpp") == "int f(void) { return 1; }\n"   # C compiles as C++
    assert extract_code(fence("auto x = 1;", "cpp"), "c") is None
    both = fence("int c;", "c") + "\n" + fence("int cpp;", "cpp")
    assert extract_code(both, "cpp") == "int cpp;\n" and extract_code(both, "c") == "int c;\n"


def test_unknown_language_or_mode_is_a_caller_error():
    with pytest.raises(ValueError, match="python, c, cpp"):
        extract_code("x", "cobol")
    with pytest.raises(ValueError, match="last"):
        extract_code("x", mode="middle")
    with pytest.raises(ValueError, match="parse"):
        extract_code("x", fallback="maybe")


# --------------------------------------------------------------------------- modes

THREE = "\n".join([fence("a = 1"), "then", fence("b = 2\nbb = 22\nbbb = 222"), "and", fence("c = 3")])


@pytest.mark.parametrize("mode,expected", [
    ("last", "c = 3\n"),
    ("first", "a = 1\n"),
    ("longest", "b = 2\nbb = 22\nbbb = 222\n"),
    ("all", "a = 1\n\nb = 2\nbb = 22\nbbb = 222\n\nc = 3\n"),
])
def test_modes(mode, expected):
    assert extract_code(THREE, mode=mode) == expected


def test_all_joins_only_the_chosen_tier_and_empty_blocks_are_skipped():
    text = fence("a = 1") + "\n" + fence("untagged = 1", "") + "\n" + fence("   ") + "\n" + fence("b = 2")
    assert extract_code(text, mode="all") == "a = 1\n\nb = 2\n"
    assert extract_code(text, mode="last") == "b = 2\n"


def test_longest_prefers_the_later_block_on_a_tie():
    assert extract_code(fence("a = 1") + "\n" + fence("b = 2"), mode="longest") == "b = 2\n"


# --------------------------------------------------------------------------- real-world shapes

def test_truncated_final_fence_counts():
    text = "Answer:\n```python\ndef f(x):\n    return x +"
    assert extract_code(text) == "def f(x):\n    return x +\n"
    [block] = fenced_blocks(text)
    assert not block.closed


def test_closing_fence_glued_to_the_last_line():
    assert extract_code("```python\ndef f():\n    return 1```\nDone.") == "def f():\n    return 1\n"


def test_body_continuation_keeps_its_indentation():
    assert extract_code("```python\n\n    return sorted(xs)\n```") == "    return sorted(xs)\n"


def test_indented_fence_in_a_list_item_is_dedented_by_the_fence_indent():
    text = "1. Code:\n   ```python\n   def f():\n       return 1\n   ```\n"
    assert extract_code(text) == "def f():\n    return 1\n"


def test_longer_outer_fence_holds_inner_fences_and_tilde_fences_work():
    inner = 'doc = """\n```python\nx\n```\n"""'
    assert extract_code(f"````python\n{inner}\n````") == inner + "\n"
    assert extract_code("~~~python\nz = 3\n~~~") == "z = 3\n"


def test_only_text_after_the_last_think_end_counts():
    thinking = "<think>draft:\n" + fence("wrong = 1") + "\n</think>"
    assert extract_code(thinking + "Final:\n" + fence("right = 1")) == "right = 1\n"
    assert extract_code("<think>a</think>b</think>" + fence("last = 1")) == "last = 1\n"
    # Code only inside the thinking is not an answer.
    assert extract_code(thinking + "I could not finish.") is None


def test_without_a_think_end_everything_counts():
    assert extract_code("<think>still thinking\n" + fence("draft = 1")) == "draft = 1\n"


# --------------------------------------------------------------------------- no fence at all

def test_bare_python_is_taken_when_it_parses():
    assert extract_code("import sys\nprint(sys.stdin.read())") == "import sys\nprint(sys.stdin.read())"
    assert extract_code("def f():\n    return 1\n") == "def f():\n    return 1\n"


@pytest.mark.parametrize("text", ["", "   \n", "Sure", "42", "I am not sure how to solve this.",
                                  "The answer is: def f(", "    return x"])
def test_bare_prose_or_broken_code_is_no_code(text):
    assert extract_code(text) is None


def test_fallback_modes():
    assert extract_code("Sure, here it is.", fallback="whole") == "Sure, here it is."
    assert extract_code("x = 1", fallback="none") is None
    assert extract_code("#include <stdio.h>\nint main(void){return 0;}", "c") is not None
    assert extract_code("int main() { return 0; }", "cpp") is not None
    assert extract_code("Use a hash map.", "cpp") is None


def test_a_fence_of_another_language_is_not_a_reason_to_fall_back():
    # The answer has fences, none of them code in the task's language: no code.
    assert extract_code(fence("x = 1", "bash")) is None


# --------------------------------------------------------------------------- properties

LANGS = st.sampled_from(["python", "c", "cpp"])


@settings(max_examples=400, deadline=None)
@given(st.text(), LANGS, st.sampled_from(MODES), st.sampled_from(["parse", "whole", "none"]))
def test_any_string_never_raises(text, language, mode, fallback):
    out = extract_code(text, language, mode, fallback=fallback)
    assert out is None or isinstance(out, str)


FENCY = st.text(alphabet=st.sampled_from(list("`~ \npython{}.c+<>/think:x=1")), max_size=80)


@settings(max_examples=400, deadline=None)
@given(FENCY, LANGS, st.sampled_from(MODES))
def test_fence_heavy_strings_never_raise(text, language, mode):
    out = extract_code(text, language, mode)
    assert out is None or out.strip()


CODE = st.text(alphabet=st.characters(blacklist_characters="`~", blacklist_categories=("Cs",)), max_size=200)


@settings(max_examples=300, deadline=None)
@given(CODE, st.text(max_size=100))
def test_fenced_code_comes_back_whatever_is_around_or_thought_before(code, thinking):
    if not code.strip() or "</think>" in code:
        return
    wrapped = "Here:\n" + fence(code) + "\nHope this helps."
    out = extract_code(wrapped)
    assert out is not None and out.strip() == code.strip() and out.endswith("\n")
    assert extract_code(thinking + "</think>" + wrapped) == out
