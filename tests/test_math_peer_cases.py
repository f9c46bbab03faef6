"""What other projects' grader tests taught the math verifier (issue 10), each rule both ways.

Bare answers, final statements, multi-part boxes, end-of-turn tokens, answer markers
in other languages, the missing equivalences (MATH separators, label equations,
\\approx, solution sets, matrix sums, doubled backslashes, option letters) and the
non-equivalences that must stay (times and ratios are not fractions). Also the
reward contract: a matcher bug is an ``infra_error`` verdict, and a short result
list raises instead of shifting rewards.
"""

from __future__ import annotations

import math

import pytest

from proctor.envs.core.types import Task
from proctor.envs.math import MathVerifier, extract, extract_answer, match_many, shutdown_pool, verify
from proctor.envs.math import matcher as matcher_mod
from proctor.envs.math import pool as pool_mod
from proctor.envs.math.verifier import MatchError


@pytest.fixture(scope="module", autouse=True)
def _pool():
    pool_mod.get_pool()
    yield
    shutdown_pool()


# --- bare answers: read whole, never through the last number -------------------------

@pytest.mark.parametrize("completion, gold, expected", [
    ("x^2 + 2*x + 1", "x^2+2x+1", True), ("x^2 + 2*x + 1", "x^2+2x+2", False),
    ("$[0,1)$", "[0,1)", True), ("$[0,1)$", "[0,1]", False),
    ("$odd$", r"\text{odd}", True), ("$odd$", r"\text{even}", False),
    (r"$\frac{1+\sqrt{5}}{2}$", "2", False), (r"$\frac{1+\sqrt{5}}{2}$", r"\frac{\sqrt5+1}{2}", True),
    ("$-[0,1)$", "1", False), ("AZYUK2A", "2", False),
    ("3+2", "5", True), ("3+2", "6", False),
    ("[45 degrees]", "45", True), ("[45 degrees]", "90", False),
    ("1000,99", "1000.99", True), ("1,2", "1.2", False),
    ("**42**", "42", True), ("**42**", "24", False),
])
def test_bare_answers(completion, gold, expected):
    assert verify(completion, gold) is expected


def test_long_prose_still_uses_the_last_number():
    text = "She had 3 apples and bought 15 more, so she has 18 apples."
    assert extract(text).source == "last_number" and verify(text, "18") and not verify(text, "15")


# --- extraction from long completions ------------------------------------------------

@pytest.mark.parametrize("completion, answer", [
    (r"So $\boxed{30}$ at first. Final Answer: The largest $n$ is 34.", "34"),
    (r"we get \boxed{10}. Final Answer: The final answer is $10,455$. I hope it is correct.", "10,455"),
    (r"$$\boxed{(3, 3)} \text{ for part (a) and } \boxed{(1, 1)}$$", "(3, 3), (1, 1)"),
    (r"\( y_1 = \boxed{x+1} \) and \( y_2 = \boxed{x-1} \)", "x+1, x-1"),
    (r"\boxed{1} no no no no no \boxed{2}", "2"),
    (r"\boxed{31}. Wait, that is wrong; recomputing gives \boxed{28}", "28"),
    ("The answer is $(7, 6)$. <|im_start|>user\nWhat is 2+2? The answer is 4", "(7, 6)"),
    ("Thus 12.</s> Answer: 99", "12"),
    ("答案：每份应该是 (\\frac{2}{5}) 吨。", "(\\frac{2}{5})"),
    ("Réponse: Janeth aura encore 220 $ à payer d'ici 12 mois.", "220"),
    ("Die Antwort ist 17.", "17"),
    ("Ответ: 42", "42"),
    ("Answer: (B) 12 apples", "12"),
    ("Final Answer: Jane started growing Sphere 3 hours ago. I hope it is correct.", "3"),
])
def test_extraction(completion, answer):
    assert extract_answer(completion).replace(" ", "") == answer.replace(" ", "")


