"""Phase 1 of a step: which prompts, and their G scored completions.

``PromptDrawer`` draws tasks from the suite (at the difficulty frontier, in the answer probe's
band, skipping prompts the pass-rate memory predicts to be zero-signal, and counting what that
saved); ``RolloutRunner`` turns
prompts into a ``Scored`` batch, generating in chunks and scoring each finished chunk
in a thread while the next one generates. Both take what they need as arguments.
"""

from __future__ import annotations

import random
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Callable, Literal, Optional, Sequence

import numpy as np

from proctor.envs import SuiteItem, Verdict
from proctor.envs.core.splits import question_key
from proctor.envs.core.verifier import all_verdicts

from .metrics import Stopwatch
from .select.passrate import PassRateMemory
from .select.probe_selection import PassRateProbe, ProbeSelection
from .records import Scored
from .select.frontier import Frontier, SelectionRules, prior_from
from .rollout import Generator, Rollout, SamplingParams
from .rollout.tool_turns import ToolTurns

ScoreFn = Callable[[list[SuiteItem], list[str]], list[Verdict]]
# (items, rollouts, verdicts, score) → (rollouts, verdicts, turns): later turns of multi-turn envs
MoreTurns = Callable[[list[SuiteItem], list[Rollout], list[Verdict], Callable], tuple[list, list, int]]


