"""The shape of an answer: tuples, sets, intervals, matrices, lists, relations.

All of it works on canonical strings (``normalize.py``) by scanning brackets at the
top level; nothing here knows what the elements mean. The matcher splits an answer
with these helpers and compares the pieces with its own tiers, so ``(\\frac12, 3)``
and ``(0.5, 3)`` never need a computer algebra system.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

MAX_ITEMS = 64

_OPENERS = ("\\{", "\\langle", "(", "[", "{")
_CLOSERS = ("\\}", "\\rangle", ")", "]", "}")
_TOKEN_RE = re.compile(r"\\\{|\\\}|\\langle(?![A-Za-z])|\\rangle(?![A-Za-z])|\\\\|\\[A-Za-z]+|\\.|.", re.S)
_MATRIX_RE = re.compile(r"\\begin\{(pmatrix|bmatrix|Bmatrix|matrix|smallmatrix|array)\}"
                        r"(?:\{[lcr|\s]*\})?(.*)\\end\{\1\}", re.S)
_VAR_RE = re.compile(r"(?:[A-Za-z]|\\[A-Za-z]+|[A-Z]{2,3})(?:_\{?[A-Za-z0-9]+\}?)?'*(?:\([a-z](?:,[a-z])*\))?")
_VAR_TUPLE_RE = re.compile(r"\((?:%s)(?:,(?:%s))+\)" % (_VAR_RE.pattern, _VAR_RE.pattern))
_INEQ_TOKENS = {"<", ">", "\\leq", "\\geq", "\\neq", "\\leqq", "\\geqq", "\\lneq", "\\gneq"}
_MCQ_GOLD_RE = re.compile(r"\(?([A-J])\)?[.:]?")
_MCQ_PRED_RE = re.compile(r"\(([A-Ja-j])\)|([A-J])(?:[.:)]|$)")


@dataclass(frozen=True)
class Shape:
    """A compound answer. ``kind``: seq (bracketed, ordered: tuple, interval, vector),
    set (``\\{...\\}``), list (bare "1, 2", unordered), matrix, union (of intervals)."""

    kind: str
    items: tuple[str, ...]
    open: str = ""
    close: str = ""
    rows: int = 0
    cols: int = 0
    conj: bool = False        # a list joined by "and" (\land): an intersection of inequalities


@dataclass(frozen=True)
class Relation:
    """``kind``: assign (lhs is a variable: x = 3, x \\in [1, 2]), equation, inequality."""

    kind: str
    lhs: str
    rhs: str


def tokens(s: str) -> tuple[str, ...]:
    """LaTeX-aware tokens: commands, escaped braces and single characters (cached: one
    answer is scanned by several helpers)."""
    return _tokens(s)


@lru_cache(maxsize=8192)
def _tokens(s: str) -> tuple[str, ...]:
    return tuple(_TOKEN_RE.findall(s))


def split_top(s: str, seps: tuple[str, ...]) -> list[str]:
    """Split ``s`` at separator tokens that sit outside every bracket."""
    for sep in seps:               # a plain loop: this runs for every answer, many times
        if sep in s:
            break
    else:
        return [s]                 # the common case, without tokenizing
    parts: list[str] = []
    cur: list[str] = []
    depth = 0
    for tok in tokens(s):
        if tok in _OPENERS or tok == "\\left":
            depth += 1
        elif tok in _CLOSERS:
            depth = max(0, depth - 1)
        elif depth == 0 and tok in seps:
            parts.append("".join(cur))
            cur = []
            continue
        cur.append(tok)
    parts.append("".join(cur))
    return parts


def enclosing(s: str) -> Optional[tuple[str, str, str]]:
    """(opener, inner, closer) when one bracket pair encloses all of ``s``."""
    if not s or s[0] not in "\\([":
        return None                # no opener can start it: not worth tokenizing
    toks = tokens(s)
    if len(toks) < 2 or toks[0] not in _OPENERS[:4] or toks[-1] not in _CLOSERS[:4]:
        return None
    depth = 0
    for i, tok in enumerate(toks):
        if tok in _OPENERS:
            depth += 1
        elif tok in _CLOSERS:
            depth -= 1
            if depth == 0 and i != len(toks) - 1:
                return None
    if depth != 0:
        return None
    return toks[0], "".join(toks[1:-1]), toks[-1]


def parse_shape(s: str) -> Optional[Shape]:
    """The compound structure of a canonical answer, or None for a single value."""
    m = _MATRIX_RE.fullmatch(s)
    if m is None:
        enc = enclosing(s)
        if enc and enc[0] in ("(", "[") and _MATRIX_RE.fullmatch(enc[1]):
            m = _MATRIX_RE.fullmatch(enc[1])
    if m is not None:
        # "A + B" or "A B" of two matrices: an expression, for the symbolic tier.
        return None if "\\begin{" in m.group(2) else _matrix(m.group(2))
    ratio = _ratio(s)
    if ratio is not None:
        return ratio
    parts = split_top(s, ("\\cup",))
    if len(parts) > 1:
        return Shape("union", tuple(p for p in parts)) if all(parts) else None
    enc = enclosing(s)
    if enc is not None:
        opener, inner, closer = enc
        items = split_top(inner, (",",))
        if opener == "\\{":
            items = split_top(inner, (",", "\\land"))
            return Shape("set", tuple(i for i in items if i) if inner else ())
        if len(items) >= 2 and all(items):
            opener = "(" if opener == "\\langle" else opener
            closer = ")" if closer == "\\rangle" else closer
            return Shape("seq", tuple(items), opener, closer)
        return None
    items = split_top(s, (",", ";", "\\land"))
    if len(items) >= 2:
        conj = len(split_top(s, ("\\land",))) > 1
        items = [i for i in items if i]
        if len(items) >= 2 or (len(items) == 1 and items[0] != s):
            return Shape("list", tuple(items), conj=conj)
    return None


def _ratio(s: str) -> Optional[Shape]:
    """``11:21``, ``12:00``: a ratio or a time, compared term by term (12:00 is not 1:00,
    3:0 is not 5:0, and 6:4 is not read as the fraction 3/2)."""
    parts = split_top(s, (":",))
    if len(parts) < 2 or not all(p.strip() for p in parts):
        return None
    if any(tok == "=" or tok in _INEQ_TOKENS or tok == "\\in" for tok in tokens(s)):
        return None
    return Shape("seq", tuple(parts), ":", ":")


def _matrix(body: str) -> Optional[Shape]:
    rows = [r for r in split_top(body, ("\\\\",))]
    while rows and not rows[-1].strip():
        rows.pop()
    cells = [split_top(r, ("&",)) for r in rows]
    if not cells or any(len(r) != len(cells[0]) for r in cells):
        return None
    return Shape("matrix", tuple(c for r in cells for c in r), rows=len(cells), cols=len(cells[0]))


def split_relation(s: str) -> Optional[Relation]:
    """The top-level relation of ``s``: x = 3 and 3 = x (assign), 2x + 4y = 3 (equation),
    x > 3 or 1 < x \\leq 2 (inequality). A chain a = b = c keeps a and c."""
    if not ("=" in s or "<" in s or ">" in s or "\\" in s):
        return None
    toks = tokens(s)
    depth = 0
    eq_at: list[int] = []
    in_at = -1
    for i, tok in enumerate(toks):
        if tok in _OPENERS:
            depth += 1
        elif tok in _CLOSERS:
            depth = max(0, depth - 1)
        elif depth == 0:
            if tok in _INEQ_TOKENS:
                return Relation("inequality", "", s)
            if tok == "=":
                eq_at.append(i)
            elif tok in ("\\in", "\\approx") and in_at < 0 and not eq_at:
                in_at = i
    if in_at >= 0 and not eq_at:
        lhs, rhs = "".join(toks[:in_at]), "".join(toks[in_at + 1:])
        if is_variable(lhs) and rhs:
            return Relation("assign", lhs, rhs)
        if toks[in_at] == "\\approx" and rhs:
            return Relation("equation", lhs, rhs)
        return None
    if not eq_at:
        return None
    lhs = "".join(toks[:eq_at[0]])
    rhs = "".join(toks[eq_at[-1] + 1:])
    if not lhs or not rhs:
        return None
    if is_variable(lhs):
        return Relation("assign", lhs, rhs)
    if len(eq_at) == 1 and is_variable(rhs):
        return Relation("assign", rhs, lhs)        # 2 = x names x's value, as x = 2 does
    return Relation("equation", lhs, rhs)


def solution_tuples(shape: Shape) -> Shape:
    """``p=5, q=2; p=7, q=2`` -> the solutions ``(5,2), (7,2)``: a list of assignments
    whose variables repeat in one order (two or more of them) is a list of tuples."""
    if shape.kind != "list" or len(shape.items) < 4:
        return shape
    rels = [split_relation(i.strip()) for i in shape.items]
    if any(r is None or r.kind != "assign" or not _VAR_RE.fullmatch(r.lhs) for r in rels):
        return shape
    names = [r.lhs for r in rels]
    k = names.index(names[0], 1) if names[0] in names[1:] else len(names)
    if k < 2 or len(names) % k or len(set(names[:k])) != k or names != names[:k] * (len(names) // k):
        return shape
    groups = tuple("(" + ",".join(r.rhs for r in rels[i:i + k]) + ")" for i in range(0, len(rels), k))
    return Shape("list", groups)


def drop_approx(s: str) -> str:
    """``\\frac{\\sqrt3}{3} \\approx 0.577`` -> ``\\frac{\\sqrt3}{3}``: the answer is what is
    approximated, not the decimal; but ``x \\approx 11`` (a variable) says x is about 11."""
    if "\\approx" not in s:
        return s
    toks = tokens(s)
    depth = 0
    for i, tok in enumerate(toks):
        if tok in _OPENERS:
            depth += 1
        elif tok in _CLOSERS:
            depth = max(0, depth - 1)
        elif depth == 0 and tok == "\\approx" and i > 0:
            left, right = "".join(toks[:i]).strip(), "".join(toks[i + 1:]).strip()
            return left + "=" + right if is_variable(left) and right else left
    return s


_BOUND_RE = re.compile(r"\\(?:lim|sum|prod|int|bigcup|bigcap)\s*_\s*\{?\s*([A-Za-z])")
_COMMAND_RE = re.compile(r"\\(?:begin|end)\{[A-Za-z*]+\}|\\[A-Za-z]+")
_SUBSCRIPT_RE = re.compile(r"_(?:\{[^{}]*\}|[A-Za-z0-9])")


def states_value(lhs: str, rhs: str = "") -> bool:
    """An equation ``lhs = v`` states the value v: ``lhs`` is a label (``|AB|``,
    ``V_1:V_2``, ``\\frac{NO}{BO}``) or a closed expression with no free variable
    (``e^{i\\pi}``, ``\\log_2 8``, ``\\lim_{x\\to 0} \\frac{\\sin x}{x}``). ``x^2 = 4``
    does not state 4, and ``7 = 11a + c`` (a value with a free variable) states nothing.
    A sum of two or more unknowns (``m+n = 17``, AIME's "find m+n") states its value,
    unless the value is 0 (``2x+4y-3 = 0`` is a line)."""
    if rhs and not _closed(rhs):
        return False
    if _closed(lhs):
        return True
    label = _SUBSCRIPT_RE.sub("", _COMMAND_RE.sub(" ", lhs))
    if all(ch.isupper() for ch in label if ch.isalpha()):
        return True
    return bool(_SUM_OF_UNKNOWNS_RE.fullmatch(lhs)) and rhs.strip() not in ("0", "")


_SUM_OF_UNKNOWNS_RE = re.compile(r"[a-z](?:[+-][a-z])+")


def _closed(lhs: str) -> bool:
    """No free variable: every letter is a command, e, i, or bound by a limit/sum/integral."""
    bound = set(_BOUND_RE.findall(lhs))
    body = _COMMAND_RE.sub(" ", lhs)
    letters = [ch for ch in body if ch.isalpha() and ch not in bound]
    if bound and "\\int" in lhs:
        letters = [ch for ch in letters if ch != "d"]
    return all(ch in "ei" for ch in letters)


def is_variable(s: str) -> bool:
    """x, x_1, \\theta, f(x), AB, (x, y): a name an answer can be assigned to."""
    if len(s) > 24 or s in ("\\pi", "\\infty", "e", "i"):
        return False
    return bool(_VAR_RE.fullmatch(s) or _VAR_TUPLE_RE.fullmatch(s))


def expand_pm(s: str) -> Optional[tuple[str, str]]:
    """``a \\pm b`` -> (a+b, a-(b)); None when there is no single top-level \\pm."""
    if "\\pm" not in s and "\\mp" not in s:
        return None
    toks = tokens(s)
    depth = 0
    at = []
    for i, tok in enumerate(toks):
        if tok in _OPENERS:
            depth += 1
        elif tok in _CLOSERS:
            depth = max(0, depth - 1)
        elif depth == 0 and tok in ("\\pm", "\\mp"):
            at.append(i)
    if len(at) != 1:
        return None
    i = at[0]
    a, b = "".join(toks[:i]), "".join(toks[i + 1:])
    if not b:
        return None
    neg_b = "-" + b if len(split_top(b, ("+", "-"))) == 1 else "-(" + b + ")"
    if not a:
        return b, neg_b
    return a + "+" + b, a + neg_b


def mcq_gold(s: str) -> Optional[str]:
    """The letter of a multiple-choice gold: B, (B), B."""
    m = _MCQ_GOLD_RE.fullmatch(s)
    return m.group(1) if m else None


def mcq_pred(s: str) -> Optional[str]:
    """The letter a completion chose: B, (B), (b), "B) 12", "(B) 12"."""
    m = _MCQ_PRED_RE.match(s)
    if not m:
        return None
    return (m.group(1) or m.group(2)).upper()
