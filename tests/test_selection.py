"""Pre-rollout selection: the difficulty knob, the frontier, per-prompt skipping, their weights and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from proctor.envs import DifficultyKnob, EnvSuite, ListSource, SuiteItem, Task, make_env
from proctor.envs.core.difficulty import LevelPassRate, check_knob, knob_effect_problem, measure_levels
from proctor.trainer.config import GRPOConfig
from proctor.trainer.select.passrate import PassRateMemory
from proctor.trainer.parts import build_frontier, selection_rules
from proctor.trainer.sampling import PromptDrawer
from proctor.trainer.select.frontier import Frontier, SelectionRules
from tiny_runs import arithmetic_trainer

KNOB = DifficultyKnob("size", key="size", edges=(1, 2, 3))


def _source(sizes: list[int]) -> ListSource:
    return ListSource([Task(id=f"t{i}", prompt=f"q{i}", answer="1", data={"size": s}) for i, s in enumerate(sizes)])


def _frontier(sizes: list[int], band=(0.2, 0.8), explore=0.1) -> Frontier:
    rules = SelectionRules(group_size=8, explore=explore, band=band)
    return Frontier({"env": (_source(sizes), KNOB)}, rules)


def _teach(frontier: Frontier, rates: dict[int, float], step: int = 1) -> None:
    """Each level observed with its pass rate: 40 completions per level."""
    for level, rate in rates.items():
        task = Task(id=f"l{level}", prompt="", answer="", data={"size": level})
        right = int(round(rate * 40))
        frontier.observe("env", task, [True] * right + [False] * (40 - right), step)


# ------------------------------------------------------------------ the knob
def test_knob_places_tasks_by_edges_and_labels_them():
    source = _source([0, 1, 1, 2, 3, 5])
    assert KNOB.bins(source) == [[0], [1, 2], [3], [4, 5]]
    assert KNOB.labels() == ["< 1", "1-2", "2-3", ">= 3"]


@pytest.mark.parametrize("edges", [(), (2, 1), (1, 1), (1, float("nan"))])
def test_knob_refuses_edges_that_are_not_ascending(edges):
    with pytest.raises(ValueError, match="edges"):
        DifficultyKnob("size", "size", edges)


def test_knob_names_the_task_and_field_it_cannot_read():
    source = ListSource([Task(id="bad-7", prompt="q", answer="1", data={"size": "hard"})])
    with pytest.raises(ValueError, match=r"bad-7.*task.data\['size'\]"):
        KNOB.bins(source)
    assert "one level" in check_knob(KNOB, _source([5, 6, 7]))
    assert check_knob(KNOB, _source([0, 5])) is None


def test_knob_effect_needs_a_significant_drop_from_easiest_to_hardest():
    flat = [LevelPassRate(0, "a", 10, 100, 30), LevelPassRate(1, "b", 10, 100, 28)]
    steep = [LevelPassRate(0, "a", 10, 100, 60), LevelPassRate(1, "b", 10, 100, 20)]
    assert "does not change the pass rate" in knob_effect_problem(flat)
    assert knob_effect_problem(steep) is None
    measured = measure_levels(KNOB, _source([0, 0, 3, 3]), lambda tasks: [t.data["size"] == 0 for t in tasks],
                              per_level=20)
    assert [(r.samples, r.passed) for r in measured] == [(20, 20), (0, 0), (0, 0), (20, 0)]
    assert knob_effect_problem(measured) is None


def test_procedural_envs_declare_knobs_that_split_their_tasks():
    arith = make_env("proctor/Arithmetic-v0", level=1, numbers=[0, 50], n=500)
    mixed = make_env("proctor/Arithmetic-v0", level=(1, 3), n=90)
    countdown = make_env("proctor/Countdown-v0", level=2, n=200)
    for env in (arith, mixed, countdown):
        assert check_knob(env.difficulty, env.source) is None
    # harder arithmetic levels sit on higher knob levels
    knob = mixed.difficulty
    by_level = {lv: np.mean([knob.level_of(t) for t in mixed.source.tasks if t.data["level"] == lv]) for lv in (1, 2, 3)}
    assert by_level[1] < by_level[2] < by_level[3]
    assert arith.difficulty.key == "work" and arith.difficulty.labels() == ["< 1", "1-2", "2-3", ">= 3"]
    assert make_env("proctor/Math-v0", level=1, n=10).difficulty.key == "work"   # procedural: its own knob


@pytest.mark.parametrize("expression, work", [
    ("3 + 4", 0), ("17 + 25", 1), ("45 - 12", 1), ("45 - 17", 2), ("12 - 45", 2), ("3 × 12", 2), ("12 ÷ 4", 2),
    ("(3 - 9) + 99", 3), ("(-3) - (-9)", 1), ("99 + 1", 2)])
def test_arithmetic_work_counts_carries_borrows_and_signs(expression, work):
    from proctor.envs.procedural.arithmetic import work as work_of

    assert work_of(expression) == work


# ------------------------------------------------------------------ the frontier
def test_frontier_draws_in_band_levels_and_explores_the_rest():
    frontier = _frontier([0] * 10 + [1] * 10 + [2] * 10 + [3] * 10, explore=0.1)
    probs, share = frontier.level_probs("env")
    assert probs == pytest.approx([0.25] * 4)                 # nothing known: every level is drawn
    _teach(frontier, {0: 1.0, 1: 0.5, 2: 0.4, 3: 0.0})
    probs, _ = frontier.level_probs("env")
    assert probs == pytest.approx(np.array([0.1, 1, 1, 0.1]) / 2.2)
    rng = np.random.default_rng(0)
    levels = [frontier.draw(SuiteItem("env", frontier.sources["env"][0]), rng).level for _ in range(4000)]
    counts = np.bincount(levels, minlength=4) / 4000
    assert counts == pytest.approx(probs, abs=0.03)


def test_frontier_with_no_level_in_band_aims_at_the_nearest():
    frontier = _frontier([0] * 5 + [1] * 5 + [2] * 5 + [3] * 5)
    _teach(frontier, {0: 1.0, 1: 1.0, 2: 0.95, 3: 0.9})      # all too easy: the hardest is the frontier
    probs, _ = frontier.level_probs("env")
    assert int(np.argmax(probs)) == 3 and probs[3] == pytest.approx(1 / 1.3)


def test_frontier_weights_undo_the_level_mix_in_expectation():
    """E_selected[w f] = E_uniform[f]: the weighted frontier estimates the uniform objective."""
    sizes = [0] * 30 + [1] * 5 + [2] * 15 + [3] * 50
    frontier = _frontier(sizes, explore=0.2)
    _teach(frontier, {0: 1.0, 1: 0.5, 2: 0.3, 3: 0.0})
    f = {i: float(i % 7) for i in range(len(sizes))}          # any function of the task
    rng = np.random.default_rng(1)
    draws = [frontier.draw(SuiteItem("env", frontier.sources["env"][0]), rng) for _ in range(40000)]
    weighted = np.mean([d.weight * f[int(d.item.task.id[1:])] for d in draws])
    assert weighted == pytest.approx(np.mean(list(f.values())), rel=0.03)


def test_frontier_follows_the_policy_as_old_evidence_decays():
    frontier = _frontier([0] * 5 + [1] * 5 + [2] * 5 + [3] * 5)
    _teach(frontier, {0: 0.5, 1: 0.0, 2: 0.0, 3: 0.0}, step=1)
    assert int(np.argmax(frontier.level_probs("env")[0])) == 0
    for step in range(2, 40):                                  # the policy learns level 0 and 1
        _teach(frontier, {0: 1.0, 1: 0.5}, step=step)
    probs, _ = frontier.level_probs("env")
    assert probs[1] > 0.5 and probs[0] < 0.1


# ------------------------------------------------------------------ the drawer
def _drawer(frontier=None, skip=False, explore=0.1):
    suite = EnvSuite({"env": make_env("proctor/Arithmetic-v0", level=1, numbers=[0, 50], n=40)})
    rules = SelectionRules(8, skip=skip, explore=explore, band=(0.2, 0.8) if frontier else None)
    memory = PassRateMemory(8, skip_threshold=0.9, retry_prob=explore)
    return PromptDrawer(suite.sample, 0, memory, rules, 8, frontier=frontier), suite


def test_drawer_skips_known_zero_signal_prompts_and_lets_them_come_back():
    drawer, suite = _drawer(skip=True, explore=0.25)
    solved = suite.envs["env"].source[0]
    from proctor.trainer.sampling import memory_key

    for _ in range(10):
        drawer.memory.update(memory_key(SuiteItem("env", solved)), [True] * 8, step=1)
    keep = drawer.memory.keep_probability(memory_key(SuiteItem("env", solved)))
    assert keep == 0.25
    drawn = [drawer.draw(1)[0] for _ in range(3000)]
    assert any(it.task.id == solved.id for it in drawn)      # exploration: it comes back
    # the record is the question's: another task asking the same question shares it
    twin = Task(id="other-id", prompt="Another wording", answer=solved.answer, data=dict(solved.data))
    assert drawer.memory.keep_probability(memory_key(SuiteItem("env", twin))) == 0.25
    assert drawer.weight_of(SuiteItem("env", solved)) == pytest.approx(4.0)
    assert drawer.memory.skipped > 0 and drawer.memory.tokens_saved == drawer.memory.skipped * 8 * 8


# ------------------------------------------------------------------ config and bad input
@pytest.mark.parametrize("data, field", [
    ({"target_pass_rate": [0.9, 0.1]}, "data.target_pass_rate"),
    ({"target_pass_rate": [-0.1, 0.5]}, "data.target_pass_rate"),
    ({"target_pass_rate": [0.2, 1.2]}, "data.target_pass_rate"),
    ({"skip_threshold": 0.0}, "data.skip_threshold"),
    ({"skip_threshold": 1.5}, "data.skip_threshold"),
    ({"skip_explore": 0.0}, "data.skip_explore"),
    ({"difficulty_envs": ["arithmetic"]}, "data.difficulty_envs"),
    ({"difficulty_envs": ["nope"], "target_pass_rate": [0.2, 0.8]}, "data.difficulty_envs"),
])
def test_selection_settings_out_of_range_are_refused_by_name(data, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        GRPOConfig.from_dict({"data": data})


def _config(envs, **data):
    return GRPOConfig.from_dict({"data": {"envs": envs, **data}})


def test_a_knob_asked_of_an_env_without_one_is_refused(tmp_path):
    words = tmp_path / "words.jsonl"
    words.write_text('{"prompt": "Capital of France?", "answer": "Paris"}\n')
    envs = {"words": {"id": "proctor/ExactMatch-v0", "kwargs": {"tasks": str(words)}},
            "arith": {"id": "proctor/Arithmetic-v0", "kwargs": {"level": 1, "n": 50}}}
    from proctor.trainer.build import build_suite

    cfg = _config(envs, target_pass_rate=[0.2, 0.8], difficulty_envs=["words"])
    with pytest.raises(ValueError, match=r"difficulty_envs names 'words'.*declares no difficulty knob"):
        build_frontier(cfg, build_suite(cfg), selection_rules(cfg))
    only_words = {"words": envs["words"]}
    cfg = _config(only_words, target_pass_rate=[0.2, 0.8])
    with pytest.raises(ValueError, match="no env in data.envs .* declares a difficulty knob"):
        build_frontier(cfg, build_suite(cfg), selection_rules(cfg))
    cfg = _config(envs, target_pass_rate=[0.2, 0.8])           # default: the envs that have a knob
    assert set(build_frontier(cfg, build_suite(cfg), selection_rules(cfg)).knobs) == {"arith"}


def test_a_dataset_env_takes_its_knob_from_a_column(tmp_path):
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(f'{{"question": "q{i}", "answer": "{i}", "level": {i % 3 + 1}}}\n' for i in range(30)))
    env = make_env("proctor/Math-v0", tasks=str(rows), difficulty={"key": "level", "edges": [2, 3]})
    assert [len(b) for b in env.difficulty.bins(env.source)] == [10, 10, 10]
    with pytest.raises(ValueError, match="'key'.*'edges'"):
        make_env("proctor/Math-v0", tasks=str(rows), difficulty={"column": "level"})


def test_a_hard_level_prior_makes_one_all_wrong_group_predict_the_next():
    from proctor.trainer.select.frontier import prior_from

    memory = PassRateMemory(8, skip_threshold=0.8)
    memory.update("p", [False] * 8, step=1)
    assert memory.keep_probability("p") == 1.0                        # Jeffreys prior: 0.71, kept
    assert memory.zero_signal_prob("p", prior_from(0.1)) > 0.8         # its level passes 10%: skip
    assert memory.keep_probability("p", prior_from(0.1)) == memory.retry_prob
    assert memory.keep_probability("p", prior_from(0.5)) == 1.0        # a level at 50%: kept
    drawer, suite = _drawer(skip=True)
    item = suite.sample(1, np.random.default_rng(0))[0]
    assert drawer.predicted_rate(item) is None
    drawer.env_rates.update("env", [True, True] + [False] * 6, step=1)
    assert drawer.predicted_rate(item) == pytest.approx((0.5 + 2) / (1 + 8))   # the env's rate, no knob


def test_skip_after_skips_a_prompt_whose_last_groups_taught_nothing_until_it_teaches_again():
    memory = PassRateMemory(8, skip_threshold=0.99, retry_prob=0.2, skip_after=1)
    memory.update("p", [False] * 8, step=1)
    assert memory.keep_probability("p") == 0.2                          # one all-wrong group: skippable
    memory.update("p", [True, False] * 4, step=2)
    assert memory.keep_probability("p") == 1.0                          # it taught: back in
    memory.update("p", [True] * 8, step=3)
    assert memory.keep_probability("p") == 0.2
    twice = PassRateMemory(8, skip_threshold=0.99, skip_after=2)
    twice.update("q", [False] * 8, step=1)
    assert twice.keep_probability("q") == 1.0
    twice.update("q", [False] * 8, step=2)
    assert twice.keep_probability("q") == twice.retry_prob
    with pytest.raises(ValueError, match=r"data\.skip_after"):
        GRPOConfig.from_dict({"data": {"skip_after": -1}})


def _fake_completer(solves_work_up_to: int):
    """A 'model' that answers right exactly the questions of at most this much work."""
    def complete(env, tasks):
        return [t.answer if t.data["work"] <= solves_work_up_to else "-999" for t in tasks]

    return lambda model: complete


@pytest.mark.parametrize("solves, exit_code", [(1, 0), (99, 1)])
def test_envs_check_measures_whether_the_knob_changes_a_models_pass_rate(monkeypatch, solves, exit_code):
    from typer.testing import CliRunner

    from proctor.cli import envs_cmd
    from proctor.cli.app import app

    monkeypatch.setattr(envs_cmd, "_model_completer", _fake_completer(solves))
    kwargs = '{"level": 1, "numbers": [0, 50], "n": 400, "prompt_template": "What is {expr}?"}'
    result = CliRunner(env={"COLUMNS": "400"}).invoke(app, ["envs", "check", "proctor/Arithmetic-v0", "--kwargs", kwargs,
                                      "--difficulty-model", "fake", "--per-level", "30"])
    assert result.exit_code == exit_code, result.output
    assert "pass rate per level" in result.output
    if exit_code:
        assert "does not change the pass rate" in result.output   # it solves every level alike


def test_a_run_at_the_frontier_logs_it_and_resumes_its_memories(tmp_path):
    with arithmetic_trainer(tmp_path, target_pass_rate=[0.2, 0.8], skip_predicted_zero_signal=True,
                            skip_after=1) as trainer:
        rows = trainer.train()
    assert all(0 <= r["frontier_arith_level"] <= 3 for r in rows)
    assert "frontier_arith_predicted_pass" in rows[-1]        # the levels seen at step 1 have estimates
    drawer = trainer.parts.drawer
    state = drawer.state_dict()
    assert state["frontier"] and state["env_rates"]["arith"]["trials"] > 0
    before = dict(drawer.frontier.memory.records)
    drawer.frontier.memory.records, drawer.env_rates.records = {}, {}
    drawer.load_state_dict(state)
    assert drawer.frontier.memory.records == before


def test_reasoning_gym_questions_carry_their_generator_parameters_for_a_knob():
    env = make_env("proctor/ReasoningGym-v0", name="basic_arithmetic", size=60,
                   difficulty={"key": "rg_num_terms", "edges": [3, 4, 5]})
    assert check_knob(env.difficulty, env.source) is None
    assert all(isinstance(env.source[i].data["rg_num_terms"], int) for i in range(len(env.source)))
