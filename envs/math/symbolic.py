"""The symbolic tier: LaTeX -> SymPy (latex2sympy2_extended) and exact-first comparison.

Runs ONLY inside the pool's worker processes (``worker.py``), never in the caller:
parsing and simplifying can take unbounded time and memory, and only a process
can be killed. No timeouts here: the pool's deadline and rlimits are the guard.

Comparison, cheapest first and exact before numeric:
* structural equality of the SymPy trees;
* constants: values at 50 significant digits must agree to a relative 1e-30, so
  ``1/2^99`` vs ``1/2^98`` or ``1/2006!`` vs ``1/2004!`` (which fool a float
  comparison) are told apart; a decimal literal only passes as an approximation
  under the policy in ``numbers.py`` (>= 6 significant digits);
* expressions with variables: agree at several random rational points (50 digits),
  then ``simplify(a - b) == 0`` when the points could not be evaluated;
* equations: ``lhs - rhs`` of one is a nonzero constant multiple of the other's;
* inequalities, intervals and "x \\in S": compared as sets of reals.
Math-Verify's ``verify`` is the last resort for objects none of these handle (sets
of expressions, ...), never for plain numbers, where its float rounding misleads.
"""

from __future__ import annotations

import random
from fractions import Fraction
from functools import lru_cache
from typing import Any, Optional

import sympy
from latex2sympy2_extended.latex2sympy2 import ConversionConfig, NormalizationConfig, latex2sympy
from math_verify import verify as mv_verify
from math_verify.grader import should_treat_as_complex
from sympy import Float, I, MatrixBase, Rational, Set
from sympy.core.function import AppliedUndef
from sympy.core.relational import Equality, Relational

from .answer import Answer, MatchResult, decide, is_inequality_list, prepare
from .numbers import APPROX_MIN_SIG, Num, approx_equal

_NORM = NormalizationConfig(basic_latex=True, units=False, malformed_operators=True, nits=False,
                            boxed="none", equations=False)
_CONV = ConversionConfig(interpret_as_mixed_fractions=True)
_DIGITS = 50
_REL_TOL = sympy.Float("1e-30", 60)
_POINTS = 6


class Unparsable(Exception):
    """latex2sympy could not read an answer."""


def match_symbolic(pred: str, gold: str) -> MatchResult:
    """Full comparison of two raw answers with the symbolic tier at the leaves."""
    result = decide(prepare(pred), prepare(gold, gold=True), symbolic_leaf)
    # With a leaf every branch decides; the fallback only guards against a future gap.
    return result if result is not None else MatchResult(False, "symbolic", "undecided")


def symbolic_leaf(p: Answer, g: Answer) -> MatchResult:
    try:
        if "inequality" in (p.rel, g.rel) or any(_is_membership(a) or _is_union(a) for a in (p, g)):
            eq = _sets_equal(p, g)
        elif p.rel or g.rel:
            eq = _equations_equal(p, g)
        else:
            eq = _expressions_equal(p, g, to_sympy(p.norm), to_sympy(g.norm))
    except Unparsable:
        return MatchResult(False, "symbolic", "unparsable")
    return MatchResult(eq, "symbolic", "equal" if eq else "not_equal")


@lru_cache(maxsize=2048)
def to_sympy(latex: str) -> Any:
    """Parse a canonical answer; raises Unparsable."""
    s = latex[:-1] if latex.endswith("%") else latex
    try:
        expr = latex2sympy(s, is_real=not should_treat_as_complex(s), convert_degrees=False,
                           normalization_config=_NORM, conversion_config=_CONV)
    except (MemoryError, RecursionError):
        raise
    except Exception as exc:   # noqa: BLE001 - the ANTLR parser raises anything on garbage
        raise Unparsable(str(exc)[:200]) from None
    if isinstance(expr, sympy.MatrixExpr) and not isinstance(expr, MatrixBase):
        expr = expr.doit()      # a sum or product of explicit matrices: its value
    return _exact(expr)