@pytest.mark.parametrize("completion, gold, expected", [
    (r"So $\boxed{30}$. Final Answer: The largest $n$ is 34.", "34", True),
    (r"So $\boxed{30}$. Final Answer: The largest $n$ is 34.", "30", False),
    (r"\boxed{1} papers and \boxed{2} bins", "1, 2", True),
    (r"\boxed{1} no no no no no \boxed{2}", "1, 2", False),
    ("The answer is 5.<|im_end|>\nThe answer is 6.", "5", True),
    ("The answer is 5.<|im_end|>\nThe answer is 6.", "6", False),
    ("计划的比例为13/28", "13/28", True), ("计划的比例为13/28", "13/27", False),
])
def test_extraction_decides_the_verdict(completion, gold, expected):
    assert verify(completion, gold) is expected


# --- equivalences, both ways ------------------------------------------------------------

@pytest.mark.parametrize("pred, gold, expected", [
    # MATH thousands separators, either side
    (r"1,\!000", "1000", True), (r"1,\!001", "1000", False),
    (r"11,\! 111", "11111", True), ("11111", r"11,\! 111", True), (r"11,\! 112", "11111", False),
    # a labelled left side states the value; an unknown's equation does not
    ("1", "|AB|=1", True), ("2", "|AB|=1", False), ("|AB|=1", "1", True),
    ("11:21", "V_{1}:V_{2}=11:21", True), ("11:20", "V_{1}:V_{2}=11:21", False),
    (r"\frac{1}{\sqrt{6}}", r"\frac{NO}{BO}=\frac{1}{\sqrt{6}}", True),
    (r"\frac{1}{\sqrt{5}}", r"\frac{NO}{BO}=\frac{1}{\sqrt{6}}", False),
    (r"e^{i\pi} = -1", "-1", True), (r"e^{i\pi} = -1", "1", False),
    (r"\lim_{x \to 0} \frac{\sin x}{x} = 1", "1", True),
    ("x^2 = 4", "4", False), ("11a+c", "7 = 11a+c", False), ("2x = 6", "6", False),
    ("m+n = 17", "17", True), ("m+n = 17", "18", False), ("a+b+c=5", "5", True), ("x+y=0", "0", False),
    # \approx: the exact left side is the answer; a variable's approximate value is its value
    (r"\frac{\sqrt{3}}{3} \approx 0.577", r"\frac{\sqrt{3}}{3}", True),
    (r"\frac{\sqrt{3}}{3}", r"\frac{\sqrt{3}}{3} \approx 0.577", True),
    (r"\frac{\sqrt{3}}{3} \approx 0.577", "0.577", False),
    (r"x \approx 11", "11", True), (r"x \approx 11", "12", False),
    (r"x=1/3\approx1.3", "1/3", True), (r"x=1/3\approx1.3", "1.3", False),
    # a range of values and an interval
    ("(0,1)", "0<f(x)<1", True), ("(0,2)", "0<f(x)<1", False),
    # "or" without spaces, solution sets written as assignments
    (r"(7,11),\ (11,7)", "(11,7)or(7,11)", True), ("(7,11)", "(11,7)or(7,11)", False),
    ("(5,2),(7,2)", "p=5,q=2;p=7,q=2", True), ("(5,2),(7,3)", "p=5,q=2;p=7,q=2", False),
    ("(2,5),(2,7)", "p=5,q=2;p=7,q=2", False),
    ("W(x)=1orW(x)=-1", r"W(n) = 1 \text{ and } W(n) = -1", True),
    ("W(x)=1orW(x)=-2", r"W(n) = 1 \text{ and } W(n) = -1", False),
    # unevaluated sums and products of matrices
    (r"\begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix} + \begin{pmatrix}5 & 6 \\ 7 & 8\end{pmatrix}",
     r"\begin{pmatrix}6 & 8 \\ 10 & 12\end{pmatrix}", True),
    (r"\begin{pmatrix}1 & 2 \\ 3 & 4\end{pmatrix} + \begin{pmatrix}5 & 6 \\ 7 & 8\end{pmatrix}",
     r"\begin{pmatrix}6 & 8 \\ 10 & 13\end{pmatrix}", False),
    (r"\begin{pmatrix}1 & 1 \\ 0 & 1\end{pmatrix} \begin{pmatrix}1 & 1 \\ 0 & 1\end{pmatrix}",
     r"\begin{pmatrix}1 & 2 \\ 0 & 1\end{pmatrix}", True),
    (r"\begin{pmatrix}1 & 1 \\ 0 & 1\end{pmatrix} \begin{pmatrix}1 & 1 \\ 0 & 1\end{pmatrix}",
     r"\begin{pmatrix}1 & 1 \\ 0 & 1\end{pmatrix}", False),
    # doubled backslashes and a trailing backslash
    (r"\\frac{1}{2}", "0.5", True), (r"\\frac{1}{2}", "0.25", False),
    ("0.5", r"\\dfrac{1}{2}", True), (r"\\left(\\frac{1}{5},\\frac{1}{6}\\right)", r"(\frac15, \frac16)", True),
    ("185\\", "185", True), ("185\\", "186", False),
])
def test_equivalences(pred, gold, expected):
    assert match_many([pred], [gold])[0].equal is expected


