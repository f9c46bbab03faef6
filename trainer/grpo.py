"""`GRPOTrainer`: the critic-free loop, one step readable top to bottom.

    1. rollouts      B prompts → G completions each → verdicts (scoring overlaps generation;
                     async: the batch generated while the last update ran)
    2. resample      DAPO dynamic sampling: zero-signal groups replaced by fresh prompts
    3. advantages    group-relative, unjudged samples excluded (A = 0)
    4. batch         padded tensors of exactly the sampled token ids
    5. update        μ passes of the clipped-ratio loss (+ β·KL) through the ``Learner``
    6. sync          the engine samples from the new weights from now on
    7. row           the step's metrics, a pure function of what happened

The formulas live in ``proctor.trainer.algo`` (matched to TRL numerically); the parts a
trainer is made of in ``parts.build_parts``; the loop, state, checkpoints and evaluation in
``run.Run``; this file is the order of the phases.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any, Callable, Optional

import torch

from proctor.envs import EnvSuite, SuiteItem

from .algo import AdvantageStats, group_advantages
from .batch import build_batch
from .config import GRPOConfig, resolve_is_correction
from .learn.learner import Learner
from .metrics import Stopwatch, peak_memory_bytes
from .learn.objective import GRPOMicroLoss, fixed_logps, reference_logps
from .rollout.pipeline import RolloutPipeline
from .records import Generation, LearnStats, LossSpec, Scored, StepValues, TrainBatch
from .parts import max_turns
from .run import Run
from .sampling import groups_with_signal
from .step_row import step_row
from .rollout.weight_sync import sync_due, sync_every


def _first_with_signal(fresh: Scored, wanted: int) -> tuple[Scored, Scored]:
    """(``wanted`` groups of ``fresh``, those with signal first; the other groups)."""
    signal = groups_with_signal(fresh)
    order = sorted(range(len(signal)), key=lambda i: not signal[i])   # stable: signal first, then draw order
    chosen = set(order[:wanted])
    taken = [i in chosen for i in range(len(signal))]
    return fresh.keep_groups(taken), fresh.keep_groups([not t for t in taken])


class GRPOTrainer(Run):
    algorithm, title = "grpo", "GRPO"

    def __init__(self, config: GRPOConfig, suite: EnvSuite, model: Any, tokenizer: Any,
                 eval_suite: Optional[EnvSuite] = None) -> None:
        p = self._build(config, suite, model, tokenizer, eval_suite)
        self.learner = Learner(p.accelerator, [p.policy], micro_batch_size=config.optim.micro_batch_size,
                               max_grad_norm=config.optim.max_grad_norm, warn=self._warn)
        self.spec = LossSpec.from_config(config.objective, config.rollout, config.optim, max_turns(suite))
        self.sleeper = p.engine.sleeper   # colocated on a GPU: the engine frees memory for the update
        self.is_mode = resolve_is_correction(config.rollout)
        self.sync_every = sync_every(config.rollout)
        self._guard(self._warn)
        self.generation: Optional[Generation] = None   # the current generation batch (steps_per_generation)
        self._pending: list[list[SuiteItem]] = []      # async: prompts of batches in flight at the checkpoint
        self.pipeline: Optional[RolloutPipeline] = None
        self._resume_if_asked()
        if config.rollout.async_generation:
            if p.engine.transfer is None:   # the config refuses it: transformers samples with the learner's weights
                raise ValueError("rollout.async_generation needs an engine with weights of its own (vllm, vllm_server)")
            self.pipeline = RolloutPipeline(p.rollouts, lambda: self.draw_prompts(config.data.prompts_per_step),
                                            p.engine.transfer, config.rollout.max_staleness,
                                            policy_step=self.start_step, pending=self._pending)

    # ================================================================== one step
    def step(self, step: int) -> dict[str, Any]:
        watch, t_step = Stopwatch(), time.perf_counter()
        spg = self.cfg.optim.steps_per_generation
        index = (step - 1) % spg             # this step's share of the generation batch
        if index == 0 or self.generation is None:
            self.generation = self._generate(step, watch)          # phases 1-4
        part = self.generation.part(index)
        if self.infra.blocks(part.scored, step):   # the machinery failed: no update on a batch it could not judge
            learn = LearnStats.not_taken().as_dict() | {"skipped_infra": 1}
            return self._row(step, part, learn, watch, time.perf_counter() - t_step)
        # 5. update
        if self.sleeper is not None:
            self.sleeper.sleep()   # the engine's KV cache and weights leave the GPU for the update
        learn = self.learn(part.batch, watch, num_items=part.num_items, old_logp=part.old_logp)
        # 6. sync: the next generation samples from the new weights
        with watch.section("sync"):
            self._sync(step)
        # 7. row
        return self._row(step, part, learn, watch, time.perf_counter() - t_step)

    def _generate(self, step: int, watch: Stopwatch) -> Generation:
        """Phases 1-4 for B × steps_per_generation prompts."""
        # 1. rollouts
        scored, lags = self._rollouts(step, watch)
        # 2. resample zero-signal groups (DAPO dynamic sampling); dropped groups still cost their tokens
        scored, dropped, rounds = self._resample(scored, step, watch)
        # 3. advantages
        adv, valid = self._advantages(scored)
        # 4. batch (and π_old when later steps of this generation will be off-policy)
        batch = build_batch(scored.rollouts, adv.advantages.tolist(), valid.tolist(), self.tokenizer.pad_token_id,
                            mask_truncated=self.cfg.objective.mask_truncated, device=self.accelerator.device)
        spg = self.cfg.optim.steps_per_generation
        old_logp = None
        if spg > 1:
            with watch.section("old_logp"):
                old_logp = fixed_logps(self.model, batch, self.learner.micro_batches(len(batch)),
                                       self.spec.temperature, self.accelerator.autocast)
        return Generation(scored, dropped, adv, batch, self.learner.token_count(batch.mask), old_logp, spg,
                          rounds, lags)

    # ================================================================== the phases
    def _rollouts(self, step: int, watch: Stopwatch) -> tuple[Scored, Optional[list[int]]]:
        lags = None
        if self.pipeline is not None:
            scored, lags = self.pipeline.take(step - 1, watch)
        else:
            prompts = self.cfg.data.prompts_per_step * self.cfg.optim.steps_per_generation
            with watch.section("select"):   # drawing, and the answer probe's forward pass when on
                items, sizes = self.parts.drawer.draw_sized(prompts)
            scored = self.rollout(items, watch, sizes)
        self.parts.drawer.observe(scored, step)
        return scored, lags

    def _resample(self, scored: Scored, step: int, watch: Stopwatch) -> tuple[Scored, Scored, int]:
        """Replace zero-signal groups with fresh prompts, a bounded number of rounds; returns
        (the batch to train on, the groups dropped on the way, the rounds run).

        Every process runs the same rounds: another round while any process still misses
        groups. With a sharded policy each forward is a collective, so every process then
        draws and generates the largest count missing anywhere, keeps what it misses (groups
        with signal first) and drops the rest; otherwise each draws its own count."""
        d = self.cfg.data
        rounds = 0
        dropped = Scored([], [], [])
        while d.dynamic_sampling and rounds < d.max_resample_rounds:
            keep = groups_with_signal(scored)
            missing = d.prompts_per_step * self.cfg.optim.steps_per_generation - sum(keep)
            most = self.agree.max(missing)
            if most == 0:
                break
            rounds += 1
            count = most if self.parts.sharded else missing
            if count == 0:
                continue
            with watch.section("select"):
                more = self.draw_prompts(count)
            fresh = (self.pipeline.run(lambda: self.rollout(more, watch)) if self.pipeline is not None
                     else self.rollout(more, watch))
            self.parts.drawer.observe(fresh, step)
            fresh, surplus = _first_with_signal(fresh, missing)
            dropped = dropped + scored.keep_groups([not k for k in keep]) + surplus
            scored = scored.keep_groups(keep) + fresh
        return scored, dropped, rounds

    def _advantages(self, scored: Scored) -> tuple[AdvantageStats, torch.Tensor]:
        rewards = torch.tensor([v.reward if v.scored else math.nan for v in scored.verdicts])
        valid = torch.tensor([v.scored for v in scored.verdicts])
        everyone = None
        if self.cfg.objective.scale_rewards == "batch" and self.accelerator.num_processes > 1:
            # The batch std is over the whole batch, every process (as TRL gathers it), not this share.
            local = torch.where(valid, rewards, torch.nan).to(self.accelerator.device)
            everyone = self.accelerator.gather(local).cpu()
        adv = group_advantages(rewards, scored.sizes, scale=self.cfg.objective.scale_rewards,
                               valid=valid, batch_rewards=everyone)
        if self.cfg.data.skip_reweight:
            # Undo the prompt mix that skipping changed: 1 / P(kept) per group, divided by the batch's
            # mean weight so that only the mix changes, never the step size (raw weights grow the
            # gradient up to 1 / retry_prob as skipping spreads: a learning rate that drifts).
            weights = torch.tensor([self.parts.drawer.weight_of(item) for item in scored.items])
            adv = replace(adv, advantages=adv.advantages * (weights / weights.mean()))
        return adv, valid

    def learn(self, batch: TrainBatch, watch: Stopwatch, num_items: Optional[float] = None,
              old_logp: Optional[torch.Tensor] = None) -> dict[str, float]:
        """μ optimizer passes over ``batch``; π_old and π_ref fixed before the first.

        ``num_items``: dapo's N, the whole generation batch's tokens over every process (default:
        this batch's); ``old_logp``: π_old fixed at generation (steps_per_generation > 1)."""
        o = self.cfg.objective
        if num_items is None:
            num_items = self.learner.token_count(batch.mask)
        if self._zero_rows_are_inert():
            # A row with advantage 0 has loss and gradient exactly 0 here (dapo's normaliser is the
            # global token count above, no KL, no entropy bonus): skip its forward and backward.
            keep = (batch.advantages != 0) & (batch.mask.sum(-1) > 0)
            batch = batch.select(keep)
            old_logp = None if old_logp is None else old_logp[keep]
        micro = self.learner.micro_batches(len(batch))
        autocast = self.accelerator.autocast
        ref_logp = None
        if o.num_iterations > 1 and old_logp is None:   # π_old must stay fixed across the μ passes
            with watch.section("old_logp"):
                old_logp = fixed_logps(self.model, batch, micro, self.spec.temperature, autocast)
        if o.beta > 0:
            ref_logp = reference_logps(self.model, self.ref_model, self.accelerator.unwrap_model, batch, micro,
                                       self.spec.temperature, autocast, watch)
        loss = GRPOMicroLoss(self.model, self.spec, num_items, self.accelerator.num_processes, autocast,
                             old_logp, ref_logp, self.is_mode, self.cfg.rollout.is_cap)
        with watch.section("learn"):
            stats: LearnStats = self.learner.update(batch, loss, passes=o.num_iterations)
        return stats.as_dict()

    def _sync(self, step: int) -> None:
        """The engine gets the new weights when ``weight_sync.sync_due`` says (the one place
        that decides); a sleeping engine wakes after every update either way."""
        if not sync_due(step, self.sync_every, self.cfg.optim.steps_per_generation):
            if self.sleeper is not None:
                self.sleeper.wake_up()
            return
        if self.pipeline is not None:
            self.pipeline.sync(step)
        elif self.sleeper is not None:
            self.sleeper.sync_and_wake()
        else:
            self.generator.sync_weights()

    def _row(self, step: int, part: Generation, learn: dict[str, float], watch: Stopwatch, step_s: float
             ) -> dict[str, Any]:
        scored, dropped, adv, rounds, lags = part.scored, part.dropped, part.advantages, part.rounds, part.lags
        ledger = self._ledger(step, scored, adv.advantages.tolist(), dropped, learn)
        kind, peak = peak_memory_bytes()
        sync = self.generator.last_sync
        values = StepValues(
            step=step, scored=scored, zero_signal=adv.zero_signal.tolist(), zero_signal_frac=adv.frac_zero_signal,
            learn=learn, times=dict(watch.totals), step_s=step_s, ledger=ledger, totals=self.totals, lr=self.learner.lr,
            # async: the version the engine holds once the queued syncs land (the applied one races the thread)
            weight_version=self.pipeline.next_version if self.pipeline is not None else self.generator.weight_version,
            memory_kind=kind, peak_memory_bytes=peak,
            rounds=rounds, lags=lags, sync_bytes=sync.bytes if sync is not None else None,
            dropped=dropped if self.cfg.data.dynamic_sampling else None, extra=self.parts.drawer.report())
        return step_row(values)

    # ================================================================== the parts, for callers and tests
    def rollout(self, items: list[SuiteItem], watch: Stopwatch, sizes: Optional[list[int]] = None) -> Scored:
        """Each item's completions: G each, or ``sizes`` (the probe's per-prompt group sizes)."""
        return self.parts.rollouts(items, watch, sizes)

    def _zero_rows_are_inert(self) -> bool:
        o = self.cfg.objective
        # Several processes must run the same number of backward passes (DDP all-reduces in
        # them), so rows are only skipped when one process trains alone.
        # Skipped rows stay in the loss's batch counts (TrainBatch.select), so this is exact
        # for every loss type; the KL and entropy terms still need their forward.
        return o.beta == 0 and o.entropy_coef == 0 and self.accelerator.num_processes == 1

    def _warn(self, message: str) -> None:
        self.parts.log.console.print(f"[yellow]warning:[/yellow] {message}")

    # ================================================================== GRPO's own state and close
    def _own_state(self, step: int) -> dict[str, Any]:
        return {
            # async: prompts drawn for batches still being generated; regenerated after a resume
            "pending_batches": self.pipeline.pending_items() if self.pipeline is not None else [],
            # steps_per_generation: the rest of the generation batch, when steps of it remain
            "generation": (self.generation.to("cpu") if self.generation is not None
                           and step % self.cfg.optim.steps_per_generation else None)}

    def _load_own_state(self, state: dict[str, Any]) -> None:
        generation = state.get("generation")
        self.generation = None if generation is None else generation.to(self.accelerator.device)
        self._pending = list(state.get("pending_batches", []))

    def _on_engine(self, fn: Callable[[], dict[str, float]]) -> dict[str, float]:
        # async: on the engine's thread, after the batches queued before it
        return self.pipeline.run(fn) if self.pipeline is not None else fn()

    def close(self) -> None:
        if self.pipeline is not None:
            self.pipeline.close()
        super().close()