def _exact(expr: Any) -> Any:
    """Decimal literals become exact rationals (0.1 is 1/10, not a binary float) and a
    variable named i becomes the imaginary unit."""
    if not isinstance(expr, (sympy.Basic, MatrixBase)):
        return expr
    swap: dict[Any, Any] = {f: Rational(str(f)) for f in expr.atoms(Float)}
    swap.update({s: I for s in getattr(expr, "free_symbols", ()) if getattr(s, "name", "") == "i"})
    return expr.xreplace(swap) if swap else expr


def _is_membership(a: Answer) -> bool:
    return a.rel == "assign" and "\\in" in a.norm


def _is_union(a: Answer) -> bool:
    return a.shape is not None and a.shape.kind == "union" or is_inequality_list(a)


# --- expressions -------------------------------------------------------------------

def _expressions_equal(p: Answer, g: Answer, a: Any, b: Any) -> bool:
    if isinstance(a, MatrixBase) or isinstance(b, MatrixBase):
        if not (isinstance(a, MatrixBase) and isinstance(b, MatrixBase)) or a.shape != b.shape:
            return False
        return all(_values_equal(x, y, None, None) for x, y in zip(a, b))
    if isinstance(a, Set) or isinstance(b, Set):
        return isinstance(a, Set) and isinstance(b, Set) and _same_set(a, b)
    if isinstance(a, (Relational, sympy.logic.boolalg.Boolean)) or isinstance(b, (Relational, sympy.logic.boolalg.Boolean)):
        return a == b
    if not isinstance(a, sympy.Expr) or not isinstance(b, sympy.Expr):
        return _last_resort(a, b)
    return _values_equal(a, b, p.num, g.num)


def _values_equal(a: Any, b: Any, p_num: Optional[Num], g_num: Optional[Num]) -> bool:
    if a == b or str(a) == str(b):     # same printed form: same expression (symbols may differ in assumptions)
        return True
    if not (isinstance(a, sympy.Expr) and isinstance(b, sympy.Expr)):
        return _last_resort(a, b)
    free = a.free_symbols | b.free_symbols
    if not free:
        diff = a - b
        if diff.is_Rational:       # SymPy cancelled it exactly: 10^900 - (10^900 - 1) is 1, not ~0
            return diff == 0 or _any_decimal_approximates(p_num, g_num, a, b)
        for dec, other in ((p_num, b), (g_num, a)):
            if dec is not None and dec.places is not None:
                return _approximates(dec, other)
        close = _close(a, b)
        if close is not None:
            return close
        return _simplifies_to_zero(a - b)
    verdict = _agree_at_points(a, b, sorted(free, key=str))
    if verdict is not None:
        return verdict
    return _simplifies_to_zero(a - b)


def _any_decimal_approximates(p_num: Optional[Num], g_num: Optional[Num], a: Any, b: Any) -> bool:
    return any(dec is not None and dec.places is not None and _approximates(dec, other)
               for dec, other in ((p_num, b), (g_num, a)))


def _approximates(dec: Num, exact: Any) -> bool:
    """The decimal policy of numbers.py, against an exact SymPy constant."""
    written = Rational(dec.value.numerator, dec.value.denominator)
    if _close(written, exact):
        return True
    if dec.sig < APPROX_MIN_SIG or dec.value == 0:
        return False
    if exact.is_Rational:
        return approx_equal(dec, Fraction(int(exact.p), int(exact.q)))
    v = sympy.N(exact, _DIGITS)
    if not v.is_real:
        return False
    return bool(abs(written - v) < Rational(1, 10) ** dec.places)


def _close(a: Any, b: Any) -> Optional[bool]:
    """Equal to 30 significant digits; None when not both finite numbers."""
    va, vb = sympy.N(a, _DIGITS), sympy.N(b, _DIGITS)
    if not (va.is_number and vb.is_number) or va.has(sympy.nan, sympy.zoo) or vb.has(sympy.nan, sympy.zoo):
        return None
    if va.has(sympy.oo, -sympy.oo) or vb.has(sympy.oo, -sympy.oo):
        return bool(va == vb)
    scale = max(abs(va), abs(vb))
    if scale == 0:
        return True
    diff = abs(sympy.N(va - vb, _DIGITS))
    if not diff.is_number:
        return None
    return bool(diff <= scale * _REL_TOL)


