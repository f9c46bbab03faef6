"""Per-prompt group sizes (``rollout.adaptive_group_size``): each prompt's group sized from the
answer probe's predicted pass rate, within a fixed budget of B x G completions a step."""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from proctor.envs import EnvSuite, ListSource, Task, Verdict, VerifiableEnv  # noqa: E402
from proctor.envs.text.verifiers import ExactMatchVerifier  # noqa: E402
from proctor.trainer.algo.advantages import group_advantages  # noqa: E402
from proctor.trainer.config import GRPOConfig  # noqa: E402
from proctor.trainer.records import Scored  # noqa: E402
from proctor.trainer.rollout import Rollout  # noqa: E402
from proctor.trainer.sampling import PromptDrawer  # noqa: E402
from proctor.trainer.select.frontier import SelectionRules  # noqa: E402
from proctor.trainer.select.passrate import PassRateMemory  # noqa: E402
from proctor.trainer.select.probe import ALL_EQUAL_CHANCE, fit_size, sized_group  # noqa: E402
from tiny_runs import arithmetic_trainer  # noqa: E402


# ------------------------------------------------------------------ advantages over groups of any size
@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.sampled_from([0.0, 0.5, 1.0, float("nan")]), min_size=1, max_size=7), min_size=1,
                max_size=6),
       st.sampled_from(["group", "batch", "none"]))
def test_each_group_of_any_size_has_the_statistics_it_would_have_alone(groups, scale):
    """Sizes [3, 1, 5]: every group's advantages, mean, std and zero-signal flag are those of the
    same group computed alone (invalid samples, NaN here, left out as always)."""
    rewards = torch.tensor([r for g in groups for r in g])
    together = group_advantages(rewards, [len(g) for g in groups], scale=scale, batch_rewards=rewards)
    at = 0
    for g in groups:
        alone = group_advantages(torch.tensor(g), len(g), scale=scale, batch_rewards=rewards)
        rows = slice(at, at + len(g))
        for name in ("advantages", "group_mean", "group_std", "zero_signal", "valid"):
            torch.testing.assert_close(getattr(together, name)[rows], getattr(alone, name), equal_nan=True,
                                       msg=lambda m: f"{name}: {m}")
        at += len(g)
    assert together.frac_zero_signal == pytest.approx(
        sum(bool(group_advantages(torch.tensor(g), len(g)).zero_signal[0]) for g in groups) / len(groups))


def test_equal_sizes_listed_are_the_uniform_computation():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 0.0, float("nan")])
    listed, uniform = group_advantages(rewards, [4, 4]), group_advantages(rewards, 4)
    torch.testing.assert_close(listed.advantages, uniform.advantages)
    assert listed.zero_signal.tolist() == uniform.zero_signal.tolist()


def test_sizes_that_do_not_cover_the_samples_are_refused():
    with pytest.raises(ValueError, match=r"5 samples do not split into groups of sizes \[2, 2\]"):
        group_advantages(torch.zeros(5), [2, 2])


# ------------------------------------------------------------------ the sizes
def test_a_group_is_as_small_as_its_predicted_pass_rate_allows():
    sizes = (4, 8)
    assert sized_group(0.5, sizes, 5) == 4 and sized_group(None, sizes, 5) == 5
    assert sized_group(0.2, sizes, 5) == sized_group(0.8, sizes, 5) == 7
    assert sized_group(0.02, sizes, 5) == sized_group(0.98, sizes, 5) == 8       # at most the max
    for p in (0.25, 0.3, 0.4, 0.5, 0.6, 0.75, 0.8):
        g = sized_group(p, sizes, 5)
        assert p ** g + (1 - p) ** g <= ALL_EQUAL_CHANCE
        assert g == 4 or p ** (g - 1) + (1 - p) ** (g - 1) > ALL_EQUAL_CHANCE   # and no larger than needed
    assert [sized_group(p / 20, sizes, 5) for p in range(1, 11)] == sorted(
        (sized_group(p / 20, sizes, 5) for p in range(1, 11)), reverse=True)      # fewer toward 0.5


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 5), st.integers(0, 6), st.integers(1, 12), st.data())
def test_sized_prompts_spend_the_budget_exactly(lo, extra, groups, data):
    """Prompts sized in turn fill B x G rows exactly, each group at least the minimum."""
    hi = lo + extra
    rows = groups * data.draw(st.integers(lo, hi))
    left, sizes = rows, []
    while left >= lo:
        g = fit_size(data.draw(st.integers(lo, hi)), left, lo)
        sizes.append(g)
        left -= g
    assert left == 0 and sum(sizes) == rows and min(sizes) >= lo


