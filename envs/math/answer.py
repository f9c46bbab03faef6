"""An answer prepared once for comparison, and the fast tiers that compare two of them.

``prepare`` turns a raw answer into an ``Answer``: canonical string, exact number,
multiple-choice letter, relation (x = 3), shape (tuple, set, ...) with prepared
items. ``decide`` compares two answers with the cheap tiers (string, exact
rational, structure) and returns None when only the symbolic tier can tell; it
takes a ``leaf`` function for that tier, so the worker processes run this very
code with sympy plugged in at the leaves.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Callable, Iterable, Optional

from .bignum import big_number, equals_fraction
from .extract import MAX_ANSWER_CHARS, too_deep
from .normalize import normalize
from .notation import malformed
from .prose import OPTION_RE
from .numbers import APPROX_MIN_SIG, Num, numbers_equal, parse_number
from .structure import (MAX_ITEMS, Shape, drop_approx, enclosing, expand_pm, mcq_gold, mcq_pred,
                        parse_shape, solution_tuples, split_relation, states_value, tokens)
from .surds import Surd, from_num, parse_surd, surds_equal

_TEXT_RE = re.compile(r"[A-Za-z][A-Za-z'\-]{2,}|no|yes", re.IGNORECASE)
# A plain number (12, -0.5, .25, 3/4, \frac{1}{2}): no letter, bracket, relation or
# separator, so none of the structure below can apply and it is read as a number at once.
_PLAIN_NUMBER_RE = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:/\d+)?|[-+]?\\frac\{\d+\}\{\d+\}")


@dataclass(frozen=True)
class MatchResult:
    """The outcome of a comparison. ``tier``: string | exact | structure | symbolic |
    guard | error; ``reason`` says why (equal, not_equal, timeout, too_complex, ...).
    Tier ``error`` is a bug of the matcher, not a judgement: ``MathVerifier`` turns it
    into an ``infra_error`` verdict, never a reward of 0."""

    equal: bool
    tier: str
    reason: str


@dataclass(frozen=True)
class Answer:
    """A prepared answer. ``parse_gold`` returns one for the gold (``ParsedGold``)."""

    raw: str
    norm: str
    reason: str = ""                     # "too_complex" when over the caps
    rel: str = ""                        # assign | equation | inequality | ""
    var: str = ""                        # the variable of an assignment
    lhs: str = ""                        # left side of an assignment or equation
    value: Optional["Answer"] = None     # what is assigned (x = 3 -> 3), or an equation's rhs
    lhs_numeric: bool = False            # lhs = v states v: 2+3 = 5, |AB| = 1, e^{i\pi} = -1
    mcq: Optional[str] = None
    num: Optional[Num] = None
    shape: Optional[Shape] = None
    items: tuple["Answer", ...] = field(default=())
    text: Optional[str] = None           # case-folded, when the answer is a word
    surd: Optional[Surd] = None          # exact q*sqrt(r)*pi^k (2\sqrt{2}, \frac{3\pi}{4})
    digits: Optional[str] = None         # a decimal literal too long for the normal path (bignum.py)


ParsedGold = Answer
Leaf = Callable[[Answer, Answer], MatchResult]


def prepare(raw: str, *, gold: bool = False) -> Answer:
    """Prepare a raw answer string (cached: groups repeat answers)."""
    return _prepare(raw if isinstance(raw, str) else str(raw), gold)


@lru_cache(maxsize=16384)
def _prepare(raw: str, gold: bool) -> Answer:
    if len(raw) > MAX_ANSWER_CHARS:
        digits = big_number(raw)
        if digits is not None:
            return Answer(raw, digits, digits=digits)
    if len(raw) > MAX_ANSWER_CHARS * 4 or too_deep(raw):
        return Answer(raw, raw[:MAX_ANSWER_CHARS], reason="too_complex")
    option = OPTION_RE.fullmatch(raw) if gold else None
    if option is not None:      # "(D) Alina", "C Cecile": a choice and its text
        return Answer(raw, normalize(raw), mcq=option.group(1))
    return _from_norm(raw, canonical(raw), gold, 0)


@lru_cache(maxsize=16384)
def canonical(raw: str) -> str:
    """The canonical string ``prepare`` starts from (cached: a group repeats answers)."""
    return drop_approx(normalize(raw))


def _from_norm(raw: str, norm: str, gold: bool, depth: int) -> Answer:
    if len(norm) > MAX_ANSWER_CHARS or depth > 8:
        return Answer(raw, norm, reason="too_complex")
    num = parse_number(norm) if _PLAIN_NUMBER_RE.fullmatch(norm) else None
    if num is not None:
        return Answer(raw, norm, num=num)
    mcq = mcq_gold(norm) if gold else mcq_pred(norm)
    shape = parse_shape(norm)
    if shape is None:
        pm = expand_pm(norm)
        if pm is not None:
            shape = Shape("list", pm)
    if shape is not None:
        if len(shape.items) > MAX_ITEMS:
            return Answer(raw, norm, reason="too_complex")
        shape = solution_tuples(shape)
        items = tuple(_from_norm(i, normalize(i), gold, depth + 1) for i in shape.items)
        if shape.kind != "matrix" and len(items) == 1 and shape.kind == "list":
            return items[0]
        return Answer(raw, norm, mcq=mcq, shape=shape, items=items)
    enc = enclosing(norm)
    if enc is not None and enc[0] == "(" and enc[2] == ")" and enc[1]:
        inner = _from_norm(raw, enc[1], gold, depth + 1)     # (5) is 5
        return Answer(raw, norm, inner.reason, inner.rel, inner.var, inner.lhs, inner.value,
                      inner.lhs_numeric, mcq, inner.num, inner.shape, inner.items, inner.text, inner.surd)
    relation = split_relation(norm)
    if relation is not None:
        if relation.kind == "inequality":
            return Answer(raw, norm, rel="inequality", mcq=mcq)
        value = _from_norm(relation.rhs, relation.rhs, gold, depth + 1)
        if relation.kind == "assign":
            return Answer(raw, norm, rel="assign", var=relation.lhs, lhs=relation.lhs, value=value, mcq=mcq)
        lhs_numeric = states_value(relation.lhs, relation.rhs)
        return Answer(raw, norm, rel="equation", lhs=relation.lhs, value=value, lhs_numeric=lhs_numeric,
                      mcq=mcq)
    text = norm.casefold() if _TEXT_RE.fullmatch(norm) else None
    num = parse_number(norm)
    surd = parse_surd(norm) if num is None else None
    return Answer(raw, norm, mcq=mcq, num=num, text=text, surd=surd)


def decide(p: Answer, g: Answer, leaf: Optional[Leaf] = None) -> Optional[MatchResult]:
    """Compare prediction ``p`` with gold ``g``; None means "needs the symbolic tier"
    (only when ``leaf`` is None: with a leaf the answer is always decided)."""
    if p.reason:
        return MatchResult(False, "guard", p.reason)
    if g.reason:
        return MatchResult(False, "guard", "gold_" + g.reason)
    if p.digits is not None or g.digits is not None:
        return _decide_big(p, g)
    if p.norm == g.norm:
        # The same junk twice ("\\frac{") is not an answer that is right.
        return MatchResult(False, "guard", "malformed") if malformed(p.norm) else MatchResult(True, "string", "equal")
    if p.text is not None and p.text == g.text:
        return MatchResult(True, "string", "equal")
    if g.mcq is not None:
        return MatchResult(p.mcq == g.mcq, "string", "mcq_equal" if p.mcq == g.mcq else "mcq_differs")
    if p.rel == "assign" or g.rel == "assign":
        return _decide_assign(p, g, leaf)
    if p.rel == "equation" or g.rel == "equation":
        return _decide_equation(p, g, leaf)
    if p.rel or g.rel:
        return leaf(p, g) if leaf else None
    if p.shape is not None or g.shape is not None:
        return _decide_shapes(p, g, leaf)
    if p.num is not None and g.num is not None:
        eq = numbers_equal(p.num, g.num)
        return MatchResult(eq, "exact", "equal" if eq else "not_equal")
    if (p.surd is not None or g.surd is not None) and (p.surd or p.num) and (g.surd or g.num):
        r = _decide_surds(p, g)
        if r is not None:
            return r
    if p.text is not None or g.text is not None:
        if (p.text is not None and (g.text is not None or g.num is not None)) or (
                g.text is not None and p.num is not None):
            return MatchResult(False, "string", "not_equal")
    return leaf(p, g) if leaf else None


def _decide_big(p: Answer, g: Answer) -> MatchResult:
    """A decimal literal too long for the normal path against anything: exact, in time
    linear in its length (``bignum.py``); never the symbolic tier."""
    big, other = (p, g) if p.digits is not None else (g, p)
    if other.digits is not None:
        eq = big.digits == other.digits
    elif other.rel == "assign" and other.value is not None and other.value.num is not None:
        eq = not other.value.num.percent and equals_fraction(big.digits, other.value.num.value)
    elif other.num is not None and not other.num.percent:
        eq = equals_fraction(big.digits, other.num.value)
    else:
        return MatchResult(False, "guard", "too_complex")     # 10^{100000} and the like: not decided
    return MatchResult(eq, "exact", "equal" if eq else "not_equal")


def _decide_surds(p: Answer, g: Answer) -> Optional[MatchResult]:
    nums = [a.num for a in (p, g) if a.num is not None]
    if any(n.percent for n in nums):
        return None
    a = p.surd or from_num(p.num)
    b = g.surd or from_num(g.num)
    if surds_equal(a, b):
        return MatchResult(True, "exact", "equal")
    if any(n.places is not None and n.sig >= APPROX_MIN_SIG for n in nums):
        return None          # 3.14159 may approximate pi: the symbolic tier applies the policy
    return MatchResult(False, "exact", "not_equal")


def _decide_assign(p: Answer, g: Answer, leaf: Optional[Leaf]) -> Optional[MatchResult]:
    if p.rel == "assign" and g.rel == "assign":
        if p.var == g.var:
            return decide(p.value, g.value, leaf)
        renamed = _renamed_argument(p, g)
        if renamed is not None:
            return decide(p.value, renamed, leaf)    # f(x) = x^2 vs f(n) = n^2
        return leaf(p, g) if leaf else None          # y = 2x + 3 vs x = (y - 3)/2
    if p.rel == "assign":
        if g.rel:
            return leaf(p, g) if leaf else None
        return decide(p.value, g, leaf)               # x = 3 vs 3
    if p.rel:
        return leaf(p, g) if leaf else None
    return decide(p, g.value, leaf)


_CALL_RE = re.compile(r"([A-Za-z])\(([a-z])\)")


def _renamed_argument(p: Answer, g: Answer) -> Optional[Answer]:
    """The gold's value with its function's argument renamed to the prediction's, when
    both define one function of one letter: ``W(n) = n + 1`` read as ``W(x) = x + 1`` for
    ``W(x) = ...``. None when the functions differ, or when the prediction's letter is
    already in the gold's value (``f(n) = n + x``: renaming would capture it)."""
    a, b = _CALL_RE.fullmatch(p.var), _CALL_RE.fullmatch(g.var)
    if a is None or b is None or a.group(1) != b.group(1) or g.value is None or p.value is None:
        return None
    mine, theirs = a.group(2), b.group(2)
    toks = tokens(g.value.norm)
    if mine in toks:
        return None
    return prepare("".join(mine if t == theirs else t for t in toks), gold=True)


