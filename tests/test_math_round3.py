"""Math verifier, round 3 (issue 25): each rule both ways, on answers generated from the rule.

Classes: the last box is the answer (boxes tied by a connective stay one answer; a gold of
several values reads every box); a gold with its value left of ``=``; percent as a word;
an unclosed ``<think>`` before ``<answer>`` tags; golds in Python notation; a misspelt box
command; code is no answer; identical junk is not equal; numbers of 100,000 digits,
exactly and quickly. Strict mode has its own file (``test_math_round3_strict.py``).
"""

from __future__ import annotations

import random
import time
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proctor.envs.math import extract, extract_for, match, verify

SETTINGS = settings(max_examples=40, deadline=None, derandomize=True)
values = st.integers(-10**6, 10**6)
two_values = st.tuples(values, values).filter(lambda ab: ab[0] != ab[1])


def box(v: object) -> str:
    return "\\boxed{" + str(v) + "}"


# --- several boxes: the last one is the answer ---------------------------------------

UNTIED = ["", " ", "\n", "$ $", ". ", "\\quad ", "\n$$\n"]      # nothing but space and delimiters
TIED = [" and ", ", ", " or ", "; "]                             # a connective: one answer in parts


@SETTINGS
@given(two_values, st.sampled_from(UNTIED), st.sampled_from([1, 3, 40, 2000]))
def test_the_last_of_untied_boxes_is_the_answer(ab, sep, run):
    a, b = ab
    text = "Work. " + (box(a) + sep) * run + box(b)
    assert verify(text, str(b))
    assert not verify(text, str(a))


@SETTINGS
@given(two_values, st.sampled_from(TIED))
def test_tied_boxes_are_one_answer_so_a_hedge_fails_a_single_gold(ab, sep):
    a, b = ab
    text = "So " + box(a) + sep + box(b) + "."
    assert not verify(text, str(b)) and not verify(text, str(a))
    assert verify(text, f"{a}, {b}") and verify(text, f"{b}, {a}")


@SETTINGS
@given(two_values, st.sampled_from(UNTIED[:4]))
def test_a_gold_of_several_values_reads_every_box(ab, sep):
    a, b = ab
    text = box(a) + sep + box(b)
    assert verify(text, f"{a}, {b}")
    assert verify(text, f"({a}, {b})")
    assert not verify(text, f"{a}, {b + 1}")
    assert extract_for(text, str(b)).answer == str(b)          # a single gold: the last box


def test_a_revision_between_boxes_is_never_joined():
    text = box(31) + ". Wait, that is wrong. " + box(28)
    assert verify(text, "28") and not verify(text, "31") and not verify(text, "28, 31")


def test_a_long_run_of_boxes_is_linear():
    text = box(7) * 200_000 + box(5)
    t0 = time.perf_counter()
    assert verify(text, "5") and not verify(text, "7")
    assert time.perf_counter() - t0 < 5


# --- a gold written with its value on the left of "=" ----------------------------------

VARIABLES = ["x", "y", "n", "k", "\\theta", "AB", "f(x)"]
VALUES = [("2", "3"), ("-7", "7"), ("\\frac{1}{2}", "0.6"), ("2\\sqrt{3}", "3\\sqrt{2}"), ("0.25", "\\frac{1}{3}")]


@pytest.mark.parametrize("var", VARIABLES)
@pytest.mark.parametrize("value, other", VALUES)
def test_value_left_of_equals_names_the_variable(var, value, other):
    gold = f"{value} = {var}"
    assert verify(box(value), gold) and verify(box(f"{var} = {value}"), gold)
    assert not verify(box(other), gold) and not verify(box(f"{var} = {other}"), gold)
    assert verify(box(f"{value} = {var}"), value)               # the same rule on the prediction's side


@pytest.mark.parametrize("gold, pred, expected", [
    ("7 = 11a+c", "7", False),          # no single variable on the right: still an equation
    ("2x = 6", "6", False), ("6 = 2x", "6", False), ("x^2 = 4", "4", False),
])
def test_equations_that_name_no_variable_stay_equations(gold, pred, expected):
    assert verify(pred, gold) is expected


# --- percent written as a word -----------------------------------------------------------

WORDS = [" percent", "percent", " percentage", " pct", " per cent", "\\text{ percent}", "\\text{percent}",
         " Percent", "\\%"]


