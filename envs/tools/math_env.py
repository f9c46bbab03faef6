"""``proctor/PythonToolMath-v0``: math questions, a ``python`` tool, the answer judged by the math matcher.

    env = gymnasium.make("proctor/PythonToolMath-v0")                  # procedural: 3-digit by 2-digit
    env = gymnasium.make("proctor/PythonToolMath-v0", tasks="math.jsonl", limits={"max_turns": 6})

Without ``tasks`` the questions are procedural (`ToolArithmeticSource`): "What is 482 * 37?"
with operands too long for a small model's head and ASCII operators a program can take as
they are, so that running the expression is the way to the answer. Questions are split into
train and eval by their canonical form (``partition``), as the other arithmetic envs do.
"""

from __future__ import annotations

import random
from typing import Any, Mapping, Optional, Sequence, Union

from ..core.sources import ListSource, TaskSource
from ..core.splits import DEFAULT_EVAL_FRACTION, check_partition, draw_partition
from ..core.types import Task
from ..core.verifier import Part, Rubric
from .env import ToolEnv
from .episode import ToolLimits

TOOL_PROMPT = "What is {expr}?"
# (operator, digits of the left operand, digits of the right one)
SHAPES: tuple[tuple[str, int, int], ...] = (("*", 3, 2), ("+", 4, 4), ("-", 4, 3))


def tool_arithmetic_task(index: int, seed: int = 0, prompt: str = TOOL_PROMPT,
                         shapes: Sequence[tuple[str, int, int]] = SHAPES) -> Task:
    """Task ``index``: one operator of ``shapes`` (in turn), operands of their digit counts."""
    from ..procedural.arithmetic import question_key

    op, da, db = shapes[index % len(shapes)]
    rng = random.Random(f"tool-arith-{seed}-{index}")
    a, b = rng.randint(10 ** (da - 1), 10 ** da - 1), rng.randint(10 ** (db - 1), 10 ** db - 1)
    expr = f"{a} {op} {b}"
    value = {"*": a * b, "+": a + b, "-": a - b}[op]
    return Task(id=f"tool-arith/s{seed}/{index}", prompt=prompt.format(expr=expr), answer=str(value),
                data={"expression": expr, "question_key": question_key(expr), "operator": op},
                source="tool-arithmetic")


class ToolArithmeticSource(ListSource):
    """``n`` procedural questions that a program answers at once and a small model cannot: 3-digit
    times 2-digit products, 4-digit sums and differences (``shapes``). ``partition``: "train" or
    "eval" questions only (by canonical question); ``train_within`` as in ``ArithmeticSource``."""

    def __init__(self, n: int = 2000, seed: int = 0, prompt: str = TOOL_PROMPT,
                 shapes: Sequence[tuple[str, int, int]] = SHAPES, partition: Optional[str] = None,
                 eval_fraction: float = DEFAULT_EVAL_FRACTION, train_within: float = 1.0) -> None:
        if "{expr}" not in prompt:
            raise ValueError(f"the prompt template must contain {{expr}}, got {prompt!r}")
        check_partition(partition, eval_fraction)
        for shape in shapes:
            if len(shape) != 3 or shape[0] not in "*+-" or not all(isinstance(d, int) and 1 <= d <= 9
                                                                   for d in shape[1:]):
                raise ValueError(f"each shape is (operator in * + -, digits 1-9, digits 1-9), got {shape!r}")
        name = f"tool-arithmetic(n={n}, seed={seed}" + ("" if partition is None else f", {partition}") + ")"
        tasks = draw_partition(lambda i: tool_arithmetic_task(i, seed, prompt, tuple(shapes)), n, partition,
                               eval_fraction, what=name, train_within=train_within)
        super().__init__(tasks, name=name)


def reference_completion(task: Task) -> str:
    """An answer with no tool call (the checker's known-right reply)."""
    return f"\\boxed{{{task.answer}}}"


def python_tool_math(source: TaskSource, *, sandbox: Union[Any, Mapping[str, Any], None] = None,
                     limits: Union[ToolLimits, Mapping[str, Any], None] = None, parser: Any = "hermes",
                     session_memory_mb: int = 256, timeout_s: float = 2.0, format_weight: float = 0.0,
                     **kw: Any) -> ToolEnv:
    """``source``'s questions with a ``python`` tool on the sandbox (``sandbox``: a Sandbox, a
    RemoteSandbox or their options; ``session_memory_mb`` per session); the final answer is judged
    by the math matcher (``proctor/PythonToolMath-v0`` builds the source: ``registry.make_python_tool_math``)."""
    from ..math import MathVerifier
    from ..text import verifiers as text
    from .python import PythonTool

    parts = [Part("format", text.answer_tag_format, format_weight)] if format_weight > 0 else []
    tool = PythonTool(sandbox, memory_mb=session_memory_mb)
    return ToolEnv(source, Rubric(MathVerifier(timeout_s=timeout_s), parts=parts), tools=[tool], parser=parser,
                   limits=limits, reference=reference_completion, **kw)


__all__ = ["SHAPES", "TOOL_PROMPT", "ToolArithmeticSource", "python_tool_math", "reference_completion",
           "tool_arithmetic_task"]