def _decide_equation(p: Answer, g: Answer, leaf: Optional[Leaf]) -> Optional[MatchResult]:
    if p.rel == "equation" and g.rel == "equation":
        return leaf(p, g) if leaf else None
    if p.rel == "equation" and not g.rel:
        # "2 + 3 = 5" states the value 5; "x^2 = 4" does not state 4.
        if p.lhs_numeric:
            return decide(p.value, g, leaf)
        return MatchResult(False, "structure", "equation_vs_value")
    if g.rel == "equation" and not p.rel:
        # A gold "|AB| = 1" or "V_1:V_2 = 11:21" names what the value 1 / 11:21 is.
        if g.lhs_numeric:
            return decide(p, g.value, leaf)
        return MatchResult(False, "structure", "value_vs_equation")
    return leaf(p, g) if leaf else None


def _decide_shapes(p: Answer, g: Answer, leaf: Optional[Leaf]) -> Optional[MatchResult]:
    ps, gs = p.shape, g.shape
    if (ps is None and "\\begin{" in p.norm) or (gs is None and "\\begin{" in g.norm):
        return leaf(p, g) if leaf else None     # a sum or product of matrices: evaluate it
    if gs is None:
        if ps.kind in ("list", "set"):
            # "1/2 or 0.5" restates one value; "3 or 4" hedges and fails a single gold.
            return _all((decide(i, g, leaf) for i in p.items), "all_items")
        return MatchResult(False, "structure", "shape_mismatch")
    if ps is None:
        if gs.kind in ("list", "set") and len(g.items) == 1:
            return decide(p, g.items[0], leaf)
        return MatchResult(False, "structure", "shape_mismatch")
    kinds = {ps.kind, gs.kind}
    if "union" in kinds and ("list" in kinds or "seq" in kinds) or is_inequality_list(p) or is_inequality_list(g):
        # "x < 2 or x > 5" vs (-oo, 2) U (5, oo), "x > 1 and x < 3" vs (1, 3): sets of reals
        return leaf(p, g) if leaf else None
    if ps.kind == "matrix" and gs.kind == "matrix":
        if (ps.rows, ps.cols) != (gs.rows, gs.cols):
            return MatchResult(False, "structure", "shape_mismatch")
        return _ordered(p.items, g.items, leaf)
    if kinds == {"matrix", "seq"}:
        mat = ps if ps.kind == "matrix" else gs
        if min(mat.rows, mat.cols) != 1:
            return MatchResult(False, "structure", "shape_mismatch")
        return _ordered(p.items, g.items, leaf)
    if kinds <= {"set", "list"} or kinds == {"union"}:
        return _unordered(p.items, g.items, leaf)
    if ps.kind == "seq" and gs.kind == "seq":
        if (ps.open, ps.close) != (gs.open, gs.close):
            return MatchResult(False, "structure", "brackets_differ")
        return _ordered(p.items, g.items, leaf)
    if kinds == {"seq", "list"}:
        return _ordered(p.items, g.items, leaf)
    return MatchResult(False, "structure", "shape_mismatch")