@SETTINGS
@given(st.integers(1, 2000).map(lambda n: Fraction(n, 8)), st.sampled_from(WORDS))
def test_a_percent_word_is_the_percent_sign(p, word):
    written = str(float(p)).rstrip("0").rstrip(".")
    for text in (box(written + word), f"The answer is {written}{word}.", f"Answer: {written}{word}"):
        assert verify(text, str(float(p / 100))), text                 # its value
        assert verify(text, written), text                              # the sign as a unit
        assert not verify(text, str(float(p / 10))), text
        assert not verify(text, str(float(p * 100))), text


def test_percent_words_elsewhere_are_not_a_sign():
    assert not verify(box("the percent"), "0.01")
    assert verify(box("percentage"), "percentage")


# --- an unclosed <think> followed by <answer> tags ---------------------------------------

@SETTINGS
@given(two_values, st.sampled_from(["", "a long draft \\boxed{0} with a box", "2 + 2 = 4\n"]))
def test_answer_tags_after_an_unclosed_think_are_the_answer(ab, draft):
    a, b = ab
    text = f"<think>{draft}\n<answer>{a}</answer>"
    assert verify(text, str(a)) and not verify(text, str(b))


@pytest.mark.parametrize("text", ["<think>still thinking \\boxed{4}", "<think>x <answer>4",
                                  "<answer>4</answer><think>then thinking again \\boxed{4}"])
def test_an_unclosed_think_without_a_complete_answer_after_it_has_no_answer(text):
    ex = extract(text)
    assert ex.answer is None and ex.reason == "unclosed_think"
    assert not verify(text, "4")


# --- golds in Python notation --------------------------------------------------------------

@SETTINGS
@given(st.integers(2, 9), st.integers(0, 30))
def test_python_powers_meet_latex(base, exp):
    for gold in (f"{base}**{exp}", f"{base} ** {exp}", f"{base}**({exp})"):
        assert verify(box(base ** exp), gold), gold
        assert not verify(box(base ** exp + 1), gold), gold
    r = match(str(base ** exp), f"{base}**{exp}")
    assert r.equal and r.tier in ("string", "exact")                    # no symbolic tier needed


@SETTINGS
@given(st.integers(1, 9), st.sampled_from([2, 3, 5, 6, 7]), st.integers(1, 9))
def test_python_sqrt_and_pi_meet_latex(k, n, m):
    assert verify(box(f"\\frac{{{k}\\sqrt{{{n}}}}}{{{m}}}"), f"{k}*sqrt({n})/{m}")
    assert not verify(box(f"\\frac{{{k}\\sqrt{{{n + 1}}}}}{{{m}}}"), f"{k}*sqrt({n})/{m}")
    assert verify(box(f"\\frac{{{k}\\pi}}{{{m}}}"), f"{k}*pi/{m}")
    assert not verify(box(f"\\frac{{{k}\\pi}}{{{m + 1}}}"), f"{k}*pi/{m}")
    assert match(f"\\frac{{{k}\\pi}}{{{m}}}", f"{k}*pi/{m}").tier in ("string", "exact")


@pytest.mark.parametrize("gold, pred, expected", [
    ("x**2 + 2*x + 1", "(x+1)^2", True), ("x**2 + 2*x + 1", "(x+1)^3", False),
    ("2**-1", "\\frac{1}{2}", True), ("2**(1+2)", "8", True), ("sqrt(sqrt(16))", "2", True),
    ("sqrt(8)", "2\\sqrt{2}", True), ("sqrt(8)", "2\\sqrt{3}", False),
    ("**42**", "42", True),                                            # markdown bold is not a power
])
def test_python_expressions(gold, pred, expected):
    assert verify(box(pred), gold) is expected


# --- a box command a reader still reads ----------------------------------------------------

@SETTINGS
@given(two_values, st.sampled_from(["\\beginboxed", "\\Beginboxed", "\\endboxed", "\\mboxed", "\\boxed"]))
def test_a_misspelt_box_command_is_a_box(ab, command):
    a, b = ab
    text = f"Thus {command}{{{a}}}."
    assert verify(text, str(a)) and not verify(text, str(b))


# --- code is not an answer -------------------------------------------------------------

