"""Answers written in Python's notation, percent written as a word, and answers that
cannot be read at all.

* Golds are often written by programs: ``2**10``, ``3*sqrt(2)/2``, ``pi/2``.
  ``python_notation`` rewrites ``a**b`` as ``a^{b}``, ``sqrt(x)`` as ``\\sqrt{x}`` and a
  bare ``pi`` as ``\\pi`` before the LaTeX rules run, so they meet LaTeX answers in
  the fast tiers.
* ``50 percent``, ``50 percentage``, ``50 pct``, ``50\\text{ percent}``: the word is the
  sign (``percent_word``), so the number tier's percent policy applies (0.5 = 50%).
* ``malformed``: a canonical string that is not mathematics (an unclosed brace, a
  ``\\frac`` without its groups, an operator with nothing after it). Two such strings
  are never "equal" because they are the same junk.
"""

from __future__ import annotations

import re

_SQRT_CALL_RE = re.compile(r"(?<![\\A-Za-z])sqrt\s*\(")
_POWER_RE = re.compile(r"(?<=[\w)\]}.])\s*\*\*\s*")          # ** after an operand
_EXPONENT_RE = re.compile(r"[-+]?[\w.]+")
_PI_RE = re.compile(r"(?<![\\A-Za-z])pi(?![A-Za-z])")
_PERCENT_WORD_RE = re.compile(r"(?<=[\d}).])\s*(?:per\s?cent(?:age)?s?|pct)\.?\s*$", re.IGNORECASE)
# An answer cannot end in an operator or in a command that takes an argument.
_COMMAND_RE = re.compile(r"\\[A-Za-z]+|\\.")
_TWO_ARGS_RE = re.compile(r"\\(?:frac|binom)(?![A-Za-z])")
_DANGLING_RE = re.compile(r"(?:[\^_=*/+\-]|\\(?:frac|sqrt|cdot|times|div|pm|mp|binom|log|ln|sin|cos|tan))\s*$")


def python_notation(s: str) -> str:
    """``s`` with Python's ``**``, ``sqrt(...)`` and ``pi`` written in LaTeX."""
    if "sqrt" in s:
        s = _sqrt_calls(s)
    if "**" in s:
        s = _powers(s)
    if "pi" in s:
        s = _PI_RE.sub(r"\\pi ", s).rstrip()
    return s


def percent_word(s: str) -> str:
    """``50 percent`` -> ``50%`` (also percentage, per cent, pct); anything else unchanged."""
    low = s.lower()
    if "cent" not in low and "pct" not in low:
        return s
    return _PERCENT_WORD_RE.sub("%", s)


def malformed(s: str) -> bool:
    """True when the canonical answer ``s`` cannot be read as mathematics: empty, an
    unbalanced ``{}``, unmatched brackets (``[0,1)`` matches: an interval), a
    ``\\frac`` or an operator with nothing after it. One character (``+``) is a sign."""
    if not s.strip():
        return True
    depth = 0
    i = 0
    while i < len(s):
        ch = s[i]
        if ch == "\\":
            i += 2
            continue
        depth += 1 if ch == "{" else -1 if ch == "}" else 0
        if depth < 0:
            return True
        i += 1
    if depth:
        return True
    if s.count("(") + s.count("[") != s.count(")") + s.count("]"):
        return True
    if "frac" in s or "binom" in s:
        if any(_missing_group(s, m.end()) for m in _TWO_ARGS_RE.finditer(s)):
            return True
    return len(s) > 1 and _DANGLING_RE.search(s) is not None


def _missing_group(s: str, pos: int) -> bool:
    """True when fewer than two arguments (``{...}`` groups or single characters) follow ``pos``."""
    for _ in range(2):
        while pos < len(s) and s[pos] == " ":
            pos += 1
        if pos >= len(s) or s[pos] in "}^_=+-*/,)]":
            return True
        if s[pos] != "{":
            command = _COMMAND_RE.match(s, pos)
            pos = command.end() if command else pos + 1
            continue
        depth = 0
        for j in range(pos, len(s)):
            depth += 1 if s[j] == "{" else -1 if s[j] == "}" else 0
            if depth == 0:
                pos = j + 1
                break
    return False


def _closing_paren(s: str, i: int) -> int:
    """Index of the ``)`` that closes the ``(`` at ``i``, or -1."""
    depth = 0
    for j in range(i, len(s)):
        if s[j] == "(":
            depth += 1
        elif s[j] == ")":
            depth -= 1
            if depth == 0:
                return j
    return -1


def _sqrt_calls(s: str) -> str:
    for _ in range(16):                 # nested calls: one per pass
        m = _SQRT_CALL_RE.search(s)
        if m is None:
            return s
        close = _closing_paren(s, m.end() - 1)
        if close < 0:
            return s
        s = s[:m.start()] + "\\sqrt{" + s[m.end():close] + "}" + s[close + 1:]
    return s


def _powers(s: str) -> str:
    out: list[str] = []
    pos = 0
    for m in _POWER_RE.finditer(s):
        if m.start() < pos:
            continue
        rest = m.end()
        if rest < len(s) and s[rest] == "(":
            close = _closing_paren(s, rest)
            if close < 0:
                return s
            exponent, after = s[rest:close + 1], close + 1
        else:
            e = _EXPONENT_RE.match(s, rest)
            if e is None:
                continue
            exponent, after = e.group(0), e.end()
        out.append(s[pos:m.start()] + "^{" + exponent + "}")
        pos = after
    out.append(s[pos:])
    return "".join(out)
