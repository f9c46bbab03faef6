"""Accuracy and speed of ``proctor.envs.math.verify`` vs Math-Verify on one labelled set.

    .venv/bin/python bench/math_verify_bench.py                  # full run
    .venv/bin/python bench/math_verify_bench.py --regenerate     # rewrite bench/math_cases.jsonl first
    .venv/bin/python bench/math_verify_bench.py --json /tmp/math_bench.json

Math-Verify runs as its users call it: ``parse("\\boxed{" + gold + "}")``,
``parse(completion)``, ``verify(gold, pred)`` with default timeouts, in the main
thread of a worker process that a watchdog kills (and restarts) after
``--mv-watchdog`` seconds, so a hang cannot stall the bench. Its per-case time is
measured inside that worker (IPC not counted). Proctor's ``verify`` runs in this
process, every call timed around the call (its worker pool's IPC included).

The "realistic mix" is GRPO-shaped: groups of 8 completions sharing one gold,
mostly integer and fraction answers after long reasoning. Proctor scores each
group with ``MathVerifier.verify_batch`` (as a trainer does) and, separately,
call by call with ``verify``; Math-Verify scores case by case.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import sys
import time
from fractions import Fraction
from pathlib import Path
from machine import cpu_model  # bench/machine.py: run as `python bench/...`

os.environ["OMP_NUM_THREADS"] = "1"

HERE = Path(__file__).resolve().parent
CASES = HERE / "math_cases.jsonl"


def _percentile(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


# --- the labelled set ------------------------------------------------------------------
# (prediction, gold, label) per kind. Labels are mathematical truth (plus the three
# documented conventions: a percent sign may be read as a unit, 2\frac12 is a mixed
# number, trailing unit words are not part of the value); pairs whose truth hinges
# on anything else (is 0.3333 "equal" to 1/3?) are left out.

FAMILIES: dict[str, list[tuple[str, str, bool]]] = {
    "integer": [
        ("42", "42", True), ("042", "42", True), ("42.0", "42", True), ("-7", "-7", True),
        ("7", "-7", False), ("41", "42", False), ("1,000", "1000", True), ("1{,}000", "1000", True),
        ("1\\,000\\,000", "1000000", True), ("10000", "1000", False), ("\\textbf{42}", "42", True),
        ("+5", "5", True), ("\\mathbf{12}", "12", True), ("1,234,567", "1234567", True),
        ("123,456", "123465", False), ("0", "0", True), ("-0", "0", True), ("100", "10", False),
    ],
    "decimal": [
        ("0.5", "\\frac{1}{2}", True), (".5", "0.5", True), ("0.50", "0.5", True),
        ("2.75", "\\frac{11}{4}", True), ("2.7", "\\frac{11}{4}", False), ("0.33", "\\frac13", False),
        ("3.50", "3.5", True), ("1.25", "1.2", False), ("0.125", "\\frac{1}{8}", True),
        ("0.13", "\\frac{1}{8}", False), ("-1.5", "-\\frac{3}{2}", True), ("1.5", "-1.5", False),
        ("0.0625", "\\frac{1}{16}", True), ("2.5", "\\frac{5}{2}", True), ("0.2", "\\frac{1}{4}", False),
    ],
    "fraction": [
        ("\\frac{3}{4}", "0.75", True), ("3/4", "\\frac34", True), ("\\dfrac{6}{8}", "\\frac{3}{4}", True),
        ("\\tfrac{3}{4}", "\\frac34", True), ("\\frac{4}{3}", "\\frac{3}{4}", False),
        ("-\\frac{1}{2}", "\\frac{-1}{2}", True), ("\\frac{1}{-2}", "-0.5", True),
        ("\\frac{2}{4}", "\\frac12", True), ("\\frac{1}{2^{10}}", "\\frac{1}{1024}", True),
        ("\\frac{5}{12}", "\\frac{7}{12}", False), ("\\dfrac{10}{3}", "\\frac{10}{3}", True),
        ("\\frac{10}{3}", "3.33", False), ("\\frac{22}{7}", "\\frac{44}{14}", True),
        ("\\frac{9}{10}", "\\frac{10}{9}", False), ("\\frac{-3}{-4}", "\\frac{3}{4}", True),
        ("\\frac{1}{3}+\\frac{1}{6}", "\\frac12", True),
    ],
    "mixed_number": [
        ("2\\frac{1}{2}", "\\frac52", True), ("2 1/2", "2.5", True), ("3\\frac{1}{4}", "3.25", True),
        ("-1\\frac{1}{2}", "-1.5", True), ("1\\frac{2}{3}", "\\frac{5}{3}", True),
    ],
    "scientific": [
        ("8.7 \\times 10^{2}", "870", True), ("1.5 \\times 10^{-3}", "0.0015", True), ("1e5", "100000", True),
        ("2.5\\cdot 10^3", "2500", True), ("3 \\times 10^{8}", "300000000", True),
        ("3 \\times 10^{7}", "300000000", False), ("10^{6}", "1000000", True),
        ("6.02 \\times 10^{23}", "6.02\\times10^{23}", True), ("6.2\\times10^{23}", "6.02\\times10^{23}", False),
        ("4.5 \\times 10^{-2}", "0.045", True), ("4.5 \\times 10^{-2}", "0.45", False),
        ("1.2\\times 10^{4}", "12000", True),
    ],
    "percent": [
        ("50\\%", "50", True), ("50\\%", "0.5", True), ("50", "0.5", False), ("5\\%", "50", False),
        ("12.5\\%", "\\frac18", True), ("25\\%", "25\\%", True), ("25\\%", "20\\%", False),
        ("75\\%", "0.75", True), ("40\\%", "0.04", False), ("20\\%", "20\\%", True),
        ("\\frac{1}{4}", "25\\%", True), ("100\\%", "1", True),
    ],
    "units": [
        ("5 \\text{ cm}", "5", True), ("12 \\text{ square units}", "12", True), ("18 \\text{ dollars}", "18", True),
        ("\\$18", "18", True), ("18.00", "18", True), ("4\\pi \\text{ cm}^2", "4\\pi", True),
        ("6 \\text{ inches}", "6", True), ("7 \\text{ cm}", "5", False), ("90^\\circ", "90", True),
        ("45^{\\circ}", "45", True), ("45^\\circ", "30", False), ("5 \\text{ meters}", "5", True),
        ("\\$2.50", "2.5", True), ("120 \\text{ miles}", "120", True), ("36 \\mbox{ apples}", "36", True),
        ("3 \\text{ hours}", "4", False), ("15 \\text{ km/h}", "15", True),
    ],
    "text": [
        ("\\text{north}", "north", True), ("North", "\\text{north}", True), ("\\text{south}", "\\text{north}", False),
        ("\\text{Yes}", "yes", True), ("\\text{no}", "\\text{yes}", False), ("\\text{Evelyn}", "\\text{Evelyn}", True),
        ("Devon", "\\text{Evelyn}", False), ("\\textbf{even}", "\\text{even}", True), ("odd", "\\text{even}", False),
        ("\\text{no solution}", "\\text{No solution}", True), ("\\text{thorn}", "\\text{north}", False),
        ("\\text{Tuesday}", "\\text{Tuesday}", True), ("\\text{Monday}", "\\text{Tuesday}", False),
    ],
    "mcq": [
        ("(B)", "B", True), ("B", "(B)", True), ("\\text{(C)}", "C", True), ("\\textbf{(D)}", "D", True),
        ("(B)", "C", False), ("A", "B", False), ("(E) 12", "E", True), ("\\text{(A) } 5", "B", False),
        ("D", "\\text{(D)}", True), ("(C)", "(A)", False),
    ],
    "roots": [
        ("2\\sqrt{2}", "\\sqrt{8}", True), ("\\sqrt{8}", "2\\sqrt2", True),
        ("\\frac{\\sqrt{2}}{2}", "\\frac{1}{\\sqrt{2}}", True), ("\\sqrt{3}", "\\sqrt{2}", False),
        ("3\\sqrt{2}", "\\sqrt{18}", True), ("\\sqrt{12}", "2\\sqrt{3}", True), ("2\\sqrt{3}", "3\\sqrt{2}", False),
        ("\\sqrt[3]{8}", "2", True), ("\\sqrt[3]{16}", "2\\sqrt[3]{2}", True),
        ("\\frac{1+\\sqrt5}{2}", "\\frac{\\sqrt5+1}{2}", True), ("\\frac{1-\\sqrt5}{2}", "\\frac{1+\\sqrt5}{2}", False),
        ("\\sqrt{2}+\\sqrt{3}", "\\sqrt{5+2\\sqrt{6}}", True), ("\\sqrt{50}", "5\\sqrt{2}", True),
        ("5\\sqrt{3}", "5\\sqrt{2}", False), ("\\sqrt{2}", "1.414", False), ("4\\sqrt{2}", "\\sqrt{32}", True),
        ("\\frac{\\sqrt{6}}{2}", "\\sqrt{\\frac{3}{2}}", True), ("\\sqrt{2}\\sqrt{3}", "\\sqrt{6}", True),
        ("2^{1/2}", "\\sqrt{2}", True),
    ],
    "pi": [
        ("2\\pi", "2\\pi", True), ("\\frac{\\pi}{2}", "\\dfrac{\\pi}{2}", True), ("\\pi/2", "\\frac{\\pi}{2}", True),
        ("\\frac{\\pi}{2}", "\\frac{\\pi}{3}", False), ("-2\\pi", "-2\\pi", True),
        ("\\frac{3\\pi}{4}", "\\frac{3}{4}\\pi", True), ("0.75\\pi", "\\frac{3\\pi}{4}", True), ("6\\pi", "6", False),
        ("3.14", "\\pi", False), ("\\frac{22}{7}", "\\pi", False), ("36\\pi", "36 \\pi", True),
        ("\\pi^2", "2\\pi", False), ("\\frac{8\\pi}{3}", "\\frac{8}{3}\\pi", True), ("2\\pi r", "2 r \\pi", True),
    ],
    "expression": [
        ("x^2+2x+1", "(x+1)^2", True), ("x^2-1", "(x-1)(x+1)", True), ("x^2+1", "(x+1)^2", False),
        ("2x+3", "3+2x", True), ("\\frac{x}{2}", "0.5x", True), ("e^{16}-1", "-1+e^{16}", True),
        ("1-\\frac{1}{e}", "1+\\frac{1}{e}", False), ("\\frac{1}{x}+\\frac{1}{y}", "\\frac{x+y}{xy}", True),
        ("\\sin^2 x+\\cos^2 x", "1", True), ("2\\sin x\\cos x", "\\sin 2x", True), ("a^2-b^2", "(a-b)(a+b)", True),
        ("a^2+b^2", "(a+b)^2", False), ("\\log_2 8", "3", True), ("\\ln(e^2)", "2", True),
        ("\\binom{5}{2}", "10", True), ("5!", "120", True), ("3x+2", "3x-2", False), ("n(n+1)/2", "\\frac{n^2+n}{2}", True),
        ("\\frac{n(n+1)}{2}", "\\frac{n(n-1)}{2}", False), ("2^{n+1}", "2\\cdot 2^n", True),
        ("\\frac{-b+\\sqrt{b^2-4ac}}{2a}", "\\dfrac{-b+\\sqrt{b^2-4ac}}{2a}", True),
        ("\\frac{x+1}{x-1}", "1 + \\frac{2}{x-1}", True), ("\\frac{x+1}{x-1}", "1 + \\frac{1}{x-1}", False),
    ],
    "equation": [
        ("y=2x+3", "y=3+2x", True), ("2x+4y-3=0", "y=-\\frac{x}{2}+\\frac{3}{4}", True),
        ("y = -\\frac{1}{2}x + \\frac34", "2x+4y=3", True), ("3x-y+13=0", "3x+4y+14=0", False),
        ("x^2+y^2=1", "x^2+y^2=1", True), ("x^2+y^2=4", "x^2+y^2=1", False), ("2x^2+2y^2=2", "x^2+y^2=1", True),
        ("y=x^2", "y=x^3", False), ("x+y=5", "x+y=6", False), ("y = 2x+3", "2x+3", True),
        ("(x-1)^2+(y+2)^2=9", "x^2-2x+y^2+4y-4=0", True), ("(x-1)^2+(y+2)^2=9", "(x+1)^2+(y-2)^2=9", False),
        ("y = \\frac{1}{2}x + 1", "x - 2y + 2 = 0", True), ("y = \\frac{1}{2}x - 1", "x - 2y + 2 = 0", False),
    ],
    "assignment": [
        ("x=3", "3", True), ("x = 5", "3", False), ("3", "x=3", True), ("k = 7", "7", True), ("x = -2", "2", False),
        ("a = 4", "4", True), ("n=12", "12", True), ("x = \\frac{1}{2}", "0.5", True), ("m = 2\\sqrt{2}", "\\sqrt{8}", True),
    ],
    "tuple": [
        ("(1,2)", "(1, 2)", True), ("(2,1)", "(1,2)", False), ("\\left(\\frac12, 3\\right)", "(0.5,3)", True),
        ("(1,2,3)", "(1,2)", False), ("(3, -4)", "(3,-4)", True), ("(x,y)=(1,2)", "(1,2)", True),
        ("1, 2", "(1,2)", True), ("(2\\sqrt2, 1)", "(\\sqrt8, 1)", True), ("(2\\sqrt2, 1)", "(\\sqrt2, 1)", False),
        ("(0, -\\frac{3}{2})", "(0,-1.5)", True), ("(-1, 4)", "(1, -4)", False),
        ("\\{(1,2),(3,4)\\}", "\\{(3,4),(1,2)\\}", True), ("(1,2),(3,4)", "(3,4),(1,2)", True),
        ("\\{(1,2),(3,4)\\}", "\\{(2,1),(3,4)\\}", False), ("x=2,y=3", "(2,3)", True),
        ("y=3, x=2", "x=2, y=3", True), ("x=3, y=2", "x=2, y=3", False),
    ],
    "set": [
        ("\\{1,2,3\\}", "\\{3,2,1\\}", True), ("\\{1,2\\}", "\\{1,2,3\\}", False), ("\\{1,2,2\\}", "\\{1,2\\}", True),
        ("1, 2, 3", "\\{1,2,3\\}", True), ("\\{-1, 1\\}", "\\{1,-1\\}", True), ("\\{\\frac12, 2\\}", "\\{2, 0.5\\}", True),
        ("\\emptyset", "\\varnothing", True), ("\\{\\}", "\\emptyset", True), ("\\{1\\}", "\\emptyset", False),
        ("\\{2, 4, 6\\}", "\\{2, 4, 8\\}", False),
    ],
    "interval": [
        ("[1,2)", "[1,2)", True), ("(1,2]", "[1,2)", False), ("[1,2]", "(1,2)", False),
        ("(-\\infty, 3)", "(-\\infty,3)", True), ("(-\\infty,3]", "(-\\infty,3)", False),
        ("(-\\infty, -1) \\cup (1, \\infty)", "(1,\\infty)\\cup(-\\infty,-1)", True), ("(0,\\frac12]", "(0,0.5]", True),
        ("[0, \\infty)", "[0,\\infty)", True), ("x > 3", "(3,\\infty)", True), ("(3,\\infty)", "x>3", True),
        ("x \\geq 3", "(3,\\infty)", False), ("1 < x \\leq 2", "(1,2]", True), ("-2 \\le x \\le 2", "[-2,2]", True),
        ("x \\in [1, 2]", "[1,2]", True), ("(-\\infty, 2) \\cup (2, \\infty)", "(-\\infty, 2)", False),
        ("x<2 \\text{ or } x>5", "(-\\infty,2)\\cup(5,\\infty)", True),
        ("x<2 \\text{ or } x>6", "(-\\infty,2)\\cup(5,\\infty)", False), ("\\mathbb{R}", "(-\\infty,\\infty)", True),
        ("x \\neq 2", "(-\\infty,2)\\cup(2,\\infty)", True), ("x > 1 \\text{ and } x < 3", "(1,3)", True),
        ("x > 1 \\text{ and } x < 3", "(-\\infty, \\infty)", False),
    ],
    "matrix": [
        ("\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", True),
        ("\\begin{bmatrix}1&2\\\\3&4\\end{bmatrix}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", True),
        ("\\begin{pmatrix}1&2\\\\3&5\\end{pmatrix}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", False),
        ("\\begin{pmatrix}1&3\\\\2&4\\end{pmatrix}", "\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}", False),
        ("\\begin{pmatrix}\\frac12\\\\ 3\\end{pmatrix}", "\\begin{pmatrix}0.5\\\\3\\end{pmatrix}", True),
        ("(1,2,3)", "\\begin{pmatrix}1\\\\2\\\\3\\end{pmatrix}", True),
        ("\\begin{pmatrix}1\\\\2\\end{pmatrix}", "\\begin{pmatrix}1&2\\end{pmatrix}", False),
        ("\\begin{pmatrix} 2\\sqrt{2} & 0 \\\\ 0 & 1\\end{pmatrix}", "\\begin{pmatrix}\\sqrt8&0\\\\0&1\\end{pmatrix}", True),
        ("\\begin{pmatrix} -1 \\\\ 2 \\end{pmatrix}", "\\begin{pmatrix} 1 \\\\ -2 \\end{pmatrix}", False),
    ],
    "multi_answer": [
        ("x = 1, 2", "1, 2", True), ("2, 1", "1,2", True), ("x=1 \\text{ or } x=2", "1, 2", True),
        ("1, 3", "1,2", False), ("1", "1,2", False), ("1, 2, 3", "1,2", False),
        ("x = 2 \\pm \\sqrt{3}", "2+\\sqrt{3}, 2-\\sqrt{3}", True), ("2 \\pm \\sqrt{3}", "2+\\sqrt{3}", False),
        ("\\pm 2021", "2021", False), ("\\pm 2", "2,-2", True), ("-3, 3", "\\pm 3", True),
        ("x = -1 \\text{ and } x = 5", "5, -1", True), ("\\frac{1}{2}, -3", "-3, 0.5", True),
    ],
    "precision": [
        ("\\frac{1}{2^{99}}", "\\frac{1}{2^{98}}", False), ("\\frac{1}{2006!}", "\\frac{1}{2004!}", False),
        ("\\frac{1}{2^{100}}", "2^{-100}", True), ("10^{-20}", "10^{-21}", False), ("1+10^{-12}", "1", False),
        ("\\frac{1}{3^{40}}", "3^{-40}", True), ("2^{64}", "18446744073709551616", True),
        ("2^{64}", "18446744073709551615", False), ("1.0000001", "1", False), ("\\frac{1}{10^{30}}", "10^{-30}", True),
        ("\\frac{\\pi}{10^{20}}", "\\frac{\\pi}{10^{21}}", False), ("e^{-50}", "e^{-51}", False),
    ],
    "complex": [
        ("3+4i", "4i+3", True), ("14-i", "14 - i", True), ("3-4i", "3+4i", False), ("\\sqrt{-1}", "i", True),
        ("i^2", "-1", True), ("2i", "-2i", False), ("\\frac{1+i}{2}", "\\frac12+\\frac{i}{2}", True),
        ("(1+i)^2", "2i", True),
    ],
    "powers": [
        ("2^{10}", "1024", True), ("2^{10}", "1000", False), ("3^4", "81", True), ("10^3", "1000", True),
        ("2^{-1}", "\\frac12", True), ("4^{1/2}", "2", True), ("8^{2/3}", "4", True), ("e^{\\ln 5}", "5", True),
        ("2^{3^2}", "512", True), ("(2^3)^2", "512", False),
    ],
}

_SENTENCES = (
    "First, we compute ${a} \\times {b} = {ab}$.",
    "Adding ${a}$ and ${b}$ gives ${apb}$.",
    "Let $n = {a}$; then $n^2 = {a2}$.",
    "We check the case $k = {b}$ separately, which gives $\\frac{{{a}}}{{{b}}}$.",
    "Since ${a} > {c}$, the inequality holds.",
    "Let me double-check this step: ${ab} - {b} = {abmb}$.",
    "So far the running total is ${apb}$, and we continue with the next part.",
    "Rewriting, $x^2 - {apb}x + {ab} = 0$ factors as $(x - {a})(x - {b}) = 0$.",
    "By the Pythagorean theorem, $c^2 = {a}^2 + {b}^2 = {sq}$.",
    "Hmm, I should be careful with the units here and keep everything in the same measure.",
)
_CLOSERS = ("Putting everything together, we are done.", "This completes the computation.",
            "All cases have been considered.")


def reasoning(rng: random.Random, n_chars: int) -> str:
    """Filler reasoning with inline math, ending on a sentence without numbers."""
    out: list[str] = []
    size = 0
    while size < n_chars:
        a, b, c = rng.randint(2, 60), rng.randint(2, 60), rng.randint(1, 50)
        s = rng.choice(_SENTENCES).format(a=a, b=b, c=c, ab=a * b, apb=a + b, a2=a * a, abmb=a * b - b,
                                          sq=a * a + b * b)
        out.append(s)
        size += len(s) + 1
        if rng.random() < 0.2:
            out.append("\n\n")
    return (" ".join(out) + " " + rng.choice(_CLOSERS)).strip()


STYLES = ("boxed", "display", "minerva", "bold", "think", "tags", "answer_is", "gsm")


def wrap(ans: str, style: str, r: str) -> str:
    plain = "$" not in ans
    if style in ("minerva", "bold", "tags") and not plain:
        style = "boxed"
    if style in ("answer_is", "gsm") and not re.fullmatch(r"-?[\d.,/]+", ans):
        style = "boxed"
    return {
        "boxed": f"{r}\n\nTherefore, the final answer is $\\boxed{{{ans}}}$.",
        "display": f"{r}\n\n\\[\n\\boxed{{{ans}}}\n\\]",
        "minerva": f"{r}\n\nFinal Answer: The final answer is ${ans}$. I hope it is correct.",
        "bold": f"{r}\n\n**Answer:** ${ans}$",
        "think": f"<think>\n{r}\n</think>\n\nThe answer is $\\boxed{{{ans}}}$.",
        "tags": f"{r}\n<answer>{ans}</answer>",
        "answer_is": f"{r}\n\nSo the answer is {ans}.",
        "gsm": f"{r}\n#### {ans}",
    }[style]


def _fraction_pairs(rng: random.Random, n: int) -> list[tuple[str, str, bool]]:
    out = []
    for _ in range(n):
        b = rng.choice([2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 16, 20, 25])
        a = rng.randint(1, 3 * b)
        fr = Fraction(a, b)
        gold = f"\\frac{{{fr.numerator}}}{{{fr.denominator}}}" if fr.denominator > 1 else str(fr.numerator)
        k = rng.randint(2, 5)
        forms = [f"\\dfrac{{{fr.numerator}}}{{{fr.denominator}}}", f"{fr.numerator}/{fr.denominator}",
                 f"\\frac{{{k * fr.numerator}}}{{{k * fr.denominator}}}"]
        if _terminates(fr):
            forms.append(_decimal(fr))
        out.append((rng.choice(forms), gold, True))
        wrong = [f"\\frac{{{fr.denominator}}}{{{fr.numerator}}}", f"\\frac{{{fr.numerator + 1}}}{{{fr.denominator}}}",
                 f"-\\frac{{{fr.numerator}}}{{{fr.denominator}}}"]
        if not _terminates(fr):
            wrong.append(f"{float(fr):.2f}")        # two decimals of 1/3 are not 1/3
        cand = rng.choice(wrong)
        if Fraction(_value(cand)) != fr:
            out.append((cand, gold, False))
    return out


def _integer_pairs(rng: random.Random, n: int) -> list[tuple[str, str, bool]]:
    out = []
    for _ in range(n):
        v = rng.choice([rng.randint(0, 99), rng.randint(100, 9999), rng.randint(10000, 10 ** 7)])
        if rng.random() < 0.15:
            v = -v
        gold = str(v)
        forms = [str(v), f"{v:,}", f"{v}.0", f"x = {v}", f"{v} \\text{{ units}}", f"\\text{{{v}}}",
                 f"{v:,}".replace(",", "{,}")]
        out.append((rng.choice(forms), gold, True))
        wrong = {v + 1, v - 1, 10 * v + 1, -v if v else 7, int(str(abs(v))[::-1]) + (v < 0)}
        wrong.discard(v)
        out.append((str(rng.choice(sorted(wrong))), gold, False))
    return out


def _terminates(fr: Fraction) -> bool:
    d = fr.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    return d == 1


def _decimal(fr: Fraction) -> str:
    s = f"{float(fr):.6f}".rstrip("0")
    return s + "0" if s.endswith(".") else s


def _value(s: str) -> Fraction:
    m = re.fullmatch(r"(-?)\\frac\{(\d+)\}\{(\d+)\}", s)
    if m:
        return Fraction(int(m.group(2)), int(m.group(3))) * (-1 if m.group(1) else 1)
    return Fraction(s)


def _special_cases(rng: random.Random) -> list[dict]:
    R = lambda n=400: reasoning(rng, n)  # noqa: E731
    cases = []

    def add(kind: str, completion: str, gold: str, label: bool) -> None:
        cases.append({"completion": completion, "gold": gold, "label": label, "kind": kind})

    # The model revises itself: only the final answer counts.
    for wrong, right in [("31", "28"), ("\\frac{1}{3}", "\\frac{2}{3}"), ("12", "15"), ("2\\sqrt{3}", "3\\sqrt{2}"),
                         ("(1, 2)", "(2, 1)"), ("7", "-7")]:
        c = f"{R()} So we get $\\boxed{{{wrong}}}$. Wait, that is not right: I dropped a term. {R()} " \
            f"Therefore the answer is $\\boxed{{{right}}}$."
        add("multi_box", c, right, True)
        add("multi_box", c, wrong, False)
        add("multi_box", f"<think>{R()} Draft: $\\boxed{{{wrong}}}$. Recheck. {R()}</think>\nFinal: $\\boxed{{{right}}}$",
            right, True)
    for a, b in [("1", "2"), ("-3", "5"), ("\\frac12", "4")]:
        c = f"{R()} The solutions are $\\boxed{{{a}}}$ and $\\boxed{{{b}}}$."
        add("multi_box", c, f"{a}, {b}", True)
        add("multi_box", c, a, False)
        add("multi_box", c, b, False)
    # Hedging between values never matches a single gold; restating one value does.
    for a, b in [("3", "4"), ("12", "13"), ("\\frac{1}{2}", "\\frac{1}{3}"), ("2", "-2")]:
        add("hedging", f"{R()} The answer is either $\\boxed{{{a}}}$ or $\\boxed{{{b}}}$.", a, False)
        add("hedging", f"{R()} The answer is either $\\boxed{{{a}}}$ or $\\boxed{{{b}}}$.", b, False)
        add("hedging", f"{R()} I am not sure, so: $\\boxed{{{a} \\text{{ or }} {b}}}$", b, False)
        add("hedging", f"{R()} It might be {a}, but checking again it is {b}. $\\boxed{{{b}}}$", b, True)
    add("hedging", f"{R()} $\\boxed{{\\frac12}}$, or equivalently $\\boxed{{0.5}}$.", "\\frac{1}{2}", True)
    add("hedging", f"{R()} $\\boxed{{3}}$ or maybe $\\boxed{{4}}$", "4", False)
    # Cut at the length limit: no final answer.
    for gold in ["12", "\\frac{3}{4}", "2\\sqrt{2}", "100"]:
        add("truncated", f"{R()} Therefore the answer is $\\boxed{{{gold}", gold, False)
        add("truncated", f"<think>{R()} so it is $\\boxed{{{gold}}}$, let me verify this by another", gold, False)
        add("truncated", f"{R(1500)} Now we multiply both sides by", gold, False)
    # No answer at all (the last number, if any, is not the gold).
    for gold in ["9973", "8191", "\\frac{7}{11}", "5039"]:
        add("no_answer", f"{R()} I could not finish this problem.", gold, False)
        add("no_answer", "I don't know.", gold, False)
        add("no_answer", f"{R()} Hence the value is $\\boxed{{}}$.", gold, False)
    # Answer statements without a box.
    for ans, gold, label in [("42", "42", True), ("\\frac{3}{4}", "0.75", True), ("17", "17", True), ("16", "17", False),
                             ("2\\sqrt{2}", "\\sqrt{8}", True), ("x = 4", "4", True), ("(1, 3)", "(1,3)", True)]:
        add("answer_is", f"{R()}\n\nFinal Answer: The final answer is ${ans}$. I hope it is correct.", gold, label)
        add("answer_is", f"{R()}\n\n**Answer:** ${ans}$", gold, label)
        add("answer_is", f"{R()}\n<answer>{ans}</answer>", gold, label)
    for v, gold in [("72", "72", ), ("18", "18"), ("1,250", "1250"), ("35", "36")]:
        add("answer_is", f"{R()}\n#### {v}", gold, v.replace(",", "") == gold)
        add("last_number", f"{R()} After buying more, she has {v} apples left.", gold, v.replace(",", "") == gold)
    # Adversarial input: must come back within the deadline, never hang.
    nest = lambda d, x: "{" * d + x + "}" * d  # noqa: E731
    adv = [
        ("10^{10^{10}}", "5", False), ("(10^6)!", "5", False), ("9!!!", "5", False),
        ("\\dfrac{5^{(5^{(5^{(5^5)})}-4)}-5}{16}", "5", False), ("\\sum_{n=1}^{10^9} n^n", "5", False),
        ("2^{2^{2^{2^{2^{2}}}}}", "16", False), ("10^{100000}", "10^{100000}", True),
        ("9" * 900, "9" * 900, True), ("9" * 900, "9" * 899 + "8", False),
        ("\\text{" + "a" * 20000 + "}", "5", False), (nest(10000, "5"), "6", False), (nest(300, "7"), "8", False),
        ("(" * 500 + "5" + ")" * 500, "6", False), ("\\sqrt{" * 200 + "2" + "}" * 200, "3", False),
        ("+".join(["1"] * 4000), "5", False), ("\\int_0^{10^{10}} e^{x^{x}} dx", "0", False),
        ("\\frac{\\frac{\\frac{1}{", "1", False), ("x^{x^{x^{x^{x^{x}}}}}", "x", False),
        ("\\left(" * 200 + "5" + "\\right)" * 200, "6", False), ("1" + "0" * 990, "1" + "0" * 989, False),
        (nest(100, "42"), "42", True), ("+".join(["1"] * 4000), "4000", True),
        ("\\underbrace{" * 80 + "3" + "}" * 80, "3", True),
    ]
    for ans, gold, label in adv:
        add("adversarial", f"{R(200)} The answer is $\\boxed{{{ans}}}$.", gold, label)
    add("adversarial", "\\boxed{" * 3000, "5", False)
    add("adversarial", "".join(chr(rng.randint(32, 0x2FFF)) for _ in range(3000)), "5", False)
    return cases


def generate_cases(seed: int = 1234) -> list[dict]:
    """The labelled set (deterministic)."""
    rng = random.Random(seed)
    cases: list[dict] = []
    families = dict(FAMILIES)
    families["integer_random"] = _integer_pairs(rng, 30)
    families["fraction_random"] = _fraction_pairs(rng, 30)
    i = 0
    for kind, pairs in families.items():
        for pred, gold, label in pairs:
            style = STYLES[i % len(STYLES)]
            i += 1
            n = rng.choice([0, 200, 800, 2500])
            cases.append({"completion": wrap(pred, style, reasoning(rng, n) if n else "We solve it."),
                          "gold": gold, "label": label, "kind": kind})
    for pred, gold, label in _integer_pairs(rng, 12) + _fraction_pairs(rng, 12):
        style = STYLES[i % 4]
        i += 1
        cases.append({"completion": wrap(pred, style, reasoning(rng, rng.randint(6000, 12000))),
                      "gold": gold, "label": label, "kind": "long_reasoning"})
    cases += _special_cases(rng)
    return cases


def realistic_mix(n_groups: int, seed: int = 99) -> list[tuple[str, list[str], list[bool]]]:
    """GRPO-shaped groups: (gold, 8 completions, labels); mostly integers and fractions."""
    rng = random.Random(seed)
    groups = []
    for _ in range(n_groups):
        roll = rng.random()
        if roll < 0.7:
            v = rng.randint(0, 5000)
            gold = str(v)
            right = [str(v), str(v), str(v), f"{v:,}", f"{v} \\text{{ dollars}}", f"x = {v}"]
            wrong = [str(v + rng.randint(1, 9)), str(max(0, v - rng.randint(1, 9))), str(2 * v + 1)]
        elif roll < 0.9:
            fr = Fraction(rng.randint(1, 40), rng.randint(2, 40))
            while fr.denominator == 1:
                fr = Fraction(rng.randint(1, 40), rng.randint(2, 40))
            gold = f"\\frac{{{fr.numerator}}}{{{fr.denominator}}}"
            right = [gold, gold, f"\\dfrac{{{fr.numerator}}}{{{fr.denominator}}}",
                     f"{fr.numerator}/{fr.denominator}"] + ([_decimal(fr)] if _terminates(fr) else [])
            wrong = [f"\\frac{{{fr.denominator}}}{{{fr.numerator}}}", f"\\frac{{{fr.numerator + 1}}}{{{fr.denominator}}}"]
        else:
            k = rng.randint(2, 9)
            gold = rng.choice([f"{k}\\sqrt{{2}}", f"\\frac{{{k}\\pi}}{{3}}", f"({k}, {k + 1})"])
            right = [gold, gold, gold.replace("\\frac", "\\dfrac")]
            wrong = [gold.replace(str(k), str(k + 1), 1)]
        comps, labels = [], []
        for _ in range(8):
            ok = rng.random() < 0.6
            ans = rng.choice(right if ok else wrong)
            comps.append(wrap(ans, rng.choice(("boxed", "boxed", "think", "minerva")),
                              reasoning(rng, rng.randint(800, 4000))))
            labels.append(ok)
        groups.append((gold, comps, labels))
    return groups


# --- Math-Verify in a watchdog worker ------------------------------------------------

def _mv_worker(conn, gold_boxed: bool = True) -> None:   # runs in a child process (spawn)
    import logging

    os.environ["OMP_NUM_THREADS"] = "1"
    logging.disable(logging.CRITICAL)   # it logs a line per timeout
    from math_verify import parse, verify

    conn.send("ready")
    while True:
        msg = conn.recv()
        if msg is None:
            return
        completion, gold = msg
        t0 = time.perf_counter()
        try:
            g = parse("\\boxed{" + gold + "}" if gold_boxed else gold)
            p = parse(completion)
            ok, err = bool(verify(g, p)), ""
        except Exception as exc:   # noqa: BLE001 - a crash is a wrong verdict, not a bench failure
            ok, err = False, type(exc).__name__
        conn.send((ok, time.perf_counter() - t0, err))


class MathVerifyRunner:
    """Math-Verify in a watchdog worker; ``gold_boxed``: parse the gold as ``\\boxed{gold}``
    (a bare answer) rather than as written (a peer suite's gold, which may be prose)."""

    def __init__(self, watchdog_s: float, gold_boxed: bool = True) -> None:
        import multiprocessing

        self.gold_boxed = gold_boxed
        self.ctx = multiprocessing.get_context("spawn")
        self.watchdog_s = watchdog_s
        self.killed = 0
        self._start()

    def _start(self) -> None:
        self.conn, child = self.ctx.Pipe()
        self.proc = self.ctx.Process(target=_mv_worker, args=(child, self.gold_boxed), daemon=True)
        self.proc.start()
        child.close()
        if not self.conn.poll(120) or self.conn.recv() != "ready":
            raise RuntimeError("the Math-Verify worker did not start; is math-verify installed?")

    def run(self, completion: str, gold: str) -> tuple[bool, float, str]:
        self.conn.send((completion, gold))
        if self.conn.poll(self.watchdog_s):
            try:
                return self.conn.recv()
            except EOFError:
                pass
        self.proc.kill()
        self.proc.join()
        self.killed += 1
        self._start()
        return False, self.watchdog_s, "killed_by_watchdog"

    def close(self) -> None:
        try:
            self.conn.send(None)
        except OSError:
            pass
        self.proc.join(timeout=5)
        if self.proc.is_alive():
            self.proc.kill()


# --- scoring -----------------------------------------------------------------------

def score(name: str, cases: list[dict], verdicts: list[bool], times: list[float], timeout_s: float) -> dict:
    tp = fp = fn = tn = 0
    per_kind: dict[str, dict] = {}
    for case, v in zip(cases, verdicts):
        k = per_kind.setdefault(case["kind"], {"n": 0, "correct": 0, "fp": 0, "fn": 0})
        k["n"] += 1
        if v == case["label"]:
            k["correct"] += 1
            tp += v
            tn += not v
        elif v:
            fp += 1
            k["fp"] += 1
        else:
            fn += 1
            k["fn"] += 1
    total = sum(times)
    return {
        "name": name, "n": len(cases), "accuracy": (tp + tn) / max(1, len(cases)), "fp": fp, "fn": fn,
        "per_s": len(cases) / total if total else float("inf"),
        "p50_ms": 1000 * _percentile(times, 0.5), "p99_ms": 1000 * _percentile(times, 0.99),
        "max_ms": 1000 * max(times, default=0.0),
        "over_timeout": sum(t > timeout_s + 0.5 for t in times), "per_kind": per_kind,
    }


def run_proctor(cases: list[dict], timeout_s: float) -> tuple[list[bool], list[float], list[str]]:
    from proctor.envs.math import extract, match

    verdicts, times, reasons = [], [], []
    for c in cases:
        t0 = time.perf_counter()
        ex = extract(c["completion"])
        r = match(ex.answer, c["gold"], timeout_s) if ex.answer is not None else None
        times.append(time.perf_counter() - t0)
        verdicts.append(bool(r and r.equal))
        reasons.append(f"{r.tier}:{r.reason}" if r else f"extract:{ex.reason}")
    return verdicts, times, reasons


def run_mv(runner: MathVerifyRunner, cases: list[dict]) -> tuple[list[bool], list[float], list[str]]:
    verdicts, times, errs = [], [], []
    for i, c in enumerate(cases):
        ok, dt, err = runner.run(c["completion"], c["gold"])
        verdicts.append(ok)
        times.append(dt)
        errs.append(err)
        if (i + 1) % 100 == 0:
            print(f"  math-verify {i + 1}/{len(cases)}", file=sys.stderr)
    return verdicts, times, errs


def run_mix(groups: list[tuple[str, list[str], list[bool]]], timeout_s: float,
            runner: MathVerifyRunner) -> list[dict]:
    from proctor.envs.core.types import Task
    from proctor.envs.math import MathVerifier, clear_cache, verify

    flat = [(c, gold, lab) for gold, comps, labels in groups for c, lab in zip(comps, labels)]
    labels = [lab for _, _, lab in flat]
    rows = []

    clear_cache()
    mv = MathVerifier(timeout_s=timeout_s)
    verdicts, times = [], []
    t_all = time.perf_counter()
    for gi, (gold, comps, _) in enumerate(groups):
        tasks = [Task(id=f"g{gi}", prompt="", answer=gold)] * len(comps)
        t0 = time.perf_counter()
        out = mv.verify_batch(tasks, comps)
        dt = time.perf_counter() - t0
        verdicts += [v.correct for v in out]
        times += [dt / len(comps)] * len(comps)
    wall = time.perf_counter() - t_all
    rows.append(_mix_row("proctor verify_batch (groups of 8)", verdicts, labels, times, wall))

    clear_cache()            # a fresh start for each pass: no verdict carried over
    verdicts, times = [], []
    t_all = time.perf_counter()
    for c, gold, _ in flat:
        t0 = time.perf_counter()
        verdicts.append(verify(c, gold, timeout_s=timeout_s))
        times.append(time.perf_counter() - t0)
    rows.append(_mix_row("proctor verify (one by one)", verdicts, labels, times, time.perf_counter() - t_all))

    verdicts, times = [], []
    for i, (c, gold, _) in enumerate(flat):
        ok, dt, _ = runner.run(c, gold)
        verdicts.append(ok)
        times.append(dt)
    rows.append(_mix_row("math-verify (one by one)", verdicts, labels, times, sum(times)))
    return rows


def _mix_row(name: str, verdicts: list[bool], labels: list[bool], times: list[float], wall: float) -> dict:
    return {"name": name, "n": len(verdicts), "per_s": len(verdicts) / wall,
            "accuracy": sum(v == lab for v, lab in zip(verdicts, labels)) / len(labels),
            "p50_ms": 1000 * _percentile(times, 0.5), "p99_ms": 1000 * _percentile(times, 0.99),
            "max_ms": 1000 * max(times)}


# --- output ------------------------------------------------------------------------

def print_tables(ours: dict, theirs: dict, mix: list[dict], machine: dict) -> None:
    print(f"\nmachine: {machine['nproc']} cores, {machine['cpu']}, python {machine['python']}, "
          f"load {machine['load_start']} -> {machine['load_end']}, {machine['date']}")
    print(f"\nlabelled set: {ours['n']} cases ({machine['positives']} labelled equal)\n")
    head = "| verifier | accuracy | FP | FN | verif/s | p50 ms | p99 ms | max ms | over timeout |"
    print(head)
    print("|" + "---|" * 9)
    for r in (ours, theirs):
        print(f"| {r['name']} | {100 * r['accuracy']:.1f}% | {r['fp']} | {r['fn']} | {r['per_s']:.1f} | "
              f"{r['p50_ms']:.2f} | {r['p99_ms']:.1f} | {r['max_ms']:.0f} | {r['over_timeout']} |")
    print(f"| ratio proctor/math-verify | | | | {ours['per_s'] / theirs['per_s']:.1f}x | "
          f"{theirs['p50_ms'] / max(ours['p50_ms'], 1e-9):.0f}x faster | | | |")
    for r in (ours, theirs):
        s = r["no_tags"]
        print(f"| {r['name']}, only completions without <answer> tags | {100 * s['accuracy']:.1f}% | "
              f"{s['fp']} | {s['fn']} | | | | | |")
    print(f"\nmath-verify runs killed by the {theirs['watchdog_s']:.0f} s watchdog: {theirs['killed_by_watchdog']}; "
          f"proctor worker-pool start (untimed): {machine['pool_start_s']} s")
    print("\nper kind (accuracy, FP/FN):\n")
    print("| kind | n | proctor | math-verify |")
    print("|---|---|---|---|")
    for kind in sorted(ours["per_kind"]):
        a, b = ours["per_kind"][kind], theirs["per_kind"][kind]
        print(f"| {kind} | {a['n']} | {100 * a['correct'] / a['n']:.0f}% ({a['fp']}/{a['fn']}) | "
              f"{100 * b['correct'] / b['n']:.0f}% ({b['fp']}/{b['fn']}) |")
    print("\nrealistic mix (groups of 8 sharing a gold):\n")
    print("| verifier | completions | verif/s | p50 ms | p99 ms | max ms | accuracy | speed vs math-verify |")
    print("|" + "---|" * 8)
    base = mix[-1]["per_s"]
    for r in mix:
        print(f"| {r['name']} | {r['n']} | {r['per_s']:.1f} | {r['p50_ms']:.3f} | {r['p99_ms']:.2f} | "
              f"{r['max_ms']:.0f} | {100 * r['accuracy']:.1f}% | {r['per_s'] / base:.1f}x |")


def machine_info(cases: list[dict]) -> dict:
    return {"nproc": os.cpu_count(), "cpu": cpu_model() or platform.processor() or platform.machine(), "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
            "load_start": round(os.getloadavg()[0], 2), "load_end": None,
            "positives": sum(c["label"] for c in cases)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--regenerate", action="store_true", help="rewrite bench/math_cases.jsonl from the generator")
    ap.add_argument("--json", type=Path, help="write every number (and per-case verdicts) here")
    ap.add_argument("--timeout", type=float, default=2.0, help="proctor's per-task deadline (s)")
    ap.add_argument("--mv-watchdog", type=float, default=30.0, help="kill Math-Verify after this many s")
    ap.add_argument("--groups", type=int, default=100, help="realistic-mix groups of 8")
    ap.add_argument("--limit", type=int, default=0, help="only the first N labelled cases (smoke run)")
    args = ap.parse_args()

    if args.regenerate or not CASES.exists():
        cases = generate_cases()
        with CASES.open("w") as f:
            for c in cases:
                f.write(json.dumps(c, ensure_ascii=False) + "\n")
        print(f"wrote {len(cases)} cases to {CASES}", file=sys.stderr)
    cases = [json.loads(line) for line in CASES.open()]
    if args.limit:
        cases = cases[:args.limit]
    machine = machine_info(cases)

    from proctor.envs.math import match, shutdown_pool
    from proctor.envs.math.pool import get_pool

    t0 = time.perf_counter()
    get_pool()                                          # start the worker pool (not timed below)
    match("x^2+2x+1", "(x+1)^2")                        # and import-warm a worker
    machine["pool_start_s"] = round(time.perf_counter() - t0, 2)

    print(f"proctor on {len(cases)} cases ...", file=sys.stderr)
    ours_v, ours_t, ours_why = run_proctor(cases, args.timeout)
    ours = score("proctor.envs.math.verify", cases, ours_v, ours_t, args.timeout)
    plain = [i for i, c in enumerate(cases) if "<answer>" not in c["completion"]]
    ours["no_tags"] = score("", [cases[i] for i in plain], [ours_v[i] for i in plain], [ours_t[i] for i in plain],
                            args.timeout)

    print(f"math-verify on {len(cases)} cases ...", file=sys.stderr)
    runner = MathVerifyRunner(args.mv_watchdog)
    mv_v, mv_t, mv_err = run_mv(runner, cases)
    theirs = score("math-verify 0.9 (defaults)", cases, mv_v, mv_t, 5.0)
    theirs["killed_by_watchdog"] = runner.killed
    theirs["watchdog_s"] = args.mv_watchdog
    theirs["no_tags"] = score("", [cases[i] for i in plain], [mv_v[i] for i in plain], [mv_t[i] for i in plain], 5.0)

    print("realistic mix ...", file=sys.stderr)
    mix = run_mix(realistic_mix(args.groups), args.timeout, runner)
    runner.close()
    shutdown_pool()

    machine["load_end"] = round(os.getloadavg()[0], 2)
    print_tables(ours, theirs, mix, machine)
    wrong = [(c["kind"], c["label"], why, c["gold"], c["completion"][-160:])
             for c, v, why in zip(cases, ours_v, ours_why) if v != c["label"]]
    if wrong:
        print("\nproctor's mistakes:", file=sys.stderr)
        for w in wrong:
            print("  ", w, file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps({
            "machine": machine, "args": {k: str(v) for k, v in vars(args).items()},
            "proctor": ours, "math_verify": theirs, "realistic_mix": mix,
            "cases": [{"kind": c["kind"], "label": c["label"], "proctor": a, "proctor_reason": why,
                       "proctor_ms": 1000 * ta, "math_verify": b, "math_verify_ms": 1000 * tb, "mv_error": e}
                      for c, a, why, ta, b, tb, e in zip(cases, ours_v, ours_why, ours_t, mv_v, mv_t, mv_err)],
        }, indent=1))
        print(f"wrote {args.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
