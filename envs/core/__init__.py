"""The environment contract: tasks, verdicts, verifiers, the env, suites, sources, the checker."""

from .checker import CheckReport, Problem, check_env
from .difficulty import DifficultyKnob
from .env import VerifiableEnv, mean_reward
from .sources import BadRow, ListSource, RowSource, TaskSource, load_rows, require, rows_from_file
from .spaces import ChatSpace, TextSpace
from .suite import EnvSuite, SuiteItem
from .types import Message, Prompt, Task, Verdict
from .verifier import Part, Rubric, Verifier, exact_verdict

__all__ = [
    "CheckReport", "Problem", "check_env", "DifficultyKnob", "VerifiableEnv", "mean_reward", "BadRow", "ListSource", "RowSource",
    "TaskSource", "load_rows", "require", "rows_from_file", "ChatSpace", "TextSpace", "EnvSuite", "SuiteItem",
    "Message", "Prompt", "Task", "Verdict", "Part", "Rubric", "Verifier", "exact_verdict",
]
