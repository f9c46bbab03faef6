"""Exact comparison of very long decimal numbers, in time linear in their length.

A boxed integer of 10,000 or 100,000 digits is a legitimate answer (a factorial, a
power written out), but it is far longer than ``MAX_ANSWER_CHARS``, every regex of the
normal path would scan it several times, and Python refuses ``int()`` of a string of
more than 4,300 digits. So a plain decimal literal longer than ``MAX_ANSWER_CHARS``
(digits, an optional sign, point and fraction, optional thousands separators) is kept
as its canonical digit string and compared here, exactly and without the symbolic
tier: two literals by their canonical strings; a literal and an exact number of the
normal path (``2^{65536}``, ``3000!``, a fraction) by magnitude first, then by exact
integer arithmetic (the literal turned into an ``int`` by halving, each half under
Python's limit). ``MAX_NUMBER_CHARS`` bounds the work: about 50 ms at 200,000 digits.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction
from functools import lru_cache
from typing import Optional

MAX_NUMBER_CHARS = 250_000        # longer "numbers" are too_complex, like any other answer
_CHUNK = 3000                     # int() of this many digits is under Python's 4,300 limit
_LOG10_2 = math.log10(2)
_SEPARATORS = ("{,}", "\\,", "\\!", "\\ ", "~")
_LITERAL_RE = re.compile(r"([-+]?)(\d{1,3}(?:,\d{3})+|\d+)(?:\.(\d+))?")


def big_number(raw: str) -> Optional[str]:
    """The canonical digit string (``-123.45``: no leading or trailing zeros, no ``+``,
    ``0`` for zero) of ``raw`` when it is a plain decimal literal of at most
    ``MAX_NUMBER_CHARS`` characters, else None. ``$``/``\\(``...``\\)`` around it, thin-space
    and ``{,}`` separators are allowed."""
    s = raw.strip()
    if not s or len(s) > MAX_NUMBER_CHARS or not (s[0].isdigit() or s[0] in "+-$\\"):
        return None
    for open_, close in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(open_) and s.endswith(close) and len(s) > len(open_) + len(close):
            s = s[len(open_):-len(close)].strip()
            break
    if "\\" in s or "{" in s or "~" in s:
        for sep in _SEPARATORS:
            s = s.replace(sep, "," if sep == "{,}" else "")
    m = _LITERAL_RE.fullmatch(s)
    if m is None:
        return None
    sign, whole, frac = m.group(1), m.group(2).replace(",", "").lstrip("0"), (m.group(3) or "").rstrip("0")
    body = (whole or "0") + ("." + frac if frac else "")
    return body if sign != "-" or body == "0" else "-" + body


def equals_fraction(digits: str, value: Fraction) -> bool:
    """True when the canonical literal ``digits`` is exactly ``value``."""
    negative = digits.startswith("-")
    whole, _, frac = digits.lstrip("-").partition(".")
    if value == 0 or digits == "0":
        return value == 0 and digits == "0"
    if (value < 0) != negative:
        return False
    v = abs(value)
    # Decimal exponent of each side (within 1): a literal of 100,000 digits is never
    # converted to compare it with a value of 20,000.
    mine = len(whole) if whole != "0" else -(len(frac) - len(frac.lstrip("0")))
    theirs = (v.numerator.bit_length() - v.denominator.bit_length()) * _LOG10_2
    if abs(mine - theirs) > 3:
        return False
    return Fraction(to_int(whole + frac), _pow10(len(frac))) == v


def to_int(digits: str) -> int:
    """``int(digits)`` for any length (Python refuses more than 4,300 digits at once):
    the halves are converted separately and combined, so the cost is that of a few
    big multiplications."""
    if len(digits) <= _CHUNK:
        return int(digits)
    half = len(digits) // 2
    return to_int(digits[:-half]) * _pow10(half) + to_int(digits[-half:])


@lru_cache(maxsize=256)
def _pow10(n: int) -> int:
    return 10 ** n