@pytest.mark.parametrize("pred, gold, expected", [
    # times and ratios are compared term by term, never as fractions
    ("12:00", "1:00", False), ("1:00", "12:00", False), ("3:0", "5:0", False),
    ("12:00", "12:00", True), ("7:32", "7:32", True), ("6:4", "3:2", False), ("2:1", "4:2", False),
])
def test_times_and_ratios_are_not_fractions(pred, gold, expected):
    assert match_many([pred], [gold])[0].equal is expected


@pytest.mark.parametrize("completion, gold, expected", [
    ("D", "(D) Alina", True), ("C", "(D) Alina", False),
    ("C", "C Cecile", True), ("C", "Alina and the answer is\n(C) Cecile", True),
    ("B", "Alina and the answer is\n(C) Cecile", False),
    ("D. it can't be A or B", "D", True), ("D. it can't be A or B", "B", False),
    ("The answer is for sure D, it can't be A or B", "D", True),
    ("The answer is for sure D, it can't be A or B", "A", False),
    ("Let's think. It's not A because it doesn't make sense, therefore I think it's B", "B", True),
    ("réponse est C non A", "C", True), ("réponse est C non A", "A", False),
    ("B。不是 A", "B", True), ("B。不是 A", "A", False),
    ("answer: (c)", "C", True), ("answer: (c)", "A", False),
    (r"\mathrm{E}*2", "E", False), (r"\mathrm{E}", "E", True),
])
def test_option_letters(completion, gold, expected):
    assert verify(completion, gold) is expected


# --- the reward contract ---------------------------------------------------------------

def test_a_matcher_bug_is_infra_error_not_a_zero(monkeypatch):
    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug in the matcher")

    monkeypatch.setattr(matcher_mod, "decide", broken)
    matcher_mod.clear_cache()
    v = MathVerifier()
    out = v.verify_batch([Task(id="t", prompt="", answer="5")] * 2, [r"\boxed{5.0}", "no answer here"])
    assert len(out) == 2
    assert out[0].status == "infra_error" and math.isnan(out[0].reward)
    assert "ZeroDivisionError" in out[0].info["error"]
    assert out[1].scored and out[1].reward == 0.0          # nothing to compare: judged, wrong
    with pytest.raises(MatchError, match="ZeroDivisionError"):
        verify(r"\boxed{5.0}", "5")


