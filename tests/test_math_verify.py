"""The math matcher, its worker pool and MathVerifier (proctor.envs.math)."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from proctor.envs.core.types import Task, Verdict
from proctor.envs.math import (MathVerifier, answers_equal, clear_cache, match, parse_gold, shutdown_pool,
                               verify)
from proctor.envs.math import pool as pool_mod
from proctor.envs.math.answer import decide, prepare

MARGIN_S = 1.5     # pool round trip + a loaded 2-core machine


@pytest.fixture(scope="module", autouse=True)
def _pool():
    pool_mod.get_pool()                              # start the worker pool once for the module
    yield
    shutdown_pool()


def fast(pred: str, gold: str):
    """The inline tiers only (no pool): None means they could not decide."""
    return decide(prepare(pred), prepare(gold, gold=True))


# --- property tests: equivalent forms of numbers ------------------------------------

def _forms(fr: Fraction) -> list[str]:
    n, d = fr.numerator, fr.denominator
    sign = "-" if n < 0 else ""
    a = abs(n)
    forms = [f"{sign}\\frac{{{a}}}{{{d}}}", f"{sign}\\dfrac{{{a}}}{{{d}}}", f"{n}/{d}",
             f"\\frac{{{n}}}{{{d}}}", f"{sign}\\frac{{{3 * a}}}{{{3 * d}}}", f"${sign}\\tfrac{{{a}}}{{{d}}}$"]
    if d == 1:
        forms += [str(n), f"{n}.0", f"{n:,}"]
    t = d
    for p in (2, 5):
        while t % p == 0:
            t //= p
    if t == 1:                                   # terminating decimal
        # Exact: a float division here wrote 47619/5 as 9523.799999999999, not an equal form.
        exact = format(Decimal(fr.numerator) / Decimal(fr.denominator), "f")
        forms.append(exact.rstrip("0").rstrip(".") if "." in exact else exact)
    return forms


fractions_st = st.builds(Fraction, st.integers(-10 ** 6, 10 ** 6), st.integers(1, 400))


@settings(max_examples=200, deadline=None)
@given(fractions_st, st.data())
def test_equivalent_forms_are_equal(fr, data):
    forms = _forms(fr)
    a = data.draw(st.sampled_from(forms))
    b = data.draw(st.sampled_from(forms))
    r = fast(a, b)
    assert r is not None and r.equal, (a, b, r)
    assert verify(f"so the answer is $\\boxed{{{a}}}$", b)


@settings(max_examples=200, deadline=None)
@given(fractions_st, fractions_st, st.data())
def test_different_numbers_are_not_equal(x, y, data):
    assume(x != y)
    a = data.draw(st.sampled_from(_forms(x)))
    b = data.draw(st.sampled_from(_forms(y)))
    r = fast(a, b)
    assert r is not None and not r.equal, (a, b, r)


@settings(max_examples=100, deadline=None)
@given(st.integers(-10 ** 12, 10 ** 12))
def test_integer_forms(v):
    gold = str(v)
    for form in (f"{v:,}", f"{v:,}".replace(",", "{,}"), f"\\text{{{v}}}", f"x = {v}", f"{v} \\text{{ cm}}"):
        assert answers_equal(form, gold), form
    assert not answers_equal(str(v + 1), gold)


# --- the tiers on known cases ---------------------------------------------------------

@pytest.mark.parametrize("pred, gold, expected", [
    (r"\dfrac{1}{2}", "0.5", True), ("50\\%", "0.5", True), ("50\\%", "50", True), ("50", "0.5", False),
    (r"8.7 \times 10^{2}", "870", True), (r"2\frac{1}{2}", r"\frac52", True), (r"1\,000\,000", "1000000", True),
    (r"\text{north}", "North", True), (r"\text{thorn}", r"\text{north}", False), ("(B)", "B", True),
    (r"\textbf{(C)}", "B", False), (r"5 \text{ cm}^2", "5", True), (r"90^\circ", "90", True),
    ("(1,2]", "[1,2)", False), (r"\{3,1,2\}", r"\{1,2,3\}", True), (r"x = 1, 2", "2, 1", True),
    (r"\pm 2021", "2021", False), (r"\frac{1}{2^{99}}", r"\frac{1}{2^{98}}", False),
    (r"\begin{pmatrix}\frac12\\3\end{pmatrix}", r"\begin{pmatrix}0.5\\3\end{pmatrix}", True),
    ("0.33", r"\frac13", False), ("0.333333", r"\frac13", True),
])
def test_fast_tiers(pred, gold, expected):
    r = fast(pred, gold)
    assert r is not None and r.equal is expected, r
    assert answers_equal(pred, gold) is expected


@pytest.mark.parametrize("pred, gold, expected", [
    (r"2\sqrt{2}", r"\sqrt{8}", True), (r"\frac{\sqrt2}{2}", r"\frac{1}{\sqrt2}", True), (r"\sqrt3", r"\sqrt2", False),
    (r"\frac{\pi}{2}", r"\pi/2", True), (r"3.14", r"\pi", False), ("3.14159", r"\pi", True),
    (r"\frac{1}{2006!}", r"\frac{1}{2004!}", False), ("9" * 900, "9" * 899 + "8", False),
    (r"x^2+2x+1", r"(x+1)^2", True), (r"1-\frac1e", r"1+\frac1e", False), (r"e^{16}-1", r"-1+e^{16}", True),
    (r"y=-\frac{x}{2}+\frac34", r"2x+4y-3=0", True), (r"3x-y+13=0", r"3x+4y+14=0", False),
    ("x = 3", "3", True), ("y = 3", "x = 3", False), (r"(3, \infty)", "x > 3", True), (r"x \geq 3", r"(3,\infty)", False),
    (r"14-i", r"14 - i", True), (r"(1+i)^2", "2i", True), (r"(2\sqrt2, 1)", r"(\sqrt8, 1)", True),
    (r"2^{3^2}", "512", True),
])
def test_symbolic_tier(pred, gold, expected):
    r = match(pred, gold)
    assert r.equal is expected, r


def test_parsed_gold_is_reused():
    g = parse_gold(r"\boxed{\frac{3}{4}}")
    assert parse_gold(g) is g
    assert all(answers_equal(p, g) for p in ("0.75", r"\dfrac34", "3/4", "75\\%"))
    assert not answers_equal("0.7", g)


def test_cache_in_front_of_the_symbolic_tier():
    clear_cache()
    pred, gold = r"\sqrt{2}+\sqrt{3}", r"\sqrt{5+2\sqrt{6}}"
    assert match(pred, gold).equal
    t0 = time.perf_counter()
    for _ in range(50):
        assert match(pred, gold).equal
    assert (time.perf_counter() - t0) / 50 < 0.005


# --- hang-proofing -------------------------------------------------------------------

ADVERSARIAL = [
    r"\dfrac{5^{(5^{(5^{(5^5)})}-4)}-5}{16}", r"10^{10^{10}}", r"(10^6)!", r"9!!!", r"\sum_{n=1}^{10^9} n^n",
    "{" * 10000 + "5" + "}" * 10000, "(" * 500 + "5" + ")" * 500, "1+" * 3000 + "1",
]


@pytest.mark.parametrize("answer", ADVERSARIAL)
def test_adversarial_answers_come_back_in_time(answer):
    t0 = time.perf_counter()
    r = match(answer, "7", timeout_s=1.0)
    assert time.perf_counter() - t0 < 1.0 + MARGIN_S
    assert not r.equal and r.reason in ("timeout", "too_complex", "not_equal", "unparsable"), r
    assert not verify(f"The answer is $\\boxed{{{answer}}}$.", "7", timeout_s=1.0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(max_size=400), st.sampled_from(["5", r"\frac{1}{2}", r"2\sqrt{3}", "(1, 2)", "x^2+1"]))
def test_any_text_returns_in_time_and_never_raises(text, gold):
    t0 = time.perf_counter()
    assert verify(text, gold, timeout_s=1.0) in (True, False)
    assert verify(f"\\boxed{{{text}}}", gold, timeout_s=1.0) in (True, False)
    assert time.perf_counter() - t0 < 2 * (1.0 + MARGIN_S)


def test_pool_recovers_after_a_timed_out_worker():
    pool = pool_mod.get_pool()
    before = pool.replaced
    r = match(r"\dfrac{5^{(5^{(5^{(5^5)})}-4)}-5}{17}", "3", timeout_s=0.5)
    assert r.reason in ("timeout", "too_complex")
    assert match(r"3\sqrt{3}", r"\sqrt{27}").equal
    assert pool_mod.get_pool().replaced >= before + (r.reason == "timeout")


def test_pool_recovers_after_an_externally_killed_worker():
    pool = pool_mod.get_pool()
    with pool._cond:
        victims = [w.pid for w in pool._all]
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.2)
    # Idle workers found dead are replaced before use: no verdict is lost.
    assert all(match(rf"{k}\sqrt[3]{{2}}", rf"\sqrt[3]{{{2 * k ** 3}}}").equal for k in (5, 6, 7))
    assert pool_mod.get_pool().replaced >= len(victims)


def test_shutdown_then_reuse():
    shutdown_pool()
    assert match(r"2\sqrt{5}", r"\sqrt{20}").equal


def test_four_threads_at_once():
    cases = [(r"\boxed{\frac{1}{2}}", "0.5", True), (r"\boxed{2\sqrt{3}}", r"\sqrt{12}", True),
             (r"\boxed{(x+2)^2}", "x^2+4x+4", True), (r"\boxed{7}", "8", False),
             (r"\boxed{\sqrt{5}}", r"\sqrt{6}", False)]
    errors: list[str] = []

    def work(k: int) -> None:
        for i in range(10):
            completion, gold, expected = cases[(i + k) % len(cases)]
            completion = completion.replace("}", f"+{k}-{k}}}", 1) if i % 2 and "sqrt" in completion else completion
            if verify(completion, gold) is not expected:
                errors.append(f"thread {k}: {completion} vs {gold}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and not any(t.is_alive() for t in threads)


# --- MathVerifier ----------------------------------------------------------------------

def test_math_verifier_verdicts():
    v = MathVerifier()
    task = Task(id="t1", prompt="1/2 as a decimal?", answer="0.5")
    good = v.verify(task, r"It is $\boxed{\dfrac{1}{2}}$.")
    bad = v.verify(task, r"It is $\boxed{0.4}$.")
    none = v.verify(task, "I give up.")
    for verdict in (good, bad, none):
        assert isinstance(verdict, Verdict) and verdict.scored and 0.0 <= verdict.reward <= 1.0
        assert {"extracted", "tier", "reason"} <= set(verdict.info)
    assert good.reward == 1.0 and good.correct and good.info["tier"] == "exact"
    assert bad.reward == 0.0 and not bad.correct
    assert none.reward == 0.0 and none.info["reason"] == "no_answer"
    v.close()


def test_verify_batch_mixes_fast_and_symbolic_and_adversarial():
    v = MathVerifier(timeout_s=1.0)
    gold = r"2\sqrt{2}"
    completions = [r"\boxed{\sqrt{8}}", r"\boxed{2\sqrt2}", r"\boxed{3}", "no idea",
                   r"\boxed{10^{10^{10}}}", r"\boxed{\dfrac{5^{(5^{(5^{(5^5)})}-4)}-5}{16}}", r"\boxed{\sqrt{2}\cdot 2}",
                   r"\boxed{2^{3/2}}"]
    tasks = [Task(id="g", prompt="", answer=gold)] * len(completions)
    t0 = time.perf_counter()
    out = v.verify_batch(tasks, completions)
    assert time.perf_counter() - t0 < 2 * (1.0 + MARGIN_S)
    assert [o.correct for o in out] == [True, True, False, False, False, False, True, True]
    assert all(o.scored for o in out)
    assert out[3].info["reason"] == "no_answer"


def test_averify_batch_from_asyncio():
    v = MathVerifier()
    tasks = [Task(id=str(i), prompt="", answer=str(i)) for i in range(6)]
    completions = [rf"\boxed{{{i}}}" if i % 2 else rf"\boxed{{{i + 1}}}" for i in range(6)]
    out = asyncio.run(v.averify_batch(tasks, completions))
    assert [o.correct for o in out] == [bool(i % 2) for i in range(6)]


def test_task_without_answer_is_a_usage_error():
    with pytest.raises(ValueError, match="Task.answer"):
        MathVerifier().verify(Task(id="x", prompt=""), r"\boxed{1}")
