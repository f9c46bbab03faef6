"""Procedural arithmetic with difficulty levels: offline tasks for demos, tests and curricula.

Every task is made from a seed, so a source of n tasks is the same on every machine.
Level 1: a ± b with one-digit numbers … level 5: five operands, parentheses, exact
division and negative numbers. ``numbers=(lo, hi)`` draws every operand from that
range instead of the level's digits: level 1 has only 162 expressions (126 distinct
questions: ``3 + 4`` and ``4 + 3`` are one), level 1 with ``numbers=(0, 50)`` has 5202
expressions, 3927 questions (the questions the tiny model is pretrained on).

Difficulty knob (``ArithmeticSource.difficulty``): each task's :func:`work` (carries,
borrows, subtractions, negative results, digit products), cut at the source's quantiles,
so the trainer can aim each group at the policy's frontier.

``partition="train" | "eval"`` gives disjoint question sets: a question (its
expression, whatever the prompt's wording) is held out when the hash of
:func:`question_key` falls below ``eval_fraction`` (see ``proctor.envs.core.splits``).
"""

from __future__ import annotations

import ast
import random
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Optional, Sequence

from proctor.pyast import parse

from ..core.difficulty import DifficultyKnob
from ..core.sources import ListSource
from ..core.splits import DEFAULT_EVAL_FRACTION, check_partition, draw_partition, in_eval_partition
from ..core.types import Task

PROMPT = "Compute {expr}. Put the final answer in \\boxed{{}}."


@dataclass(frozen=True)
class Level:
    operands: int
    digits: int
    ops: str
    parens: bool = False
    negatives: bool = False
    low: Optional[int] = None      # operand range; None: from the digits
    high: Optional[int] = None


LEVELS = {
    1: Level(2, 1, "+-"),
    2: Level(2, 2, "+-*"),
    3: Level(3, 2, "+-*"),
    4: Level(4, 3, "+-*", parens=True),
    5: Level(5, 3, "+-*/", parens=True, negatives=True),
}


def _number(rng: random.Random, level: Level) -> int:
    if level.low is not None and level.high is not None:
        n = rng.randint(level.low, level.high)
    else:
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


def question_key(expression: str) -> str:
    """The canonical form of an arithmetic question, the same for every way of writing it.

    ``"3 × 4"``, ``"4*3"`` and ``"4 * 3"`` are all ``"arith:3*4"``; ``"4 + 3"`` is
    ``"arith:3+4"``: the operands of + and × in any order (and grouping) are one
    question, so a held-out ``a + b`` never has its ``b + a`` among the training
    questions. Sums are read as signed terms (``a - b + c`` is ``a + c - b``); ÷ keeps
    its order. The prompt's wording is not part of the question.
    """
    try:
        body = _canonical(_tree(expression))
    except (SyntaxError, ValueError):
        body = "".join(expression.replace("×", "*").replace("÷", "/").split())
    return "arith:" + body


def _tree(expression: str) -> ast.expr:
    """The expression as Python reads it (× and ÷ as * and /)."""
    return parse(expression.replace("×", "*").replace("÷", "/"), mode="eval").body


def _canonical(node: ast.expr) -> str:
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        terms = sorted(sign + _wrapped(term, (ast.Add, ast.Sub)) for sign, term in _terms(node, "+"))
        return "".join(terms).removeprefix("+")
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return "*".join(sorted(_wrapped(f, (ast.Add, ast.Sub, ast.Mult)) for f in _factors(node)))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return _wrapped(node.left, (ast.Add, ast.Sub)) + "/" + _wrapped(node.right, (ast.Add, ast.Sub, ast.Mult, ast.Div))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        return f"({-node.operand.value})"
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return str(node.value)
    raise ValueError(f"not an arithmetic expression: {ast.dump(node)[:80]}")


def _terms(node: ast.expr, sign: str) -> list[tuple[str, ast.expr]]:
    """A sum as signed terms: ``a - (b - c)`` is +a, -b, +c."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        flip = {"+": "-", "-": "+"}
        right = sign if isinstance(node.op, ast.Add) else flip[sign]
        return _terms(node.left, sign) + _terms(node.right, right)
    return [(sign, node)]


def _factors(node: ast.expr) -> list[ast.expr]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _factors(node.left) + _factors(node.right)
    return [node]


def _wrapped(node: ast.expr, looser: tuple[type, ...]) -> str:
    """A sub-expression's canonical form, in parentheses when its operator binds looser."""
    text = _canonical(node)
    return f"({text})" if isinstance(node, ast.BinOp) and isinstance(node.op, looser) else text


def in_eval_split(expression: str, eval_fraction: float = DEFAULT_EVAL_FRACTION) -> bool:
    """Whether the question ``expression`` (e.g. ``"3 + 4"``) is held out for evaluation:
    the tiny model's pretraining corpus leaves these out, and ``partition="eval"`` draws only them."""
    return in_eval_partition(question_key(expression), eval_fraction)


def _numbers(numbers: Optional[Sequence[int]]) -> Optional[tuple[int, int]]:
    if numbers is None:
        return None
    if (len(numbers) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in numbers)
            or numbers[0] > numbers[1]):
        raise ValueError(f"numbers must be two integers [low, high] with low <= high, got {numbers!r}")
    return int(numbers[0]), int(numbers[1])