# ------------------------------------------------------------------ the drawer
class _AnswerProbe:
    """Predicts each task's answer / 100 (answers 0..99)."""

    tokens = 0

    def pass_rates(self, items):
        return [int(it.task.answer) / 100 for it in items]


def _drawer(sizes=(2, 8), band=(0.05, 0.95)):
    source = [Task(id=f"t{i}", prompt=f"q{i}", answer=str(i)) for i in range(100)]
    suite = EnvSuite({"env": VerifiableEnv(ListSource(source), ExactMatchVerifier())})
    rules = SelectionRules(4, explore=0.0, band=band, probe_pool=8, group_sizes=sizes)
    return PromptDrawer(suite.sample, 0, PassRateMemory(4), rules, 8, probe=_AnswerProbe())


def test_the_drawer_sizes_groups_from_the_prediction_within_the_budget():
    drawer = _drawer()
    by_rate: dict[int, list[int]] = {}
    for _ in range(200):
        items, sizes = drawer.draw_sized(8)
        assert sum(sizes) == 8 * 4 and len(items) == len(sizes) and min(sizes) >= 2
        for item, g in list(zip(items, sizes))[:-1]:   # the last may take the remainder
            by_rate.setdefault(int(item.task.answer), []).append(g)
    middle = [g for a, gs in by_rate.items() if 40 <= a <= 60 for g in gs]
    ends = [g for a, gs in by_rate.items() if a <= 15 or a >= 85 for g in gs]
    assert max(middle) <= 4 and min(ends) >= 6
    assert drawer.report()["probe_group_size"] > 2


def test_without_sizes_the_drawer_draws_b_prompts_of_g():
    drawer = _drawer(sizes=None)
    items, sizes = drawer.draw_sized(8)
    assert len(items) == 8 and sizes is None


# ------------------------------------------------------------------ records
def _scored(sizes):
    n = sum(sizes)
    rollouts = [Rollout((1,), (2,), (0.0,), "x", "stop") for _ in range(n)]
    return Scored([None] * n, rollouts, [Verdict(float(i % 2), {}) for i in range(n)], tuple(sizes))


def test_scored_groups_follow_their_sizes():
    scored = _scored([3, 1, 4])
    assert [(g.start, g.stop) for g in scored.groups()] == [(0, 3), (3, 4), (4, 8)]
    kept = scored.keep_groups([True, False, True])
    assert kept.sizes == (3, 4) and len(kept.rollouts) == 7
    assert (kept + _scored([2])).sizes == (3, 4, 2)
    with pytest.raises(ValueError, match=r"group sizes \(2, 2\) do not cover its 3 rollouts"):
        Scored([None] * 3, scored.rollouts[:3], scored.verdicts[:3], (2, 2))


# ------------------------------------------------------------------ config and a run
@pytest.mark.parametrize("rollout, data, message", [
    ({"adaptive_group_size": [4, 8]}, {}, r"set data\.answer_probe: true"),
    ({"adaptive_group_size": [1, 8]}, {}, r"2 <= min <= rollout\.group_size \(8\) <= max"),
    ({"adaptive_group_size": [2, 6], "group_size": 8}, {}, r"may take \(got \[2, 6\]\)"),
    ({"adaptive_group_size": [2, 8]}, {"answer_probe": True, "target_pass_rate": [0.1, 0.9], "dynamic_sampling": True},
     r"set data\.dynamic_sampling: false"),
])
def test_sizes_that_cannot_work_are_refused_by_name(rollout, data, message):
    with pytest.raises(ValueError, match=message):
        GRPOConfig.from_dict({"rollout": rollout, "data": data})


def test_a_run_with_sized_groups_trains_on_its_budget(tmp_path):
    """B=4, G=4: 16 completions a step, over as many prompts as their sizes take; the ledger adds up."""
    with arithmetic_trainer(tmp_path, answer_probe=True, target_pass_rate=[0.0, 1.0], difficulty_envs=[],
                            probe_pool=4, adaptive_group_size=[2, 8]) as trainer:
        rows = trainer.train()
        scored = trainer.generation.scored
    assert len(scored.rollouts) == 16 and sum(scored.sizes) == 16 and min(scored.sizes) >= 2
    assert all(len({id(scored.items[i]) for i in range(g.start, g.stop)}) == 1 for g in scored.groups())
    for r in rows:
        assert r["tokens_generated"] == r["tokens_learned"] + r["tokens_zero_signal_kept"] + r["tokens_dropped"] \
            + r["tokens_unused"]
        assert 2 <= r["probe_group_size"] <= 8