def _agree_at_points(a: Any, b: Any, symbols: list[Any]) -> Optional[bool]:
    rng = random.Random(20240611)
    agreed = 0
    for _ in range(_POINTS):
        point = {s: Rational(rng.choice([-1, 1]) * rng.randint(3, 40), rng.randint(7, 23)) for s in symbols}
        try:
            verdict = _close(a.xreplace(point), b.xreplace(point))
        except (ZeroDivisionError, ValueError, TypeError):
            verdict = None
        if verdict is False:
            return False
        if verdict:
            agreed += 1
    return True if agreed >= 3 else None


def _simplifies_to_zero(d: Any) -> bool:
    try:
        return bool(sympy.simplify(d) == 0)
    except (MemoryError, RecursionError):
        raise
    except Exception:   # noqa: BLE001 - sympy raises many things on odd input
        return False


def _last_resort(a: Any, b: Any) -> bool:
    try:
        return bool(mv_verify(b, a, timeout_seconds=None))
    except Exception:   # noqa: BLE001
        return False


# --- equations ---------------------------------------------------------------------

def _equations_equal(p: Answer, g: Answer) -> bool:
    """lhs - rhs of one is a nonzero constant multiple of the other's."""
    da, db = _difference(p), _difference(g)
    if da is None or db is None:
        return False
    if da == db:
        return True
    free = sorted(da.free_symbols | db.free_symbols, key=str)
    if not free:
        return False
    rng = random.Random(7)
    ratios = []
    for _ in range(_POINTS + 2):
        point = {s: Rational(rng.choice([-1, 1]) * rng.randint(3, 40), rng.randint(7, 23)) for s in free}
        try:
            x, y = sympy.N(da.xreplace(point), _DIGITS), sympy.N(db.xreplace(point), _DIGITS)
        except (ZeroDivisionError, ValueError, TypeError):
            continue
        if not (x.is_number and y.is_number) or x.has(sympy.nan, sympy.zoo) or y.has(sympy.nan, sympy.zoo):
            continue
        if abs(y) < _REL_TOL:
            if abs(x) >= _REL_TOL:
                return False
            continue
        ratios.append(x / y)
    if len(ratios) < 3:
        q = sympy.simplify(da / db)
        return bool(q.is_number and q != 0 and q.is_finite)
    first = ratios[0]
    if abs(first) < _REL_TOL:
        return False
    return all(abs(r - first) <= abs(first) * _REL_TOL for r in ratios[1:])


def _difference(a: Answer) -> Optional[Any]:
    if a.rel not in ("assign", "equation") or a.value is None:
        return None
    lhs, rhs = to_sympy(a.lhs), to_sympy(a.value.norm)
    if not (isinstance(lhs, sympy.Expr) and isinstance(rhs, sympy.Expr)):
        return None
    return lhs - rhs


# --- sets (inequalities, intervals, membership) -------------------------------------

def _sets_equal(p: Answer, g: Answer) -> bool:
    sa, sb = _to_set(p), _to_set(g)
    return sa is not None and sb is not None and _same_set(sa, sb)


def _to_set(a: Answer) -> Optional[Set]:
    if _is_union(a):
        parts = [_to_set(i) for i in a.items]
        if any(x is None for x in parts):
            return None
        return sympy.Intersection(*parts) if a.shape.conj else sympy.Union(*parts)
    if a.rel == "assign" and a.value is not None:
        v = to_sympy(a.value.norm)
    else:
        v = to_sympy(a.norm)
    if isinstance(v, Set):
        return v
    if isinstance(v, (Relational, sympy.logic.boolalg.BooleanFunction)) and not isinstance(v, Equality):
        calls = v.atoms(AppliedUndef)
        if len(calls) == 1:          # 0 < f(x) < 1 is the range of f: a set of values
            v = v.xreplace({calls.pop(): sympy.Symbol("_value", real=True)})
        free = v.free_symbols
        if len(free) == 1:
            try:
                return v.as_set()
            except Exception:   # noqa: BLE001 - not solvable as a univariate set
                return None
        return None
    if isinstance(v, sympy.Expr) and v.is_number:
        return sympy.FiniteSet(v)
    return None


def _same_set(a: Set, b: Set) -> bool:
    if a == b:
        return True
    try:
        return bool(a.symmetric_difference(b) == sympy.EmptySet)
    except Exception:   # noqa: BLE001
        return False