class EpochOrder:
    """Every task of every env once per epoch (TRL's dataset semantics), in a fresh shuffled
    order each epoch when ``shuffle`` (else in the envs' own order); env weights do not apply.
    Under data parallelism the epoch's order is the same on every process (one seed) and
    process ``rank`` of ``world`` takes every world-th task of it: disjoint shares."""

    def __init__(self, suite: Any, shuffle: bool = True, seed: int = 0, rank: int = 0, world: int = 1) -> None:
        self.suite = suite
        self.shuffle = shuffle
        self.rng = np.random.default_rng(seed)
        self.rank, self.world = rank, world
        self.all = [(name, i) for name, env in suite.envs.items() for i in range(len(env.source))]
        self.order: list[int] = []
        self.cursor = 0
        self.epoch = 0                     # completed epochs

    def sample(self, n: int, rng: Optional[np.random.Generator] = None) -> list[SuiteItem]:
        """The next ``n`` tasks of this process's share (``rng`` is not used: the order has its own)."""
        out = []
        while len(out) < n:
            if self.cursor >= len(self.order):
                if self.order:
                    self.epoch += 1
                full = self.rng.permutation(len(self.all)) if self.shuffle else np.arange(len(self.all))
                self.order = [int(i) for i in full[self.rank::self.world]]
                if not self.order:
                    raise ValueError(f"{len(self.all)} tasks cannot be shared among {self.world} processes")
                self.cursor = 0
            name, index = self.all[self.order[self.cursor]]
            self.cursor += 1
            out.append(SuiteItem(name, self.suite.envs[name].source[index]))
        return out

    def progress(self) -> float:
        """Epochs done, fractional."""
        return self.epoch + (self.cursor / len(self.order) if self.order else 0.0)

    def state_dict(self) -> dict[str, Any]:
        return {"order": list(self.order), "cursor": self.cursor, "epoch": self.epoch,
                "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.order, self.cursor, self.epoch = list(state["order"]), state["cursor"], state["epoch"]
        self.rng.bit_generator.state = state["rng"]


def memory_key(item: SuiteItem) -> str:
    """What the pass-rate memory keys a prompt by: its env and canonical question (one record
    for every task that asks it, however worded: a pool drawn with repeats has several)."""
    return f"{item.env}:{question_key(item.task)}"


class PromptDrawer:
    """Tasks for a step, one process's own stream (seeded by rank), chosen before rollout.

    ``frontier`` (envs with a difficulty knob, a target band) picks each prompt's level;
    ``probe`` (the answer probe, ``trainer/select/probe.py``) predicts each candidate's pass rate
    with the current policy and keeps those in the band; ``memory`` (when ``rules.skip``)
    skips prompts whose own record predicts a zero-signal group. Each kept prompt's
    importance weight is remembered for ``skip_reweight`` (see ``trainer/select/frontier.py``)."""

    def __init__(self, sample: Callable[[int, np.random.Generator], list[SuiteItem]], seed: int,
                 memory: PassRateMemory, rules: SelectionRules, default_tokens: int,
                 epochs: Optional[EpochOrder] = None, frontier: Optional[Frontier] = None,
                 probe: Optional[PassRateProbe] = None) -> None:
        self.sample = epochs.sample if epochs is not None else sample
        self.epochs = epochs
        self.rng = random.Random(seed)
        self.np_rng = np.random.default_rng(seed)
        self.memory = memory
        self.rules = rules
        self.frontier = frontier
        # each env's pass rate (decayed like a level's): the prior of prompts without a level
        self.env_rates = PassRateMemory(memory.group_size, min_trials=1, decay=rules.level_decay)
        self.default_tokens = default_tokens
        # (env, task id) → P_uniform / P_selected at the prompt's last draw (skip_reweight)
        self.weights: dict[tuple[str, str], float] = {}
        self.recent_lengths: list[float] = []      # mean completion length of the last 5 steps
        self.probing = (ProbeSelection(probe, rules.band, rules.explore, rules.group_size)
                      if probe is not None and rules.band is not None else None)

    def draw(self, n: int, probe: bool = True) -> list[SuiteItem]:
        """n tasks; prompts predicted zero-signal are skipped (at most 50 n tries, then taken).
        With an answer probe (unless ``probe`` is False) a pool of candidates is probed in one pass."""
        if self.probing is not None and probe:
            return self._draw_probed(n)
        items: list[SuiteItem] = []
        tries = 0
        while len(items) < n:
            item, weight = self._candidate()
            tries += 1
            keep = (self.memory.keep_probability(memory_key(item), prior_from(self.predicted_rate(item)))
                    if self.rules.skip and tries < 50 * n else 1.0)
            if keep < 1.0 and self.rng.random() >= keep:
                self.memory.note_skip(self.memory.group_size * self.expected_tokens())
                continue
            self.weights[(item.env, item.task.id)] = weight / keep
            items.append(item)
        return items

    def draw_sized(self, n: int) -> tuple[list[SuiteItem], Optional[list[int]]]:
        """Tasks for n groups' worth of completions (n x G), and each one's group size when the
        answer probe sizes them (``rules.group_sizes``); else n tasks and None (G each)."""
        if self.probing is None or self.rules.group_sizes is None:
            return self.draw(n), None
        pool = [self._candidate() for _ in range(self.rules.probe_pool * n)]
        items, sizes = [], []
        for item, weight, size in self.probing.choose_sized(pool, n * self.rules.group_size, self.rules.group_sizes,
                                                            self.rng):
            self.weights[(item.env, item.task.id)] = weight
            items.append(item)
            sizes.append(size)
        return items, sizes

    def _candidate(self) -> tuple[SuiteItem, float]:
        """One task from the sampler (at the frontier's level for envs it covers) and its weight."""
        item, weight = self.sample(1, self.np_rng)[0], 1.0
        if self.frontier is not None and self.frontier.covers(item.env):
            drawn = self.frontier.draw(item, self.np_rng)
            item, weight = drawn.item, drawn.weight
        return item, weight

    def _draw_probed(self, n: int) -> list[SuiteItem]:
        """``probe_pool`` x n candidates, probed in one forward pass (one per call, so data-parallel
        processes stay in step); ``ProbeSelection`` fills the slots."""
        assert self.probing is not None
        pool = [self._candidate() for _ in range(self.rules.probe_pool * n)]
        out = []
        for item, weight in self.probing.choose(pool, n, self.rng):
            self.weights[(item.env, item.task.id)] = weight
            out.append(item)
        return out

    def predicted_rate(self, item: SuiteItem) -> Optional[float]:
        """What prompts like ``item`` pass: its level's rate, else its env's (None before either is seen)."""
        rate = None
        if self.frontier is not None and self.frontier.covers(item.env):
            rate = self.frontier.level_rate(item.env, item.task)
        return rate if rate is not None else self.env_rates.pass_rate(item.env)

    def weight_of(self, item: SuiteItem) -> float:
        """P_uniform / P_selected at the prompt's last draw: the importance weight that undoes selection."""
        return self.weights.get((item.env, item.task.id), 1.0)

    def observe(self, scored: Scored, step: int) -> None:
        """Every scored group updates the memories; lengths update the expected cost of a skip."""
        for group in scored.groups():
            item = scored.items[group.start]
            correct = [v.correct for v in scored.verdicts[group] if v.scored]
            self.memory.update(memory_key(item), correct, step)
            self.env_rates.update(item.env, correct, step)
            if self.frontier is not None:
                self.frontier.observe(item.env, item.task, correct, step)
            if self.probing is not None:
                self.probing.observe(item, correct)
        if self.probing is not None:
            self.probing.check_calibration()
        lens = [sum(r.learned()) for r in scored.rollouts]
        if lens:
            self.recent_lengths = (self.recent_lengths + [sum(lens) / len(lens)])[-5:]

    def report(self) -> dict[str, float]:
        """The frontier's and the answer probe's values since the last report (the step row)."""
        out = self.frontier.report() if self.frontier is not None else {}
        if self.probing is not None:
            out.update(self.probing.report())
        return out

    def expected_tokens(self) -> int:
        """A skipped completion's expected length: the recent mean, else the length limit."""
        lens = self.recent_lengths
        return int(sum(lens) / len(lens)) if lens else self.default_tokens

    def state_dict(self) -> dict[str, Any]:
        """Plain data (JSON's values): random's state tuple as lists, the weights as [env, task id, weight]."""
        version, internal, gauss_next = self.rng.getstate()
        return {"rng": {"version": version, "internal": list(internal), "gauss_next": gauss_next},
                "np_rng": self.np_rng.bit_generator.state,
                "memory": self.memory.records_state(),
                "memory_counters": [self.memory.skipped, self.memory.tokens_saved],
                "weights": [[env, task_id, w] for (env, task_id), w in self.weights.items()],
                "epochs": self.epochs.state_dict() if self.epochs is not None else None,
                "recent_lengths": list(self.recent_lengths),
                "frontier": self.frontier.state_dict() if self.frontier is not None else None,
                "env_rates": self.env_rates.records_state(),
                "probe": self.probing.state_dict() if self.probing is not None else None}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        rng = state["rng"]
        self.rng.setstate((rng["version"], tuple(rng["internal"]), rng["gauss_next"]))
        self.np_rng.bit_generator.state = state["np_rng"]
        self.memory.load_records(state["memory"])
        self.memory.skipped, self.memory.tokens_saved = state["memory_counters"]
        self.recent_lengths = list(state.get("recent_lengths", []))
        self.weights = {(env, task_id): w for env, task_id, w in state.get("weights", [])}
        if self.epochs is not None and state.get("epochs"):
            self.epochs.load_state_dict(state["epochs"])
        self.env_rates.load_records(state.get("env_rates", {}))
        if self.frontier is not None and state.get("frontier"):
            self.frontier.load_state_dict(state["frontier"])
        if self.probing is not None and state.get("probe"):
            self.probing.load_state_dict(state["probe"])


@dataclass(frozen=True)
class PromptLimit:
    """``data.max_prompt_length``: a longer prompt keeps its last ``max_tokens`` tokens
    ("truncate_left", TRL's behaviour) or is dropped and replaced by a fresh ``draw``."""

    max_tokens: Optional[int]
    overflow: Literal["truncate_left", "drop"] = "truncate_left"
    draw: Optional[Callable[[int], list[SuiteItem]]] = None
    max_redraws: int = 100   # per dropped prompt, then the run stops with an error

    def apply(self, items: list[SuiteItem], prompts: list[list[int]], tokenize: Callable[[SuiteItem], list[int]]
              ) -> tuple[list[SuiteItem], list[list[int]], int, int]:
        """(items, prompts, truncated, dropped): every prompt within the limit."""
        if self.max_tokens is None:
            return items, prompts, 0, 0
        limit, truncated, dropped = self.max_tokens, 0, 0
        items, prompts = list(items), list(prompts)
        for i, ids in enumerate(prompts):
            if len(ids) <= limit:
                continue
            if self.overflow == "truncate_left":
                prompts[i], truncated = ids[-limit:], truncated + 1
                continue
            if self.draw is None:
                raise ValueError("data.prompt_overflow: drop needs a prompt drawer to replace dropped prompts")
            for _ in range(self.max_redraws):
                dropped += 1
                items[i] = self.draw(1)[0]
                prompts[i] = tokenize(items[i])
                if len(prompts[i]) <= limit:
                    break
            else:
                raise ValueError(f"data.max_prompt_length is {limit} tokens but {self.max_redraws} prompts drawn in "
                                 f"a row were longer (the last: {len(prompts[i])} tokens, env {items[i].env!r}): "
                                 "raise data.max_prompt_length or set data.prompt_overflow: truncate_left")
        return items, prompts, truncated, dropped


class RolloutRunner:
    """prompts → G completions each (or each prompt's own count) → verdicts, as one ``Scored``
    batch in prompt order."""

    def __init__(self, generator: Generator, tokenize: Callable[[SuiteItem], list[int]], score: ScoreFn,
                 sampling: SamplingParams, chunk_sequences: int, overlap_scoring: bool = True,
                 more_turns: Optional[MoreTurns] = None, limit: PromptLimit = PromptLimit(None),
                 tool_turns: Optional[ToolTurns] = None) -> None:
        self.limit = limit
        self.tool_turns = tool_turns
        self.generator = generator
        self.tokenize = tokenize
        self.score = score
        self.sampling = sampling
        self.per_chunk = max(1, chunk_sequences // sampling.n)
        self.overlap = overlap_scoring
        self.more_turns = more_turns
        self.scorer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="proctor-score")

    def __call__(self, items: Sequence[SuiteItem], watch: Stopwatch, sizes: Optional[Sequence[int]] = None) -> Scored:
        """Generate in chunks; each finished chunk is scored in a thread while the next generates.

        ``sizes``: each prompt's own count of completions (``rollout.adaptive_group_size``); such
        prompts are sampled one completion per copy, the same distribution as ``n`` at once."""
        items, prompts, truncated, dropped = self.limit.apply(list(items), [self.tokenize(it) for it in items],
                                                              self.tokenize)
        if sizes is not None and len(sizes) != len(items):
            raise ValueError(f"RolloutRunner: {len(sizes)} group sizes for {len(items)} prompts")
        counts = list(sizes) if sizes is not None else [self.sampling.n] * len(items)
        sampling, per_chunk = self.sampling, self.per_chunk
        if sizes is not None:
            items = [it for it, n in zip(items, counts) for _ in range(n)]
            prompts = [p for p, n in zip(prompts, counts) for _ in range(n)]
            sampling, per_chunk = replace(self.sampling, n=1), self.per_chunk * self.sampling.n
        items_out, rollouts, judged = self._generate_and_score(items, prompts, sampling, per_chunk, watch)
        turns = 1
        if self.tool_turns is not None:
            with watch.section("tool_episodes"):   # tools and the later replies of tool episodes
                turns = self._tool_episodes(items_out, rollouts, judged)
        verdicts = all_verdicts(judged, "RolloutRunner")
        if self.more_turns is not None:
            with watch.section("later_turns"):
                rollouts, verdicts, more = self.more_turns(items_out, rollouts, verdicts,
                                                           lambda its, rs: self._score(its, rs, watch))
                turns = max(turns, more)
        return Scored(items_out, rollouts, verdicts, tuple(counts), turns, prompts_truncated=truncated,
                      prompts_dropped=dropped)

    def _generate_and_score(self, items: list[SuiteItem], prompts: list[list[int]], sampling: SamplingParams,
                            per_chunk: int, watch: Stopwatch
                            ) -> tuple[list[SuiteItem], list[Rollout], list[Optional[Verdict]]]:
        """(items, rollouts, verdicts), one per completion in prompt order: each chunk of
        ``per_chunk`` prompts is scored in a thread while the next one generates."""
        pending: list[tuple[list[SuiteItem], list[Rollout], Optional[Future]]] = []
        for start in range(0, len(items), per_chunk):
            with watch.section("generate"):
                groups = self.generator.generate(prompts[start:start + per_chunk], sampling)
            flat_items = [it for it in items[start:start + per_chunk] for _ in range(sampling.n)]
            flat = [r for g in groups for r in g]
            # Without overlap, everything is scored after generation (the baseline it is measured against).
            future = self.scorer.submit(self._score, flat_items, flat, watch) if self.overlap else None
            pending.append((flat_items, flat, future))
        items_out: list[SuiteItem] = []
        rollouts: list[Rollout] = []
        judged: list[Optional[Verdict]] = []
        with watch.section("score_exposed"):   # scoring time that generation did not hide
            for flat_items, flat, future in pending:
                items_out += flat_items
                rollouts += flat
                judged += future.result() if future is not None else self._score(flat_items, flat, watch)
        return items_out, rollouts, judged

    def _score(self, items: list[SuiteItem], rollouts: list[Rollout], watch: Stopwatch) -> list[Optional[Verdict]]:
        """The verdicts of the completions that end their episode here; None for tool episodes'
        first replies (``_tool_episodes`` plays those out and judges their final replies)."""
        idx = [i for i, item in enumerate(items) if self.tool_turns is None or not self.tool_turns.covers(item)]
        out: list[Optional[Verdict]] = [None] * len(items)
        if not idx:
            return out
        with watch.section("score"):
            verdicts = self.score([items[i] for i in idx], [rollouts[i].text for i in idx])
        if len(verdicts) != len(idx):   # a short list would shift every later reward
            raise RuntimeError(f"scoring returned {len(verdicts)} verdicts for {len(idx)} completions")
        for i, v in zip(idx, verdicts):
            out[i] = v
        return out

    def _tool_episodes(self, items: list[SuiteItem], rollouts: list[Rollout], judged: list[Optional[Verdict]]) -> int:
        """Tool episodes played out in place (``rollout.tool_turns``); returns the most replies one had."""
        assert self.tool_turns is not None
        idx = [i for i, item in enumerate(items) if self.tool_turns.covers(item)]
        if not idx:
            return 1
        one = replace(self.sampling, n=1)
        episodes, verdicts, turns = self.tool_turns.run(
            [items[i] for i in idx], [rollouts[i] for i in idx],
            lambda prompts: [group[0] for group in self.generator.generate(prompts, one)])
        for i, r, v in zip(idx, episodes, verdicts):
            rollouts[i], judged[i] = r, v
        return turns

    def close(self) -> None:
        self.scorer.shutdown(wait=True)


class InfraGuard:
    """Steps whose completions could mostly not be judged are not taken.

    When more than ``max_frac`` of a step's completions are ``infra_error`` (the sandbox or
    a scorer failed), an update on the rest would train on whatever the machinery happened
    to judge; the step is skipped instead, and ``streak`` such steps in a row stop the run.
    ``total`` sums counts over every process (``Consensus.sum``): the fraction is the whole
    step's, so every process skips the same steps (one skipping alone hangs the others in
    the gradient all-reduce)."""

    def __init__(self, max_frac: float, warn: Callable[[str], None],
                 total: Callable[[Sequence[int]], list[int]] = list) -> None:
        self.max_frac = max_frac
        self.warn = warn
        self.total = total
        self.streak = 0

    def blocks(self, scored: Scored, step: int) -> bool:
        failed = [v for v in scored.verdicts if not v.scored]
        n_failed, n_all = self.total([len(failed), len(scored.verdicts)])
        if n_failed / max(1, n_all) <= self.max_frac:
            self.streak = 0
            return False
        self.streak += 1
        first = failed[0].info.get("error", "no error recorded") if failed else "on another process"
        self.warn(f"step {step}: {n_failed} of {n_all} completions could not be judged "
                  f"(infra_error, e.g. {str(first)[:200]!r}); update skipped ({self.streak} in a row)")
        return True


def groups_with_signal(scored: Scored) -> list[bool]:
    """Per group: at least two judged completions whose rewards differ."""
    keep = []
    for group in scored.groups():
        rewards = [v.reward for v in scored.verdicts[group] if v.scored]
        keep.append(len(rewards) >= 2 and max(rewards) - min(rewards) > 1e-6)
    return keep


__all__ = ["EpochOrder", "InfraGuard", "PromptDrawer", "PromptLimit", "RolloutRunner", "groups_with_signal"]
