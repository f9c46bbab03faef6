"""Procedural arithmetic with difficulty levels: offline tasks for demos, tests and curricula.

Every task is made from a seed, so a source of n tasks is the same on every machine.
Level 1: a ± b with one-digit numbers … level 5: five operands, parentheses, exact
division and negative numbers.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from fractions import Fraction

from ..core.sources import ListSource
from ..core.types import Task

PROMPT = "Compute {expr}. Put the final answer in \\boxed{{}}."


@dataclass(frozen=True)
class Level:
    operands: int
    digits: int
    ops: str
    parens: bool = False
    negatives: bool = False


LEVELS = {
    1: Level(2, 1, "+-"),
    2: Level(2, 2, "+-*"),
    3: Level(3, 2, "+-*"),
    4: Level(4, 3, "+-*", parens=True),
    5: Level(5, 3, "+-*/", parens=True, negatives=True),
}


def _number(rng: random.Random, level: Level) -> int:
    n = rng.randint(1 if level.digits == 1 else 10 ** (level.digits - 1) // 2, 10 ** level.digits - 1)
    return -n if level.negatives and rng.random() < 0.2 else n


_PREC = {"+": 1, "-": 1, "*": 2, "/": 2, "": 3}
_SHOW = {"+": "+", "-": "-", "*": "×", "/": "÷"}


def _expression(rng: random.Random, level: Level, operands: int) -> tuple[str, Fraction, str]:
    """A random expression over ``operands`` numbers, its exact value (integer by
    construction) and its top operator ("" for a lone number).

    Parentheses are written wherever precedence needs them, so the text means
    exactly the tree that was evaluated; levels with ``parens`` add redundant ones too.
    """
    if operands == 1:
        n = _number(rng, level)
        return (f"({n})" if n < 0 else str(n)), Fraction(n), ""
    left_n = rng.randint(1, operands - 1)
    left, lv, lop = _expression(rng, level, left_n)
    right, rv, rop = _expression(rng, level, operands - left_n)
    op = rng.choice(level.ops)
    if op == "/" and (rv == 0 or (lv / rv).denominator != 1):
        op = rng.choice([o for o in level.ops if o != "/"])
    value = {"+": lv + rv, "-": lv - rv, "*": lv * rv, "/": lv / rv if rv else lv}[op]
    if _PREC[lop] < _PREC[op] or (level.parens and lop and rng.random() < 0.3):
        left = f"({left})"
    if _PREC[rop] < _PREC[op] or (_PREC[rop] == _PREC[op] and op in "-/") or (level.parens and rop and rng.random() < 0.3):
        right = f"({right})"
    return f"{left} {_SHOW[op]} {right}", value, op


def arithmetic_task(index: int, level: int = 2, seed: int = 0, prompt: str = PROMPT) -> Task:
    if level not in LEVELS:
        raise ValueError(f"arithmetic level must be one of {sorted(LEVELS)}, got {level}")
    rng = random.Random(f"arith-{seed}-{level}-{index}")
    spec = LEVELS[level]
    expr, value, _ = _expression(rng, spec, spec.operands)
    assert value.denominator == 1, "expressions are built to have integer values"
    return Task(id=f"arith/L{level}/s{seed}/{index}", prompt=prompt.format(expr=expr), answer=str(value.numerator),
                data={"level": level, "expression": expr}, source="arithmetic")


class ArithmeticSource(ListSource):
    """``n`` arithmetic tasks at one level (or a mix: ``level=(1, 3)`` cycles 1..3).

    ``prompt`` is a template with ``{expr}``, e.g. "What is {expr}?" for a model that
    has never seen ``\\boxed``.
    """

    def __init__(self, n: int = 1000, level: int | tuple[int, int] = 2, seed: int = 0, prompt: str = PROMPT) -> None:
        lo, hi = (level, level) if isinstance(level, int) else level
        levels = list(range(lo, hi + 1))
        if "{expr}" not in prompt:
            raise ValueError(f"the arithmetic prompt template must contain {{expr}}, got {prompt!r}")
        super().__init__((arithmetic_task(i, levels[i % len(levels)], seed, prompt) for i in range(n)),
                         name=f"arithmetic(level={level}, n={n}, seed={seed})")


def reference_completion(task: Task) -> str:
    return f"The expression evaluates to {task.answer}.\n\n\\boxed{{{task.answer}}}"
