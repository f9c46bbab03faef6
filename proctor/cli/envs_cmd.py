"""``proctor envs list|check`` and ``proctor eval``: environments from the command line."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

app = typer.Typer(help="List, check and build verifiable environments.", no_args_is_help=True)
console = Console()
err = Console(stderr=True)


def _kwargs(text: Optional[str]) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise typer.BadParameter(f"--kwargs must be a JSON object: {exc.msg}") from None
    if not isinstance(value, dict):
        raise typer.BadParameter("--kwargs must be a JSON object, e.g. '{\"level\": 3}'")
    return value


def load_env(target: str, kwargs: dict[str, Any]):  # noqa: ANN201 - any gymnasium.Env
    """``proctor.envs.make_env`` (the loader ``proctor train`` uses), its errors as bad parameters.

    ``partition`` and ``eval_fraction`` in ``kwargs`` select train or held-out questions for any env.
    """
    from proctor.envs import EnvLoadError, make_env

    kwargs = dict(kwargs)
    split = {k: kwargs.pop(k) for k in ("partition", "eval_fraction") if k in kwargs}
    try:
        return make_env(target, **split, **kwargs)
    except EnvLoadError as exc:
        raise typer.BadParameter(str(exc)) from None


@app.command("list")
def list_envs() -> None:
    """Every registered proctor/* environment."""
    import proctor.envs

    table = Table(title="environments")
    table.add_column("id")
    table.add_column("what it checks")
    for env_id, desc in proctor.envs.registered():
        table.add_row(env_id, desc)
    console.print(table)


@app.command("check")
def check(
    target: Annotated[str, typer.Argument(help="A registered id, module:Class, or file.py:Class.")],
    kwargs: Annotated[Optional[str], typer.Option("--kwargs", help="JSON keyword arguments for the env.")] = None,
    difficulty_model: Annotated[Optional[str], typer.Option(
        "--difficulty-model", help="Also measure this model's pass rate per difficulty level (a path, hub id or "
        "tiny:STEPS) and fail a knob that does not change it.")] = None,
    per_level: Annotated[int, typer.Option(help="Tasks sampled per level with --difficulty-model.")] = 64,
    probe_model: Annotated[Optional[str], typer.Option(
        "--probe-model", help="Also check that the answer probe (data.answer_probe) predicts this model's pass "
        "rate task by task (a path, hub id or tiny:STEPS).")] = None,
    probe_tasks: Annotated[int, typer.Option(help="Tasks with --probe-model, each sampled 8 times.")] = 64,
    answer_template: Annotated[str, typer.Option(help="The reply the probe scores (data.answer_template).")
                               ] = "{answer}",
) -> None:
    """Check an env against the contract: API, determinism, reward range, a right answer, odd input,
    a declared difficulty knob (with --difficulty-model: that it changes a model's pass rate), and
    (with --probe-model) that the answer probe predicts a model's pass rate."""
    from proctor.envs import Problem, check_env

    env = load_env(target, _kwargs(kwargs))
    try:
        report = check_env(env)
        if difficulty_model is not None:
            problem = _knob_effect(env, difficulty_model, per_level)
            name = f"the difficulty knob changes {difficulty_model}'s pass rate"
            if problem:
                report.problems.append(Problem(name, problem, "make higher levels harder tasks"))
            else:
                report.passed.append(name)
        if probe_model is not None:
            problem = _probe_agreement(env, probe_model, probe_tasks, answer_template)
            name = f"the answer probe predicts {probe_model}'s pass rate"
            if problem:
                report.problems.append(Problem(name, problem, "set --answer-template (data.answer_template) to the "
                                               "reply the model writes, or leave data.answer_probe off"))
            else:
                report.passed.append(name)
    finally:
        env.close()
    for name in report.passed:
        console.print(f"[green]ok[/green]    {escape(name)}")
    for p in report.problems:
        console.print(f"[red]FAIL[/red]  {escape(p.check)}: {escape(p.message)}")
        if p.fix:
            console.print(f"      fix: {escape(p.fix)}")
    if not report.ok:
        raise typer.Exit(1)
    console.print(f"{escape(target)}: all {len(report.passed)} checks passed")


def _knob_effect(env: Any, model: str, per_level: int) -> Optional[str]:
    """Measure the model's sampled pass rate per level (printed as a table); a problem, or None."""
    from proctor.envs import VerifiableEnv
    from proctor.envs.core.difficulty import knob_effect_problem, measure_levels

    knob = env.difficulty if isinstance(env, VerifiableEnv) else None
    if knob is None:
        return (f"{type(env).__name__} declares no difficulty knob (env.difficulty is None): there is nothing to "
                "measure; give the env a DifficultyKnob or drop --difficulty-model")
    complete = _model_completer(model)
    rates = measure_levels(knob, env.source, lambda tasks: [v.scored and v.correct for v in env.score_batch(
        tasks, complete(env, list(tasks)))], per_level=per_level)
    table = Table(title=f"{knob.name}: pass rate per level ({model}, one sample per task, temperature 1)")
    for column in ("level", "range", "tasks", "sampled", "pass rate"):
        table.add_column(column)
    for r in rates:
        table.add_row(str(r.level), r.label, str(r.tasks), str(r.samples), "-" if not r.samples else f"{r.rate:.3f}")
    console.print(table)
    return knob_effect_problem(rates)


def _probe_agreement(env: Any, model: str, n_tasks: int, template: str) -> Optional[str]:
    """The probe's prediction against 8 sampled completions' pass rate, per task (summarised in a
    table); a problem, or None."""
    import numpy as np

    from proctor.trainer.select.probe import agreement_problem

    from proctor.trainer.config import answer_template_problem

    problem = answer_template_problem(template)
    if problem:
        raise typer.BadParameter(f"--answer-template {problem}")
    tasks = [env.source[i] for i in range(min(n_tasks, len(env.source)))]
    if not tasks or all(t.answer is None for t in tasks):
        return "the env's tasks carry no answer: the probe has no reference reply to score"
    tasks = [t for t in tasks if t.answer is not None]
    predicted, observed = _probe_rates(model, template)(env, tasks)
    pred, obs = np.asarray(predicted), np.asarray(observed)
    table = Table(title=f"answer probe against {model} ({len(tasks)} tasks, 8 samples each, temperature 1)")
    for column in ("predicted pass rate", "tasks", "sampled pass rate"):
        table.add_column(column)
    for lo, hi in ((0.0, 0.05), (0.05, 0.35), (0.35, 0.65), (0.65, 1.01)):
        inside = (pred >= lo) & (pred < hi)
        table.add_row(f"{lo:.2f}-{min(hi, 1.0):.2f}", str(int(inside.sum())),
                      f"{obs[inside].mean():.3f}" if inside.any() else "-")
    if len(pred) > 1 and pred.std() > 0 and obs.std() > 0:
        table.caption = (f"r = {np.corrcoef(pred, obs)[0, 1]:.2f}; mean predicted {pred.mean():.3f}, "
                         f"mean sampled {obs.mean():.3f}")
    console.print(table)
    return agreement_problem(predicted, observed)


def _probe_rates(model: str, template: str):  # noqa: ANN202 - (env, tasks) → (predicted, observed)
    """Per task: the probe's predicted pass rate and the pass rate of 8 completions sampled at
    temperature 1, from the same model through the trainer's prompt tokenisation."""
    from proctor.envs import EnvSuite, SuiteItem
    from proctor.trainer.select.probe import AnswerProbe, answer_reference
    from proctor.trainer.parts import tokenize
    from proctor.trainer.sampling_params import SamplingParams

    lm, tok, generator = _load_model(model)

    def rates(env: Any, tasks: list[Any]) -> tuple[list[float], list[float]]:
        suite = EnvSuite({"env": env})
        items = [SuiteItem("env", t) for t in tasks]
        prompt_ids = lambda item: tokenize(suite, tok, item)  # noqa: E731
        probe = AnswerProbe(lm, tok, prompt_ids, answer_reference(template), temperature=1.0)
        predicted = [float(p) for p in probe.pass_rates(items)]
        groups = generator.generate([prompt_ids(it) for it in items],
                                    SamplingParams(n=8, temperature=1.0, max_new_tokens=64, seed=0))
        observed = []
        for task, group in zip(tasks, groups):
            verdicts = env.score_batch([task] * len(group), [r.text for r in group])
            observed.append(sum(v.scored and v.correct for v in verdicts) / len(group))
        return predicted, observed

    return rates


def _model_completer(model: str):  # noqa: ANN202 - (env, tasks) → completions
    """One sampled completion per task (temperature 1, up to 64 new tokens) from a causal LM,
    through the trainer's own prompt tokenisation and transformers generator."""
    from proctor.envs import EnvSuite, SuiteItem
    from proctor.trainer.parts import tokenize
    from proctor.trainer.sampling_params import SamplingParams

    _, tok, generator = _load_model(model)
    params = SamplingParams(n=1, temperature=1.0, max_new_tokens=64, seed=0)

    def complete(env: Any, tasks: list[Any]) -> list[str]:
        suite = EnvSuite({"env": env})
        prompts = [tokenize(suite, tok, SuiteItem("env", t)) for t in tasks]
        return [group[0].text for group in generator.generate(prompts, params)]

    return complete


def _load_model(model: str) -> tuple[Any, Any, Any]:
    """(causal LM in eval mode, tokenizer with a pad token, the trainer's transformers generator),
    torch's generator seeded with 0."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from proctor.trainer.build import resolve_model_path
    from proctor.trainer.rollout.hf import TransformersGenerator

    path = resolve_model_path(model)
    tok = AutoTokenizer.from_pretrained(path)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    lm = AutoModelForCausalLM.from_pretrained(path).eval()
    torch.manual_seed(0)
    return lm, tok, TransformersGenerator(lm, tok)


def _completion_rows(path: Path) -> list[dict[str, Any]]:
    from proctor.envs.core.sources import BadRow, json_lines

    rows = []
    try:
        lines = json_lines(path.read_text(), str(path))
    except OSError as exc:
        raise typer.BadParameter(f"cannot read {path}: {exc.strerror}") from None
    except BadRow as exc:
        raise typer.BadParameter(str(exc)) from None
    for n, row in lines:
        if not isinstance(row, dict) or not isinstance(row.get("completion"), str):
            raise typer.BadParameter(f"{path}, row {n}, field 'completion': missing or not a string")
        if "task_id" not in row and "index" not in row:
            raise typer.BadParameter(f"{path}, row {n}: needs 'task_id' (or 'index') to find its task")
        rows.append({**row, "_row": n})
    if not rows:
        raise typer.BadParameter(f"{path} has no rows")
    return rows


def eval_command(
    env_id: Annotated[str, typer.Option("--env", help="A registered id, or module:Class.")],
    completions: Annotated[Path, typer.Option("--completions", help="JSONL rows: {task_id|index, completion}.")],
    out: Annotated[Optional[Path], typer.Option("--out", help="Per-row results (JSONL); default next to the input.")] = None,
    kwargs: Annotated[Optional[str], typer.Option("--kwargs", help="JSON keyword arguments for the env.")] = None,
    batch: Annotated[int, typer.Option(help="Completions scored per batch call.")] = 256,
) -> None:
    """Score a file of completions; print a summary and write one result per row."""
    env = load_env(env_id, _kwargs(kwargs))
    rows = _completion_rows(completions)
    by_id = {env.source[i].id: env.source[i] for i in range(len(env.source))}
    tasks = []
    for row in rows:
        if "task_id" in row:
            task = by_id.get(str(row["task_id"]))
            if task is None:
                raise typer.BadParameter(f"{completions}, row {row['_row']}: task_id {row['task_id']!r} "
                                         f"is not a task of {env_id} ({len(by_id)} tasks)")
        else:
            index = int(row["index"])
            if not 0 <= index < len(env.source):
                raise typer.BadParameter(f"{completions}, row {row['_row']}: index {index} out of range")
            task = env.source[index]
        tasks.append(task)
    verdicts = []
    try:
        with Progress(console=err, transient=True) as progress:
            bar = progress.add_task("scoring", total=len(rows))
            for start in range(0, len(rows), batch):
                chunk = slice(start, start + batch)
                verdicts += env.score_batch(tasks[chunk], [r["completion"] for r in rows[chunk]])
                progress.update(bar, advance=len(rows[chunk]))
    finally:
        env.close()
    out = out or completions.with_name(completions.stem + ".results.jsonl")
    with out.open("w") as f:
        for row, task, v in zip(rows, tasks, verdicts):
            f.write(json.dumps({"row": row["_row"], "task_id": task.id, "reward": None if math.isnan(v.reward) else v.reward,
                                "correct": v.correct, "status": v.status, "parts": dict(v.parts),
                                "info": {k: str(x) for k, x in v.info.items()}}) + "\n")
    _summary(env_id, verdicts)
    console.print(f"per-row results: {out}")


def _summary(env_id: str, verdicts: list) -> None:
    judged = [v for v in verdicts if v.scored]
    table = Table(title=f"{env_id}: {len(verdicts)} completions")
    for col in ("status", "count", "reward mean", "pass rate"):
        table.add_column(col)
    table.add_row("judged", str(len(judged)),
                  f"{sum(v.reward for v in judged) / len(judged):.3f}" if judged else "-",
                  f"{sum(v.correct for v in judged) / len(judged):.3f}" if judged else "-")
    reasons = Counter(str(v.info.get("reason") or v.info.get("status") or ("correct" if v.correct else "wrong"))
                      for v in judged)
    for reason, count in reasons.most_common():
        table.add_row(f"  {reason}", str(count), "", "")
    infra = len(verdicts) - len(judged)
    table.add_row("infra_error (not judged)", str(infra), "", "")
    console.print(table)