def test_a_short_result_list_raises_instead_of_shifting_rewards(monkeypatch):
    real_map = pool_mod.SymbolicPool.map

    def short_map(self, pairs, timeout_s):
        return real_map(self, pairs, timeout_s)[:-1]

    monkeypatch.setattr(pool_mod.SymbolicPool, "map", short_map)
    matcher_mod.clear_cache()
    preds, golds = ["(x+1)^2", "(x+2)^2"], ["x^2+2x+1", "x^2+4x+4"]
    with pytest.raises(RuntimeError, match="answered 1 of 2"):
        match_many(preds, golds)
    v = MathVerifier()
    tasks = [Task(id="a", prompt="", answer=g) for g in golds]
    with pytest.raises(RuntimeError):
        v.verify_batch(tasks, [rf"\boxed{{{p}}}" for p in preds])


def test_batch_returns_one_verdict_per_completion_in_order():
    v = MathVerifier()
    golds = ["1", "x^2+2x+1", "3", r"\frac12"]
    completions = [r"\boxed{1}", r"\boxed{(x+1)^2}", "no idea", r"\boxed{0.25}"]
    out = v.verify_batch([Task(id=str(i), prompt="", answer=g) for i, g in enumerate(golds)], completions)
    assert [o.correct for o in out] == [True, True, False, False]


# --- properties --------------------------------------------------------------------------

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=60, deadline=None)
@given(st.integers(1000, 10 ** 12), st.sampled_from([r",\!", r",\! ", r"{,}\!", ","]))
def test_math_thousands_separators(n, sep):
    groups = f"{n:,}".split(",")
    written = sep.join(groups)
    assert match_many([written, written], [str(n), str(n + 1)])[0].equal
    assert not match_many([written], [str(n + 1)])[0].equal


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 59), st.integers(0, 59), st.integers(0, 59), st.integers(0, 59))
def test_ratios_equal_only_term_by_term(a, b, c, d):
    assert match_many([f"{a}:{b:02d}"], [f"{c}:{d:02d}"])[0].equal is (a == c and b == d)


@settings(max_examples=40, deadline=None)
@given(st.integers(-10 ** 6, 10 ** 6), st.integers(1, 999))
def test_bare_fractions_are_never_read_as_their_last_number(num, den):
    if math.gcd(num, den) != 1 or den == 1:
        return
    text = rf"$\frac{{{num}}}{{{den}}}$"
    assert not verify(text, str(den)) and verify(text, f"{num}/{den}")


# --- the vendored peer suites, as a regression floor -----------------------------------

# Suites whose peer pays only for one answer format, run with the options a user who
# wants that reward sets (bench/math_peer_suites.py, PEER_FORMAT).
PEER_FORMAT = {"rllm": ("boxed", True), "skyrl": ("auto", True)}


def test_peer_suites_floor():
    """Proctor on every labelled row of the eight peers' suites (bench/peer_suites/): the
    floor is below the measured 98% by the rows a loaded machine can time out on; the
    five false positives are the disputed rows the bench lists."""
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "bench" / "peer_suites"
    right = fp = n = 0
    for f in sorted(root.glob("*.jsonl")):
        mode, strict = PEER_FORMAT.get(f.stem, ("auto", False))
        for row in map(json.loads, f.open(encoding="utf-8")):
            got = verify(row["pred"], row["gold"], extract=mode, strict=strict)
            n += 1
            right += got is row["expected"]
            fp += got and not row["expected"]
    assert n >= 640
    assert right / n >= 0.96 and fp <= 5, (right, n, fp)


def test_peer_format_matches_the_bench():
    """The floor runs each suite with the options the bench reports it with."""
    from pathlib import Path

    source = (Path(__file__).resolve().parent.parent / "bench" / "math_peer_suites.py").read_text(encoding="utf-8")
    for suite, (mode, strict) in PEER_FORMAT.items():
        assert f'"{suite}": ("{mode}", {strict},' in source, suite


