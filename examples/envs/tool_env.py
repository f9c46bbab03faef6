"""A tool env in a few lines: questions, a verifier, a python tool and a plain function."""

import gymnasium

from proctor.envs import ListSource, Task
from proctor.envs.math import MathVerifier
from proctor.envs.tools import PythonTool, ToolEnv, ToolLimits


def convert(amount: float, rate: float) -> float:
    """Convert an amount of money at an exchange rate.

    Args:
        amount: the amount to convert
        rate: units of the target currency per unit of the source
    """
    return round(amount * rate, 2)


QUESTIONS = [("How many euros are 1250 dollars at 0.92 euros per dollar?", "1150"),
             ("What is the sum of the squares of the integers 1 to 40?", "22140"),
             ("How many primes are there below 1000?", "168")]


def make_env(**kwargs) -> ToolEnv:
    tasks = [Task(id=f"q{i}", prompt=f"{q} Put the answer in \\boxed{{}}.", answer=a)
             for i, (q, a) in enumerate(QUESTIONS)]
    return ToolEnv(ListSource(tasks, "tool-questions"), MathVerifier(), tools=[PythonTool(), convert],
                   limits=ToolLimits(max_turns=4, max_calls=6, timeout_s=5.0),
                   reference=lambda t: f"\\boxed{{{t.answer}}}", **kwargs)


gymnasium.register("proctor/ToolQuestions-v0", entry_point=make_env)
