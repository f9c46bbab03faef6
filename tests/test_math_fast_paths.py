"""The matcher's shortcuts give exactly what the full path gives.

``normalize`` runs each LaTeX rule only when a substring the rule needs is present, and
``prepare`` reads a plain number (12, -0.5, 3/4, \\frac{1}{2}) without looking for
structure. Both are speed-ups only: these tests hold them to the unshortened result on
every answer of the labelled sets and on generated ones.
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proctor.envs.math import clear_cache

normalize_mod = importlib.import_module("proctor.envs.math.normalize")
answer_mod = importlib.import_module("proctor.envs.math.answer")

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _every_rule(s: str) -> str:
    """``_latex_rules`` with every rule applied unconditionally (the reference)."""
    n = normalize_mod
    s = n.undouble(s)
    s = n._TRAILING_BACKSLASH_RE.sub("", s)
    s = n._MATH_THOUSANDS_RE.sub(r"\1", s)
    s = n._INVISIBLE_DELIM_RE.sub("", s)
    s = n._SIZING_RE.sub("", s)
    s = n._strip_delimiters(s)
    s = n._DROP_RE.sub("", s)
    s = n._SPACING_RE.sub(lambda m: m.group(0) if m.group(0) == "\\\\" else " ", s)
    s = s.replace("{,}", "")
    s = n.unwrap(s)
    return n._DEGREE_RE.sub("", s)


def _corpus() -> list[str]:
    out: list[str] = []
    for line in (BENCH / "math_cases.jsonl").open(encoding="utf-8"):
        row = json.loads(line)
        out += [row["gold"], row["completion"][-200:]]
    for f in sorted((BENCH / "peer_suites").glob("*.jsonl")):
        for line in f.open(encoding="utf-8"):
            row = json.loads(line)
            out += [row["pred"][-200:], row["gold"]]
    return [s for s in out if "\\" in s]


def test_latex_rules_gated_equal_every_rule_on_the_labelled_sets():
    corpus = _corpus()
    assert len(corpus) > 300
    for s in corpus:
        assert normalize_mod._latex_rules(s) == _every_rule(s), s


_PIECES = [r"\left(", r"\right)", r"\left.", r"\right|", r"\bigl(", r"\Big]", r"\displaystyle", r"\limits",
           r"\,", r"\!", r"\quad", "~", r"\\", r"\\frac", r"\frac", "{", "}", "1", "000", ",", "{,}", r",\!",
           r"^\circ", r"^{\circ}", r"\circ", "°", r"\degree", r"\text{cm}", r"\mathrm{E}", "$", "x", " ", "\\",
           r"\sqrt", "2", r"\textstyle", r"\nolimits"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), min_size=1, max_size=12))
def test_latex_rules_gated_equal_every_rule_generated(pieces):
    s = "".join(pieces)
    assert normalize_mod._latex_rules(s) == _every_rule(s)


def _prepare_both(s: str, gold: bool):
    clear_cache()
    fast = answer_mod.prepare(s, gold=gold)
    with pytest.MonkeyPatch.context() as m:
        m.setattr(answer_mod, "_PLAIN_NUMBER_RE", re.compile(r"(?!)"))   # the shortcut never applies
        clear_cache()
        slow = answer_mod.prepare(s, gold=gold)
    clear_cache()
    return fast, slow


_NUMBER = st.one_of(
    st.integers(-10 ** 9, 10 ** 9).map(str),
    st.tuples(st.integers(-999, 999), st.integers(0, 10 ** 6)).map(lambda t: f"{t[0]}.{t[1]}"),
    st.integers(0, 10 ** 6).map(lambda n: f".{n}"),
    st.tuples(st.integers(-99, 99), st.integers(0, 99)).map(lambda t: f"{t[0]}/{t[1]}"),
    st.tuples(st.integers(0, 99), st.integers(0, 99)).map(lambda t: rf"\frac{{{t[0]}}}{{{t[1]}}}"),
    st.tuples(st.sampled_from(["+", "-", ""]), st.integers(0, 99)).map(lambda t: f"{t[0]}{t[1]}."),
)


@settings(max_examples=200, deadline=None)
@given(_NUMBER, st.booleans())
def test_plain_numbers_prepare_as_the_full_path_does(s, gold):
    fast, slow = _prepare_both(s, gold)
    assert fast == slow


def test_plain_number_shortcut_on_the_labelled_sets():
    golds = [json.loads(line)["gold"] for f in [BENCH / "math_cases.jsonl", *sorted((BENCH / "peer_suites")
                                                                                    .glob("*.jsonl"))]
             for line in f.open(encoding="utf-8")]
    plain = [g for g in golds if answer_mod._PLAIN_NUMBER_RE.fullmatch(answer_mod.canonical(g))]
    assert len(plain) > 100
    for g in plain:
        for gold in (True, False):
            fast, slow = _prepare_both(g, gold)
            assert fast == slow, g


_SYNONYM_PIECES = [r"\dfrac", r"\tfrac", r"\cfrac", r"\frac", r"\dbinom", r"\le", r"\leq", r"\leqslant", r"\ge",
                   r"\geqslant", r"\ne", r"\neq", r"\lt", r"\gt", r"\lbrace", r"\rbrace", r"\lbrack", r"\rbrack",
                   r"\lvert", r"\vert", r"\varnothing", r"\{", r"\}", " ", r"\infinity", r"\ldots", r"\dots",
                   r"\colon", r"\mathbb{R}", r"\mathbb R", r"\R", r"\Re", r"\wedge", "x", "1", "{", "}", "a"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_SYNONYM_PIECES), min_size=1, max_size=10))
def test_latex_synonyms_gated_equal_every_synonym(pieces):
    s = "".join(pieces)
    reference = s
    for pattern, repl, _ in normalize_mod._LATEX_SYNONYMS:
        reference = pattern.sub(repl, reference)
    assert normalize_mod.latex_synonyms(s) == reference


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["", "-", "+"]), st.text("0123456789", max_size=6), st.booleans(),
       st.text("0123456789", max_size=6))
def test_decimal_literals_read_as_fraction_reads_them(sign, whole, point, frac):
    from fractions import Fraction

    numbers = importlib.import_module("proctor.envs.math.numbers")
    s = sign + whole + ("." if point else "") + (frac if point else "")
    if not numbers._DEC_RE.fullmatch(s):
        return
    assert numbers.literal(s) == Fraction(s.rstrip(".") if s.endswith(".") else s)


_TAIL_PIECES = ["5", "x", "cm", "m", "apples", "and", "AND", "or", "OR", "Or", ")", "(", "]", "2", "^2", ".",
                "\\text", "{", "}", "km/h", "per", "square", "W", "\\land", ",", "\t", " ", "\n", "\u00a0"]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_TAIL_PIECES), min_size=1, max_size=10))
def test_word_rules_skipped_only_where_they_cannot_apply(pieces):
    n = normalize_mod
    s = "".join(pieces).strip()
    if not n._SPACE_RE.search(s):
        assert n.strip_units(s) == s and n._AND_RE.sub(r"\\land ", s) == s
    if "or" not in s.lower():
        assert n._OR_RE.sub(",", s) == s


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["", "-", "+"]), st.integers(0, 10 ** 6), st.integers(0, 10 ** 6))
def test_integer_fractions_parse_as_the_brace_scanner_does(sign, a, b):
    numbers = importlib.import_module("proctor.envs.math.numbers")
    s = rf"{sign}\frac{{{a}}}{{{b}}}"
    assert numbers._parse(s, 0) == numbers._parse_frac(s, 0)


def _depth_reference(s: str) -> int:
    depth = best = 0
    for ch in s:
        if ch in "{[(":
            depth += 1
            best = max(best, depth)
        elif ch in "}])" and depth > 0:
            depth -= 1
    return best


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text("{[()]}x\\", max_size=40),
                 st.integers(0, 80).map(lambda n: "{" * n + "x" + "}" * n),
                 st.integers(0, 80).map(lambda n: "(" * n + ")" * n + "[" * (70 - n))))
def test_nesting_depth_shortcuts(s):
    extract_mod = importlib.import_module("proctor.envs.math.extract")
    assert extract_mod.nesting_depth(s) == _depth_reference(s)
    assert extract_mod.too_deep(s) is (_depth_reference(s) > extract_mod.MAX_DEPTH)


def _numbers_equal_reference(a, b) -> bool:
    numbers = importlib.import_module("proctor.envs.math.numbers")
    if a.percent == b.percent:
        candidates = [(a.value, b.value)]
    else:
        pct, plain = (a, b) if a.percent else (b, a)
        candidates = [(pct.value, plain.value), (pct.value / 100, plain.value)]
    if any(x == y for x, y in candidates):
        return True
    if a.percent or b.percent:
        return False
    return numbers.approx_equal(a, b.value) or numbers.approx_equal(b, a.value)


_LITERAL = st.one_of(st.integers(-10 ** 7, 10 ** 7).map(str),
                     st.tuples(st.integers(-999, 999), st.integers(0, 10 ** 8)).map(lambda t: f"{t[0]}.{t[1]}"),
                     st.tuples(st.integers(1, 9), st.integers(1, 9)).map(lambda t: f"{t[0]}/{t[1]}"),
                     st.sampled_from(["0.333333", "0.3333333", r"\frac{1}{3}", "50", "0.5", "1/2", "3.14159265"]))


@settings(max_examples=400, deadline=None)
@given(_LITERAL, _LITERAL, st.booleans(), st.booleans())
def test_numbers_equal_as_the_candidate_list_did(x, y, px, py):
    numbers = importlib.import_module("proctor.envs.math.numbers")
    a, b = numbers.parse_number(x + ("%" if px else "")), numbers.parse_number(y + ("%" if py else ""))
    assert a is not None and b is not None
    assert numbers.numbers_equal(a, b) is _numbers_equal_reference(a, b)
