"""Exact products q * sqrt(r) * pi^k: the common MATH answers ``2\\sqrt{2}``,
``\\frac{\\sqrt{3}}{2}``, ``\\frac{3\\pi}{4}``, decided without SymPy.

Two such values are equal iff their signs agree, q1^2 r1 == q2^2 r2 and k1 == k2
(pi is transcendental, so different powers of pi never meet unless q == 0). This
is exact, so ``2\\sqrt{3}`` vs ``3\\sqrt{2}`` is settled both ways in microseconds.
Anything outside the grammar (sums, other roots, variables) returns None.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

from .numbers import Num

_TOKEN_RE = re.compile(r"\d+(?:\.\d+)?|\\sqrt|\\pi|\\frac|\\cdot|\\times|[{}()/*+\-^]")
MAX_RADICAND = 10 ** 18


@dataclass(frozen=True)
class Surd:
    q: Fraction
    r: int = 1
    k: int = 0

    def __mul__(self, other: "Surd") -> "Surd":
        return Surd(self.q * other.q, self.r * other.r, self.k + other.k)

    def inverse(self) -> Optional["Surd"]:
        if self.q == 0:
            return None
        return Surd(1 / (self.q * self.r), self.r, -self.k)     # 1/sqrt(r) = sqrt(r)/r


def from_num(n: Num) -> Surd:
    return Surd(n.value)


def surds_equal(a: Surd, b: Surd) -> bool:
    if a.q == 0 or b.q == 0:
        return a.q == b.q
    return (a.q > 0) == (b.q > 0) and a.k == b.k and a.q * a.q * a.r == b.q * b.q * b.r


def parse_surd(s: str) -> Optional[Surd]:
    """The value of a canonical string in the q*sqrt(r)*pi^k grammar, or None."""
    if len(s) > 200 or ("\\sqrt" not in s and "\\pi" not in s):
        return None
    toks = _TOKEN_RE.findall(s)
    if "".join(toks) != s:
        return None          # something outside the grammar (letters, other commands)
    parser = _Parser(toks)
    try:
        value = parser.expr()
    except _Reject:
        return None
    if parser.i != len(toks) or value is None or value.r > MAX_RADICAND:
        return None
    return value


class _Reject(Exception):
    pass


class _Parser:
    def __init__(self, toks: list[str]) -> None:
        self.toks = toks
        self.i = 0
        self.depth = 0

    def peek(self) -> Optional[str]:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self, expected: Optional[str] = None) -> str:
        tok = self.peek()
        if tok is None or (expected is not None and tok != expected):
            raise _Reject()
        self.i += 1
        return tok

    def expr(self) -> Surd:
        sign = 1
        while self.peek() in ("-", "+"):
            sign = -sign if self.take() == "-" else sign
        value = self.product()
        return Surd(sign * value.q, value.r, value.k)

    def product(self) -> Surd:
        value = self.factor()
        while True:
            tok = self.peek()
            if tok in ("\\cdot", "\\times", "*"):
                self.take()
                value = value * self.factor()
            elif tok == "/":
                self.take()
                inv = self.factor().inverse()
                if inv is None:
                    raise _Reject()
                value = value * inv
            elif tok in ("\\sqrt", "\\pi", "\\frac", "("):
                value = value * self.factor()      # juxtaposition: 2\sqrt{3}\pi
            else:
                return value

    def factor(self) -> Surd:
        self.depth += 1
        if self.depth > 20:
            raise _Reject()
        tok = self.take()
        if tok[0].isdigit():
            value = Surd(Fraction(tok))
        elif tok == "\\pi":
            value = Surd(Fraction(1), 1, 1)
            if self.peek() == "^":
                self.take()
                power = self.take()
                if power == "{":
                    power = self.take()
                    self.take("}")
                if not power.isdigit() or int(power) > 4:
                    raise _Reject()
                value = Surd(Fraction(1), 1, int(power))
        elif tok == "\\sqrt":
            value = self._sqrt()
        elif tok == "\\frac":
            num = self._group()
            inv = self._group().inverse()
            if inv is None:
                raise _Reject()
            value = num * inv
        elif tok == "(":
            value = self.expr()
            self.take(")")
        else:
            raise _Reject()
        self.depth -= 1
        if self.peek() == "^":
            raise _Reject()          # powers of anything else: leave to the symbolic tier
        return value

    def _group(self) -> Surd:
        self.take("{")
        value = self.expr()
        self.take("}")
        return value

    def _sqrt(self) -> Surd:
        inner = self._group()
        if inner.r != 1 or inner.k != 0 or inner.q < 0:
            raise _Reject()
        a, b = inner.q.numerator, inner.q.denominator     # sqrt(a/b) = sqrt(a*b)/b
        if a * b > MAX_RADICAND:
            raise _Reject()
        return Surd(Fraction(1, b), a * b, 0)
