"""Countdown: reach a target from given numbers with + - × ÷ (each number at most once).

Tasks are built backwards from a random expression, so each has a solution. The
verifier parses the answer with ``ast`` (numbers and the four operations only,
length-capped) and evaluates it exactly with fractions. ``partition="train" | "eval"``
gives disjoint question sets (a question is its numbers, in any order, and its target).
"""

from __future__ import annotations

import ast
import random
from collections import Counter
from fractions import Fraction
from typing import Optional

from proctor.pyast import parse

from ..core.difficulty import DifficultyKnob
from ..core.sources import ListSource
from ..core.splits import DEFAULT_EVAL_FRACTION, check_partition, draw_partition
from ..core.types import Task, Verdict
from ..core.verifier import Verifier, exact_verdict
from ..text.verifiers import final_text

PROMPT = ("Using the numbers {numbers}, write an arithmetic expression that equals {target}. "
          "Use each number at most once, with +, -, * and / and parentheses. "
          "Put only the expression inside <answer></answer>.")
LEVEL_NUMBERS = {1: 3, 2: 4, 3: 4, 4: 5, 5: 6}
MAX_EXPRESSION_CHARS = 300
TARGET_EDGES = (10.0, 25.0, 60.0, 150.0)


def question_key(numbers: list[int], target: int) -> str:
    """The canonical form of a countdown question: the numbers sorted, and the target."""
    return f"countdown:{','.join(map(str, sorted(numbers)))}={target}"


def countdown_task(index: int, level: int = 2, seed: int = 0) -> Task:
    if level not in LEVEL_NUMBERS:
        raise ValueError(f"countdown level must be one of {sorted(LEVEL_NUMBERS)}, got {level}")
    rng = random.Random(f"countdown-{seed}-{level}-{index}")
    count = LEVEL_NUMBERS[level]
    high = 10 if level <= 2 else 25 if level <= 4 else 100
    while True:
        numbers = [rng.randint(1, high) for _ in range(count)]
        used = rng.sample(numbers, k=max(2, count - (0 if level >= 3 else 1)))
        expr, value = _combine(rng, used, allow_div=level >= 3)
        if value.denominator == 1 and 0 < value <= 1000:
            break
    key = question_key(numbers, value.numerator)
    return Task(id=f"countdown/L{level}/s{seed}/{index}",
                prompt=PROMPT.format(numbers=", ".join(map(str, numbers)), target=value.numerator),
                answer=str(value.numerator), data={"numbers": numbers, "target": value.numerator, "solution": expr,
                                                   "level": level, "question_key": key},
                source="countdown")


def _combine(rng: random.Random, nums: list[int], allow_div: bool) -> tuple[str, Fraction]:
    items = [(str(n), Fraction(n)) for n in nums]
    while len(items) > 1:
        (a, av), (b, bv) = items.pop(rng.randrange(len(items))), items.pop(rng.randrange(len(items)))
        ops = ["+", "-", "*"] + (["/"] if allow_div and bv != 0 and av % bv == 0 else [])
        op = rng.choice(ops)
        value = {"+": av + bv, "-": av - bv, "*": av * bv, "/": av / bv if bv else av}[op]
        items.append((f"({a} {op} {b})", value))
    text, value = items[0]
    return (text[1:-1] if text.startswith("(") else text), value


class CountdownSource(ListSource):
    """``n`` countdown tasks at one level; ``partition``: "train" or "eval" questions only
    (eval: distinct, possibly fewer than ``n``)."""

    def __init__(self, n: int = 1000, level: int | tuple[int, int] = 2, seed: int = 0,
                 partition: Optional[str] = None, eval_fraction: float = DEFAULT_EVAL_FRACTION) -> None:
        check_partition(partition, eval_fraction)
        lo, hi = (level, level) if isinstance(level, int) else level
        levels = list(range(lo, hi + 1))
        name = f"countdown(level={level}, n={n}, seed={seed}"
        name += ")" if partition is None else f", {partition} {eval_fraction:g})"
        super().__init__(draw_partition(lambda i: countdown_task(i, levels[i % len(levels)], seed), n, partition,
                                        eval_fraction, name), name=name)
        # The difficulty knob: a mix of levels is cut by level (more numbers, larger ones,
        # division); one level by its target, since larger targets need products.
        self.difficulty = (DifficultyKnob("level", "level", tuple(float(x) for x in levels[1:])) if len(levels) > 1
                           else DifficultyKnob("target", "target", TARGET_EDGES))


def evaluate(expression: str) -> tuple[Optional[Fraction], list[int], str]:
    """(value, numbers used, problem): value None with the reason when it is not a valid answer."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        return None, [], "expression too long"
    try:
        tree = parse(expression.replace("×", "*").replace("÷", "/"), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None, [], "not an arithmetic expression"
    used: list[int] = []

    def walk(node: ast.AST) -> Fraction:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            used.append(node.value)
            return Fraction(node.value)
        if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div)):
            a, b = walk(node.left), walk(node.right)
            if isinstance(node.op, ast.Div):
                if b == 0:
                    raise ZeroDivisionError
                return a / b
            return a + b if isinstance(node.op, ast.Add) else a - b if isinstance(node.op, ast.Sub) else a * b
        raise ValueError(f"{type(node).__name__} is not allowed")

    try:
        return walk(tree), used, ""
    except ZeroDivisionError:
        return None, used, "division by zero"
    except (ValueError, RecursionError) as exc:
        return None, used, str(exc) or "not allowed"


class CountdownVerifier(Verifier):
    def verify(self, task: Task, completion: str) -> Verdict:
        expression = final_text(completion)
        value, used, problem = evaluate(expression)
        numbers = Counter(task.data["numbers"])
        if value is not None and Counter(used) - numbers:
            problem = f"uses numbers not given (or more often than given): {sorted((Counter(used) - numbers).elements())}"
            value = None
        ok = value is not None and value == task.data["target"]
        feedback = None if ok else (problem or f"{expression} = {value}, not {task.data['target']}")
        return exact_verdict(ok, info={"extracted": expression, "reason": problem or ("" if ok else "wrong_value")},
                             feedback=feedback)


def reference_completion(task: Task) -> str:
    return f"<answer>{task.data['solution']}</answer>"