def is_inequality_list(a: Answer) -> bool:
    """A list of inequalities: "x < 2 or x > 5" (a union), "x > 1 and x < 3" (an intersection)."""
    return a.shape is not None and a.shape.kind == "list" and all(i.rel == "inequality" for i in a.items)


def _all(results: Iterable[Optional[MatchResult]], reason: str) -> Optional[MatchResult]:
    undecided = False
    tier = "structure"
    for r in results:
        if r is None:
            undecided = True
        elif not r.equal:
            return MatchResult(False, r.tier if r.tier != "string" else "structure", r.reason)
        elif r.tier == "symbolic":
            tier = "symbolic"
    if undecided:
        return None
    return MatchResult(True, tier, reason)


def _ordered(ps: tuple[Answer, ...], gs: tuple[Answer, ...], leaf: Optional[Leaf]) -> Optional[MatchResult]:
    if len(ps) != len(gs):
        return MatchResult(False, "structure", "length_differs")
    return _all((decide(a, b, leaf) for a, b in zip(ps, gs)), "equal")


def _unordered(ps: tuple[Answer, ...], gs: tuple[Answer, ...], leaf: Optional[Leaf]) -> Optional[MatchResult]:
    ps, gs = _dedupe(ps), _dedupe(gs)
    cache: dict[tuple[int, int], Optional[MatchResult]] = {}

    def cmp(i: int, j: int) -> Optional[MatchResult]:
        if (i, j) not in cache:
            cache[(i, j)] = decide(ps[i], gs[j], leaf)
        return cache[(i, j)]

    def covered(n_from: int, n_to: int, flip: bool) -> Optional[bool]:
        undecided = False
        for a in range(n_from):
            found = False
            for b in range(n_to):
                r = cmp(b, a) if flip else cmp(a, b)
                if r is None:
                    undecided = True
                elif r.equal:
                    found = True
                    break
            if not found:
                return None if undecided else False
        return True

    for flip in (False, True):
        ok = covered(len(gs), len(ps), True) if flip else covered(len(ps), len(gs), False)
        if ok is None:
            return None
        if not ok:
            return MatchResult(False, "structure", "elements_differ")
    tier = "symbolic" if any(r is not None and r.tier == "symbolic" for r in cache.values()) else "structure"
    return MatchResult(True, tier, "equal")


def _dedupe(items: tuple[Answer, ...]) -> tuple[Answer, ...]:
    seen: set[str] = set()
    out = []
    for item in items:
        if item.norm not in seen:
            seen.add(item.norm)
            out.append(item)
    return tuple(out)
