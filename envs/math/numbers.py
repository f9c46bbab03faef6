"""Exact rationals: the second tier. Decisive both ways, with no float in sight.

Parses canonical strings (see ``normalize.py``) that denote a rational number:
integers, decimals, ``a/b``, ``\\frac{a}{b}`` (parts may be numbers or integer
powers), mixed numbers ``2\\frac{1}{2}`` (= 5/2, the MATH convention), scientific
notation ``m \\times 10^{k}`` / ``1e5``, integer powers ``2^{10}``, factorials
``5!``, and a trailing percent sign. Anything else returns None and goes to a later tier.

Policies (the places where "equal" is a choice, not arithmetic):

* Percent: when exactly one side has a percent sign, either reading counts:
  ``50\\%`` equals ``50`` (the sign as a unit, as in "what percent ...?") and
  ``0.5`` (its value). ``50`` and ``0.5`` are never equal. Both sides with a sign
  compare as written.
* Decimals are exact numbers: ``0.5`` = 1/2 but ``0.33`` != 1/3. A decimal with at
  least ``APPROX_MIN_SIG`` (6) significant digits is accepted as an approximation of
  a value that has no terminating decimal (1/3, pi) when it is within one unit in
  its last place (rounded or truncated): ``0.333333`` = 1/3, ``3.14`` != pi; and of
  a decimal written with more places when it is that decimal correctly rounded:
  ``0.0666668`` = ``0.066666793`` (to 7 places), but ``2.23`` != ``2.232`` (3
  significant digits) and ``0.0666667`` != ``0.066666793`` (rounded wrongly).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Optional

from .normalize import matching_brace

APPROX_MIN_SIG = 6
MAX_POWER_BITS = 65536        # 2^65536 is fine for Fraction; 10^(10^10) must not be built here

_DEC_RE = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)")
_INT_RE = re.compile(r"[-+]?\d+")
_SLASH_RE = re.compile(r"([-+]?(?:\d+\.?\d*|\.\d+))/([-+]?(?:\d+\.?\d*|\.\d+))")
_INT_FRAC_RE = re.compile(r"([-+]?)\\frac\{(\d+)\}\{(\d+)\}")
_MIXED_RE = re.compile(r"([-+]?)(\d+)\\frac\{(\d+)\}\{(\d+)\}")
_SCI_RE = re.compile(r"([-+]?(?:\d+\.?\d*|\.\d+))(?:\\times|\\cdot|\*)10\^(?:\{([-+]?\d+)\}|(\d))")
_E_RE = re.compile(r"([-+]?(?:\d+\.?\d*|\.\d+))[eE]([-+]?\d+)")
_FACT_RE = re.compile(r"([-+]?)(\d+)!")
MAX_FACTORIAL = 3000
_POW_RE = re.compile(r"([-+]?)(\d+)\^(?:\{([-+]?\d+)\}|(\d))")


@dataclass(frozen=True)
class Num:
    """An exact value; ``places``/``sig`` are set when it was written as a decimal."""

    value: Fraction
    percent: bool = False
    places: Optional[int] = None
    sig: int = 0


def parse_number(s: str) -> Optional[Num]:
    """The exact number a canonical string denotes, or None if it is not one."""
    if not s or len(s) > 1200:
        return None
    percent = s.endswith("%")
    if percent:
        s = s[:-1]
    num = _parse(s, 0)
    if num is None:
        return None
    return Num(num.value, percent, num.places, num.sig) if percent else num


def numbers_equal(a: Num, b: Num) -> bool:
    """Exact equality under the percent and decimal policies in the module docstring."""
    if a.percent != b.percent:
        pct, plain = (a, b) if a.percent else (b, a)
        return pct.value == plain.value or pct.value / 100 == plain.value
    if a.value == b.value:
        return True
    if a.percent or (a.places is None and b.places is None):
        return False               # compared as written; no decimal to stand for anything
    return approx_equal(a, b.value) or approx_equal(b, a.value)


def approx_equal(decimal: Num, exact: Fraction) -> bool:
    """``decimal`` (as written, ``APPROX_MIN_SIG`` significant digits or more) stands
    for ``exact``: within a unit in its last place of a value with no finite decimal,
    or the correct rounding of a finite one."""
    if decimal.places is None or decimal.sig < APPROX_MIN_SIG:
        return False
    unit = Fraction(1, 10) ** decimal.places
    if terminates(exact):
        # Written with more places than ``decimal`` (fewer would be compared exactly,
        # and differ by a whole unit): ``decimal`` must be its rounding, not a truncation.
        return abs(decimal.value - exact) <= unit / 2
    return abs(decimal.value - exact) < unit


def terminates(x: Fraction) -> bool:
    """True when ``x`` has a finite decimal expansion (denominator 2^a 5^b)."""
    d = x.denominator
    for p in (2, 5):
        while d % p == 0:
            d //= p
    return d == 1


def decimal_places(literal: str) -> tuple[int, int]:
    """(digits after the point, significant digits) of a decimal literal like -0.0250."""
    body = literal.lstrip("+-")
    places = len(body.split(".", 1)[1]) if "." in body else 0
    digits = body.replace(".", "").lstrip("0")
    return places, max(len(digits), 1)


def literal(s: str) -> Fraction:
    """The exact value of a decimal literal (``-12``, ``0.25``, ``.5``, ``3.``), as
    ``Fraction(s)`` gives it but without its string parser (this runs for every number)."""
    sign = -1 if s.startswith("-") else 1
    whole, _, frac = s.lstrip("+-").partition(".")
    digits = int(whole + frac) if whole or frac else 0
    return Fraction(sign * digits, 10 ** len(frac)) if frac else Fraction(sign * digits)


def _parse(s: str, depth: int) -> Optional[Num]:
    if depth > 4 or not s:
        return None
    if _DEC_RE.fullmatch(s):
        if "." not in s:
            return Num(Fraction(int(s)))
        places, sig = decimal_places(s)
        return Num(literal(s), places=places, sig=sig)
    if s[0] == "(" and s[-1] == ")" and "," not in s:
        return _parse(s[1:-1], depth + 1)
    m = _SLASH_RE.fullmatch(s)
    if m:
        den = literal(m.group(2))
        return Num(literal(m.group(1)) / den) if den else None
    m = _MIXED_RE.fullmatch(s)
    if m:
        den = int(m.group(4))
        if not den:
            return None
        value = int(m.group(2)) + Fraction(int(m.group(3)), den)
        return Num(-value if m.group(1) == "-" else value)
    if "\\frac" in s:
        m = _INT_FRAC_RE.fullmatch(s)     # the common \frac{1}{2}, without scanning braces
        if m:
            den = int(m.group(3))
            value = Fraction(int(m.group(2)), den) if den else None
            return None if value is None else Num(-value if m.group(1) == "-" else value)
        return _parse_frac(s, depth)
    m = _SCI_RE.fullmatch(s) or _E_RE.fullmatch(s)
    if m:
        exponent = int(next(g for g in m.groups()[1:] if g is not None))
        if abs(exponent) > 4000:
            return None
        places, sig = decimal_places(m.group(1))
        return Num(literal(m.group(1)) * Fraction(10) ** exponent, places=places - exponent, sig=sig)
    m = _FACT_RE.fullmatch(s)
    if m:
        n = int(m.group(2))
        if n > MAX_FACTORIAL:
            return None
        value = Fraction(math.factorial(n))
        return Num(-value if m.group(1) == "-" else value)
    m = _POW_RE.fullmatch(s)
    if m:
        base = int(m.group(2))
        exponent = int(m.group(3) if m.group(3) is not None else m.group(4))
        if base > 1 and abs(exponent) * math.log2(base) > MAX_POWER_BITS:
            return None
        if base == 0 and exponent < 0:
            return None
        value = Fraction(base) ** exponent
        return Num(-value if m.group(1) == "-" else value)
    return None


def _parse_frac(s: str, depth: int) -> Optional[Num]:
    sign = 1
    if s[0] in "+-":
        sign = -1 if s[0] == "-" else 1
        s = s[1:]
    if not s.startswith("\\frac{"):
        return None
    end_num = matching_brace(s, len("\\frac"))
    if end_num < 0 or end_num + 1 >= len(s) or s[end_num + 1] != "{":
        return None
    end_den = matching_brace(s, end_num + 1)
    if end_den != len(s) - 1:
        return None
    num = _parse(s[len("\\frac") + 1:end_num], depth + 1)
    den = _parse(s[end_num + 2:end_den], depth + 1)
    if num is None or den is None or den.value == 0:
        return None
    return Num(sign * num.value / den.value)
