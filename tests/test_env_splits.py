"""Disjoint train and eval question sets (partition / eval_fraction), the one env loader
(make_env / make_eval_env), and the tiny model's corpus leaving the eval questions out."""

from __future__ import annotations

import ast
import json
import random
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from proctor.envs import EnvLoadError, make_env, make_eval_env
from proctor.envs.core.sources import ListSource
from proctor.envs.core.splits import (DEFAULT_EVAL_FRACTION, PartitionedSource, in_eval_partition, key_bucket,
                                      question_key)
from proctor.envs.core.types import Task
from proctor.envs.procedural.arithmetic import ArithmeticSource, arithmetic_task, in_eval_split
from proctor.envs.procedural.arithmetic import question_key as arithmetic_question_key
from proctor.envs.procedural.countdown import CountdownSource
from proctor.envs.procedural.reasoning_gym import ReasoningGymSource

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "envs" / "palindrome_env.py"


def _keys(source) -> list[str]:
    return [question_key(source[i]) for i in range(len(source))]


# ---------------------------------------------------------------- the rule
def test_partition_is_a_property_of_the_question_and_nested():
    keys = [f"arith:{a}+{b}" for a in range(60) for b in range(60)]
    at_10 = {k for k in keys if in_eval_partition(k, 0.1)}
    at_5 = {k for k in keys if in_eval_partition(k, 0.05)}
    assert at_5 < at_10                                        # a smaller eval set is inside a larger one
    assert 0.07 < len(at_10) / len(keys) < 0.13                # about the asked share
    assert all(0.0 <= key_bucket(k) < 1.0 for k in keys)
    assert in_eval_split("3 × 4") == in_eval_split("3*4") == in_eval_partition("arith:3*4")


@pytest.mark.parametrize("partition,fraction", [("test", 0.1), ("eval", 0.0), ("train", 1.0), ("eval", "0.1")])
def test_bad_partition_arguments_say_what_is_allowed(partition, fraction):
    with pytest.raises(ValueError, match="partition must be|eval_fraction must be"):
        ArithmeticSource(10, 1, partition=partition, eval_fraction=fraction)


# ---------------------------------------------------------------- procedural
def test_level1_arithmetic_splits_its_126_questions_disjointly():
    train = ArithmeticSource(3000, level=1, partition="train")
    held = ArithmeticSource(500, level=1, partition="eval")
    train_keys, eval_keys = set(_keys(train)), _keys(held)
    assert len(eval_keys) == len(set(eval_keys)), "the eval side has no repeated question"
    assert not train_keys & set(eval_keys)
    # 162 expressions, 126 questions: a + b and b + a are one question (45 sums, 81 differences)
    assert len(train_keys) + len(eval_keys) == 126             # every question, on exactly one side
    assert len(train) == 3000 and 0 < len(held) < 40           # train as drawn; eval: the held-out ones only


def test_no_held_out_question_is_trained_in_another_order():
    # Before the canonical key, 11 of level 1's 24 held-out questions were a + b whose b + a was trained on.
    train = {t.data["expression"] for t in ArithmeticSource(3000, level=1, partition="train").tasks}
    held = [t.data["expression"] for t in ArithmeticSource(500, level=1, partition="eval").tasks]
    sums = [e.split(" + ") for e in held if " + " in e]
    assert sums and all(f"{b} + {a}" not in train for a, b in sums)