CODE = ["print({v})", "__import__('os').system('ls') or {v}", "import os\nos.system('echo hi')\n{v}",
        "os.remove('x'); {v}", "(lambda: {v})()", "x = 0\nx += {v}", "```python\nprint(1)\n```\n{v}",
        "def f():\n    return {v}", "exec('x={v}')", "eval('{v}')", "open('f').read() or {v}"]


@SETTINGS
@given(values, st.sampled_from(CODE))
def test_text_that_is_code_has_no_answer_position(v, template):
    text = template.format(v=v)
    assert not verify(text, str(v)), text
    # an answer position still counts after code
    assert verify(text + f"\n\nThe answer is {v}.", str(v))
    assert verify(text + "\n" + box(v), str(v))


@SETTINGS
@given(values)
def test_prose_still_ends_in_its_answer(v):
    text = f"She had 3 apples and bought some more, so she has {v} apples."
    assert verify(text, str(v)) and not verify(text, str(v + 1))


# --- identical junk is not an answer ----------------------------------------------------

JUNK = ["\\frac{", "\\sqrt{", "x^{", "\\frac{1}", "(1, 2", "2+", "{{}", "x =", "\\frac{1}{2", "1, 2)"]


@pytest.mark.parametrize("junk", JUNK)
def test_identical_malformed_strings_are_not_equal(junk):
    assert not verify(junk, junk)
    assert not verify(box(junk) if "{" not in junk else junk, junk)
    assert match(junk, junk).reason in ("malformed", "unparsable", "not_equal", "too_complex")


@pytest.mark.parametrize("same", ["[0, 1)", "(-\\infty, 3]", "\\{1, 2\\}", "+", "-", "x", "\\frac{1}{2}",
                                  "\\begin{pmatrix}1 & 2\\\\3 & 4\\end{pmatrix}", "f'(x)", "5!", "no solution"])
def test_identical_well_formed_strings_are_equal(same):
    assert verify(box(same), same)


# --- numbers of 100,000 digits --------------------------------------------------------

def _digits(n: int, seed: int) -> str:
    rng = random.Random(seed)
    return str(rng.randint(1, 9)) + "".join(rng.choice("0123456789") for _ in range(n - 1))


@pytest.mark.parametrize("n", [1_001, 3_000, 10_000, 100_000, 200_000])
def test_big_integers_are_compared_exactly_and_quickly(n):
    d = _digits(n, n)
    other = d[:-1] + str((int(d[-1]) + 1) % 10)
    t0 = time.perf_counter()
    assert verify(box(d), d)
    assert not verify(box(d), other)
    assert not verify(box(other), d)
    assert verify(f"The answer is {d}", d) and verify(f"The answer is {d}.", d)
    assert verify(f"Answer: ${d}$", d) and not verify(f"The answer is {other}.", d)
    assert not verify(box(d), d + "0")
    r = match(d, d[:n // 2] + d[n // 2:])
    assert r.equal and r.tier in ("string", "exact")
    assert time.perf_counter() - t0 < 3


def test_big_numbers_in_other_spellings():
    d = _digits(12_000, 1)
    head = len(d) % 3 or 3
    grouped = ",".join([d[:head]] + [d[i:i + 3] for i in range(head, len(d), 3)])
    assert verify(box(grouped), d) and verify(box("000" + d), d) and verify(box(d + ".000"), d)
    assert verify(box("-" + d), "-" + d) and not verify(box("-" + d), d)
    assert verify(box(d[:-5] + "." + d[-5:]), d[:-5] + "." + d[-5:]) and not verify(box(d[:-5] + "." + d[-5:]), d)


@pytest.mark.parametrize("k", [4000, 20000, 65536])
def test_a_big_literal_meets_an_exact_power(k):
    import sys
    limit = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        d = str(2 ** k)
    finally:
        sys.set_int_max_str_digits(limit)
    assert verify(box(d), f"2^{{{k}}}") and verify(box(f"2^{{{k}}}"), d)
    assert not verify(box(d), f"2^{{{k + 1}}}") and not verify(box(d), f"2^{{{k - 1}}}")


def test_a_big_literal_against_what_it_cannot_decide_is_a_zero_not_a_hang():
    d = "1" + "0" * 150_000
    t0 = time.perf_counter()
    r = match(d, "10^{150000}")
    assert not r.equal and r.tier == "guard" and time.perf_counter() - t0 < 2
    assert extract(box("1" * 300_000)).reason == "too_complex"              # over MAX_NUMBER_CHARS