@pytest.mark.parametrize("text", [
    "$" + "x\n" * 20000 + "9", "cost is $5 and then\n" + "line of text here\n" * 2000 + " so 7",
    "\\( a\n" * 3000 + " 7", "answer is " * 5000, "The answer is. " * 5000, "答案" * 20000,
    "answer" + " is " * 20000, "$" * 50000, "\\boxed{" * 5000, "{" * 50000,
])
def test_long_pathological_completions_extract_in_linear_time(text):
    import time

    t0 = time.perf_counter()
    extract(text)
    extract(text, choice=True)
    assert time.perf_counter() - t0 < 1.0      # the quadratic versions took 2-8 s


# --- a decimal that is another decimal rounded (AReaL's precision rows) ---------------

@pytest.mark.parametrize("pred, gold, expected", [
    (r"\boxed{0.0666668}", r"\boxed{0.066666793}", True),     # 7 places, correctly rounded
    (r"\boxed{0.066666793}", r"\boxed{0.0666668}", True),     # either side may be the rounded one
    ("3.141593", "3.14159265", True),
    (r"\boxed{0.0666667}", r"\boxed{0.066666793}", False),    # truncated, not rounded
    (r"\boxed{0.067}", r"\boxed{0.066793}", False),           # too few significant digits
    (r"\boxed{2.23}", r"\boxed{2.232}", False),
    (r"\boxed{2.232}", r"\boxed{2.23}", False),
    ("1234567.5", "1234567.56", False),                       # 1234567.6 is the rounding
    ("1234567", "1234567.4", False),                          # an integer is exact, never a rounding
])
def test_rounded_decimals(pred, gold, expected):
    assert verify(pred, gold) is expected


@settings(max_examples=80, deadline=None)
@given(st.integers(10 ** 7, 10 ** 9), st.integers(1, 3))
def test_a_decimal_equals_its_correct_rounding_only(digits, extra):
    from decimal import ROUND_HALF_EVEN, Decimal

    gold = Decimal(digits).scaleb(-9)                       # 0.0100000000 .. 1.000000000
    places = Decimal(1).scaleb(-(9 - extra))
    rounded = gold.quantize(places, rounding=ROUND_HALF_EVEN)
    off_by_one = rounded - places if rounded <= gold else rounded + places   # away from the gold
    significant = len(str(rounded).replace(".", "").lstrip("0"))
    assert verify(str(rounded), str(gold)) is (rounded == gold or significant >= 6)
    assert not verify(str(off_by_one), str(gold))


# --- one function, its argument renamed -------------------------------------------------

@pytest.mark.parametrize("pred, gold, expected", [
    ("W(x)=x^2+1", "W(n)=n^2+1", True),
    ("f(x)=2x", "f(n)=2n", True),
    (r"$f(x) = \sin x$", r"$f(n) = \sin n$", True),
    ("f(x)=x^2+2x+1", "f(n)=(n+1)^2", True),                 # renamed, then compared symbolically
    ("f(x)=x+n", "f(n)=2n", False),                           # n is not the prediction's argument
    ("f(x)=n", "f(n)=n", False),
    ("f(x)=x", "f(n)=n+x", False),                            # renaming would capture x
    ("g(x)=x", "f(n)=n", False),                              # another function
    ("f(t)=t^2", "f(n)=n^3", False),
])
def test_renamed_function_argument(pred, gold, expected):
    assert verify(pred, gold) is expected


@settings(max_examples=40, deadline=None)
@given(st.integers(-9, 9), st.integers(-9, 9), st.integers(-9, 9), st.sampled_from("xtk"))
def test_renamed_argument_polynomials(a, b, c, arg):
    pred = f"f({arg})={a}{arg}^2+{b}{arg}+{c}".replace("+-", "-")
    same = f"f(n)={a}n^2+{b}n+{c}".replace("+-", "-")
    other = f"f(n)={a}n^2+{b}n+{c + 1}".replace("+-", "-")
    assert verify(pred, same) and not verify(pred, other)