def arithmetic_task(index: int, level: int = 2, seed: int = 0, prompt: str = PROMPT,
                    numbers: Optional[Sequence[int]] = None) -> Task:
    """Task ``index`` of a level; ``numbers=(lo, hi)`` draws the operands from that range."""
    if level not in LEVELS:
        raise ValueError(f"arithmetic level must be one of {sorted(LEVELS)}, got {level}")
    span = _numbers(numbers)
    rng = random.Random(f"arith-{seed}-{level}-{index}")
    spec = LEVELS[level] if span is None else replace(LEVELS[level], low=span[0], high=span[1])
    expr, value, _ = _expression(rng, spec, spec.operands)
    assert value.denominator == 1, "expressions are built to have integer values"
    range_id = "" if span is None else f"/n{span[0]}-{span[1]}"
    return Task(id=f"arith/L{level}{range_id}/s{seed}/{index}", prompt=prompt.format(expr=expr),
                answer=str(value.numerator), data={"level": level, "expression": expr,
                                                   "question_key": question_key(expr),
                                                   "work": work(expr)}, source="arithmetic")


def work(expression: str) -> int:
    """How much work the question takes, counted as a person would: for each + and -, every
    column with a carry or borrow; each subtraction one more, and one more when it goes
    negative; for each x the product of the operands' digit counts; for each / the digits
    of the quotient plus one. The difficulty knob reads it (``task.data["work"]``)."""
    return _work(_tree(expression))[1]


def _work(node: ast.expr) -> tuple[Fraction, int]:
    """(value, work) of an expression tree."""
    if isinstance(node, ast.Constant):
        return Fraction(node.value), 0
    if isinstance(node, ast.UnaryOp):
        value, w = _work(node.operand)
        return -value, w
    assert isinstance(node, ast.BinOp)
    (a, wa), (b, wb) = _work(node.left), _work(node.right)
    if isinstance(node.op, (ast.Add, ast.Sub)):
        value = a + b if isinstance(node.op, ast.Add) else a - b
        subtract = isinstance(node.op, ast.Sub) != ((a < 0) != (b < 0))   # on magnitudes
        x, y = sorted((abs(int(a)), abs(int(b))), reverse=True)
        step = _borrows(x, y) + 1 + (value < 0) if subtract else _carries(x, y)
    elif isinstance(node.op, ast.Mult):
        value, step = a * b, len(str(abs(int(a)))) * len(str(abs(int(b))))
    else:
        value = a / b if b else a
        step = len(str(abs(int(value)))) + 1
    return value, wa + wb + step


def _carries(x: int, y: int) -> int:
    carries, carry = 0, 0
    while x or y:
        carry = (x % 10 + y % 10 + carry) >= 10
        carries += carry
        x, y = x // 10, y // 10
    return carries


def _borrows(x: int, y: int) -> int:
    """Borrows in x - y with x >= y >= 0."""
    borrows, borrow = 0, 0
    while y or borrow:
        borrow = (x % 10 - y % 10 - borrow) < 0
        borrows += borrow
        x, y = x // 10, y // 10
    return borrows


def difficulty_knob(tasks: Sequence[Task], bins: int = 5) -> DifficultyKnob:
    """The knob over these tasks' ``work``, cut at its quantiles into at most ``bins`` levels
    (one level per value when it takes at most ``bins``: level 1 has four, 0 to 3)."""
    values = sorted(t.data["work"] for t in tasks)
    distinct = sorted(set(values))
    cuts = (set(distinct[1:]) if len(distinct) <= bins   # few values: one level each
            else {values[len(values) * k // bins] for k in range(1, bins)} - {values[0]})
    if not cuts:   # every task takes the same work: one edge above it (the knob check flags one level)
        cuts = {values[0] + 1}
    return DifficultyKnob("work", key="work", edges=tuple(float(c) for c in sorted(cuts)))


class ArithmeticSource(ListSource):
    """``n`` arithmetic tasks at one level (or a mix: ``level=(1, 3)`` cycles 1..3).

    ``prompt`` is a template with ``{expr}``, e.g. "What is {expr}?" for a model that
    has never seen ``\\boxed``. ``numbers=(lo, hi)``: the operands' range. ``partition``:
    "train" or "eval" questions only (eval: distinct, possibly fewer than ``n``);
    ``train_within``: train questions only below that hash too (0.5: none the tiny model saw).
    """

    def __init__(self, n: int = 1000, level: int | tuple[int, int] = 2, seed: int = 0, prompt: str = PROMPT,
                 numbers: Optional[Sequence[int]] = None, partition: Optional[str] = None,
                 eval_fraction: float = DEFAULT_EVAL_FRACTION, train_within: float = 1.0) -> None:
        lo, hi = (level, level) if isinstance(level, int) else level
        levels = list(range(lo, hi + 1))
        if "{expr}" not in prompt:
            raise ValueError(f"the arithmetic prompt template must contain {{expr}}, got {prompt!r}")
        check_partition(partition, eval_fraction)
        span = _numbers(numbers)
        name = f"arithmetic(level={level}, n={n}, seed={seed}"
        name += "" if span is None else f", numbers={list(span)}"
        name += "" if partition is None else f", {partition} {eval_fraction:g}"
        name += "" if train_within == 1.0 or partition != "train" else f" within {train_within:g}"
        tasks = draw_partition(lambda i: arithmetic_task(i, levels[i % len(levels)], seed, prompt, span), n,
                               partition, eval_fraction, what=name + ")", train_within=train_within)
        super().__init__(tasks, name=name + ")")
        self.difficulty = difficulty_knob(tasks)


def reference_completion(task: Task) -> str:
    return f"The expression evaluates to {task.answer}.\n\n\\boxed{{{task.answer}}}"