class _Shuffle(ast.NodeTransformer):
    """Swaps the operands of + and × at random: the same question, written another way."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def visit_BinOp(self, node: ast.BinOp) -> ast.BinOp:
        self.generic_visit(node)
        if isinstance(node.op, (ast.Add, ast.Mult)) and self.rng.random() < 0.5:
            node.left, node.right = node.right, node.left
        return node


@pytest.mark.parametrize("level", [1, 2, 3, 4, 5])
def test_operands_of_plus_and_times_in_any_order_are_one_question(level):
    rng = random.Random(level)
    for i in range(200):
        expr = arithmetic_task(i, level).data["expression"]
        tree = ast.parse(expr.replace("×", "*").replace("÷", "/"), mode="eval")
        other = ast.unparse(_Shuffle(rng).visit(tree))
        assert arithmetic_question_key(other) == arithmetic_question_key(expr), (expr, other)
        assert eval(compile(ast.parse(other, mode="eval"), "q", "eval")) == eval(   # noqa: S307 - our own digits
            compile(tree, "q", "eval"))
    assert arithmetic_question_key("3 - 4") != arithmetic_question_key("4 - 3")
    assert arithmetic_question_key("8 ÷ 4") != arithmetic_question_key("4 ÷ 8")


@pytest.mark.parametrize("level", [1, 2, 3, 4, 5])
def test_every_arithmetic_level_splits_disjointly_by_question(level):
    train = ArithmeticSource(1500, level=level, partition="train")
    held = ArithmeticSource(60, level=level, partition="eval")
    assert len(held) and not set(_keys(train)) & set(_keys(held))


def test_same_question_same_side_whatever_seed_n_or_wording():
    sides = {}
    for seed, n, prompt in ((0, 300, "What is {expr}?"), (7, 900, "Compute {expr}."), (3, 50, "{expr} = ?")):
        for partition in ("train", "eval"):
            for key in _keys(ArithmeticSource(n, level=2, seed=seed, prompt=prompt, partition=partition)):
                assert sides.setdefault(key, partition) == partition, key
    assert {"train", "eval"} == set(sides.values())


def test_no_partition_keeps_the_tasks_of_before():
    source = ArithmeticSource(5, level=1)
    assert [t.id for t in source.tasks] == [f"arith/L1/s0/{i}" for i in range(5)]
    assert source.tasks[0].data["expression"] == "6 - 2" and source.tasks[0].answer == "4"
    assert [t.prompt for t in source.tasks] == [arithmetic_task(i, 1).prompt for i in range(5)]


def test_numbers_widens_the_question_space():
    source = ArithmeticSource(3000, level=1, numbers=[0, 50])
    operands = [int(x) for t in source.tasks for x in re.findall(r"\d+", t.data["expression"])]
    assert min(operands) == 0 and max(operands) == 50
    assert len(set(_keys(source))) > 1500                      # level 1 alone has 126
    assert source.tasks[0].id.startswith("arith/L1/n0-50/s0/")
    held = ArithmeticSource(200, level=1, numbers=[0, 50], partition="eval")
    assert len(held) == 200 and all(in_eval_split(t.data["expression"]) for t in held.tasks)
    with pytest.raises(ValueError, match="numbers must be two integers"):
        ArithmeticSource(5, level=1, numbers=[9, 1])


def test_countdown_and_reasoning_gym_partitions_are_disjoint():
    for make in (lambda p: CountdownSource(150, level=1, partition=p),
                 lambda p: ReasoningGymSource("basic_arithmetic", 60, partition=p)):
        train, held = make("train"), make("eval")
        assert len(train) and len(held)
        assert not set(_keys(train)) & set(_keys(held))
        assert all(in_eval_partition(k, DEFAULT_EVAL_FRACTION) for k in _keys(held))


# ---------------------------------------------------------------- files and user envs
def _rows_file(tmp_path: Path) -> Path:
    rows = [{"id": f"r{i}", "question": f"What is {i % 40} squared?", "answer": str((i % 40) ** 2)} for i in range(80)]
    path = tmp_path / "squares.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


def test_file_backed_envs_hold_out_the_same_questions(tmp_path):
    path = _rows_file(tmp_path)
    train = make_env("proctor/Math-v0", tasks=str(path), partition="train", eval_fraction=0.25)
    held = make_eval_env("proctor/Math-v0", tasks=str(path), eval_fraction=0.25)
    train_ids = {train.source[i].id for i in range(len(train.source))}
    held_ids = {held.source[i].id for i in range(len(held.source))}
    assert not train_ids & held_ids and len(train_ids | held_ids) == 80
    # rows 3 and 43 ask the same question: they are on the same side
    assert ("r3" in held_ids) == ("r43" in held_ids)
    exact = make_eval_env("proctor/ExactMatch-v0", tasks=str(path), eval_fraction=0.25)
    assert {exact.source[i].id for i in range(len(exact.source))} == held_ids


def test_partitioned_source_refuses_an_empty_side():
    source = ListSource([Task("a", "only question", "1")])
    side = "train" if in_eval_partition(question_key(source[0]), 0.5) else "eval"
    with pytest.raises(ValueError, match=f"none of its 1 tasks is in the {side} partition"):
        PartitionedSource(source, side, 0.5)


def test_make_eval_env_of_a_user_factory_filters_its_tasks():
    train = make_env(f"{EXAMPLE}:make_env", partition="train", eval_fraction=0.5)
    held = make_eval_env(f"{EXAMPLE}:make_env", eval_fraction=0.5, limit=3)
    train_ids = {t.id for t in train.source.tasks}
    held_ids = {t.id for t in held.source.tasks}
    assert len(held_ids) == 3 and not train_ids & held_ids
    assert held.source.name.endswith("[:3]")


def test_eval_env_limit_and_procedural_eval_is_distinct():
    held = make_eval_env("proctor/Arithmetic-v0", level=1, n=100, limit=5)
    assert len(held.source) == 5
    assert len(set(_keys(held.source))) == 5
    with pytest.raises(EnvLoadError, match="limit must be >= 1"):
        make_eval_env("proctor/Arithmetic-v0", limit=0)


# ---------------------------------------------------------------- the one loader
def test_make_env_loads_ids_modules_and_files(tmp_path, monkeypatch):
    (tmp_path / "my_envs_mod.py").write_text(
        "from proctor.envs.registry import make_countdown\n"
        "def make(level=1, **kw):\n"
        "    return make_countdown(level=level, n=12, **kw)\n")
    monkeypatch.chdir(tmp_path)
    by_id = make_env("proctor/Countdown-v0", level=1, n=12)
    by_module = make_env("my_envs_mod:make", level=1)
    by_file = make_env(f"{tmp_path / 'my_envs_mod.py'}:make")
    assert [t.id for t in by_id.source.tasks] == [t.id for t in by_module.source.tasks] == \
        [t.id for t in by_file.source.tasks]
    held = make_env(f"{tmp_path / 'my_envs_mod.py'}:make", partition="eval", eval_fraction=0.5)
    assert held.source.name.endswith("[eval 0.5]") and len(held.source) < 12


@pytest.mark.parametrize("target,message", [
    ("proctor/Nope-v0", "neither a registered env"),
    ("no_such_module_xyz:make", "no module named 'no_such_module_xyz'"),
    (f"{EXAMPLE}:nope", "has no 'nope' (it defines:"),
    ("missing/file.py:make", "does not exist"),
    (f"{EXAMPLE}:WORDS", "not a class or function"),
])
def test_make_env_errors_say_what_to_do(target, message):
    with pytest.raises(EnvLoadError, match=re.escape(message)):
        make_env(target)


def test_partition_of_an_env_without_tasks_is_refused(tmp_path):
    (tmp_path / "plain_env.py").write_text(
        "import gymnasium\n"
        "def make():\n"
        "    return gymnasium.make('CartPole-v1')\n")
    with pytest.raises(EnvLoadError, match="needs a proctor VerifiableEnv"):
        make_env(f"{tmp_path / 'plain_env.py'}:make", partition="eval")


def test_envs_check_takes_a_partition_for_any_env():
    from proctor.cli.app import app

    runner = CliRunner(env={"COLUMNS": "400"})
    result = runner.invoke(app, ["envs", "check", "proctor/Arithmetic-v0", "--kwargs",
                                 '{"level": 1, "n": 50, "partition": "eval"}'])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["envs", "check", f"{EXAMPLE}:make_env", "--kwargs",
                                 '{"partition": "train", "eval_fraction": 0.5}'])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["envs", "check", "proctor/Arithmetic-v0", "--kwargs", '{"partition": "dev"}'])
    assert result.exit_code == 2 and "partition must be" in result.output


# ---------------------------------------------------------------- the tiny model never sees them
def test_tiny_model_corpus_leaves_the_eval_questions_out():
    from proctor.tiny_model import HELDOUT_FRACTION, RECIPE_VERSION, _BUILD_SIGNATURE, synthetic_corpus

    assert HELDOUT_FRACTION >= DEFAULT_EVAL_FRACTION and RECIPE_VERSION >= 4
    assert _BUILD_SIGNATURE.parameters["heldout_fraction"].default == HELDOUT_FRACTION   # part of the cache key

    def questions(pairs) -> list[str]:
        return [" ".join(m.groups()) for p, _ in pairs if (m := re.search(r"(\d+) ([-+*]) (\d+)", p))]

    kept = questions(synthetic_corpus(0, n_pairs=4000))
    assert len(kept) == 4000 and not any(in_eval_split(q) for q in kept)
    everything = questions(synthetic_corpus(0, n_pairs=4000, heldout_fraction=0.0))
    assert sum(in_eval_split(q) for q in everything) > 200     # without the rule they would be there
    held = ArithmeticSource(100, level=1, numbers=[0, 50], partition="eval")
    assert not {t.data["question_key"] for t in held.tasks} & {f"arith:{q.replace(' ', '')}" for q in kept}
    # RL's questions (train_within the held-out fraction) are not in the corpus either
    rl = ArithmeticSource(300, level=1, numbers=[0, 50], partition="train", train_within=HELDOUT_FRACTION)
    canonical = {t.data["question_key"] for t in ArithmeticSource(3000, level=1, numbers=[0, 50]).tasks
                 if f"{t.data['expression']}" in set(kept)}
    assert canonical and not {t.data["question_key"] for t in rl.tasks} & canonical
    assert not {t.data["question_key"] for t in rl.tasks} & {t.data["question_key"] for t in held.tasks}


def test_train_within_keeps_train_questions_below_it_and_refuses_a_bound_under_the_eval_share():
    from proctor.envs.core.splits import key_bucket

    rl = ArithmeticSource(400, level=1, numbers=[0, 50], partition="train", train_within=0.5)
    assert all(0.1 <= key_bucket(t.data["question_key"]) < 0.5 for t in rl.tasks)
    for bad in (0.05, 0.1, 1.5):
        with pytest.raises(ValueError, match="train_within"):
            ArithmeticSource(10, level=1, partition="train", train_within=bad)
