"""`PPOTrainer`: the same rollouts, envs and logs as GRPO, with a learned critic.

It exists so the exchange GRPO makes can be measured on one run each: PPO holds a
critic (the actor's architecture with a scalar value head) and its optimizer state;
GRPO spends G completions per prompt instead. Per step:

    sample B prompts → n completions each → score → token rewards (score at the last
    token, −β·KL per token) → V(s) from the critic → GAE advantages and returns →
    clipped policy loss on the actor, clipped value loss on the critic → both step
"""

from __future__ import annotations

import math
import time
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Callable, Optional

import torch

from proctor.envs import EnvSuite

from .algo import kl_estimate, policy_loss
from .algo.gae import gae, token_rewards, value_loss, whiten
from .batch import build_batch, token_logps
from .config import RunConfig
from .learn.learner import Learner, Trainable, disable_dropout
from .metrics import Stopwatch, peak_memory_bytes
from .learn.objective import fixed_logps, reference_logps
from .records import LearnStats, LossSpec, Scored, StepValues, TrainBatch
from .parts import max_turns
from .run import Run
from .step_row import step_row
from .rollout.weight_sync import sync_due, sync_every


class ValueModel(torch.nn.Module):
    """A causal LM's body with a scalar head: V at every position."""

    def __init__(self, body: torch.nn.Module, hidden_size: int) -> None:
        super().__init__()
        self.body = body
        self.head = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.head.weight)   # start from V = 0: no false confidence
        torch.nn.init.zeros_(self.head.bias)

    @classmethod
    def from_pretrained(cls, path: Any) -> "ValueModel":
        from transformers import AutoModel

        body = AutoModel.from_pretrained(path)
        return cls(body, body.config.hidden_size)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.body(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.head(hidden.float()).squeeze(-1)


@dataclass(frozen=True)
class PPOMicroLoss:
    """The actor's clipped loss plus the critic's clipped value loss, for one micro-batch."""

    model: torch.nn.Module
    critic: torch.nn.Module
    spec: LossSpec
    num_items: float
    autocast: Callable[[], AbstractContextManager]
    old_logp: torch.Tensor        # [B, L-1]
    old_values: torch.Tensor      # [B, L-1]
    advantages: torch.Tensor      # [B, L-1] per-token GAE advantages
    returns: torch.Tensor         # [B, L-1]
    value_clip: float | None

    def __call__(self, part: TrainBatch, rows: slice, n_micro: int, pass_index: int
                 ) -> tuple[torch.Tensor, dict[str, float]]:
        with self.autocast():
            logp, entropy = token_logps(self.model, part, self.spec.temperature, with_entropy=True,
                                        entropy_grad=self.spec.entropy_coef > 0)
            values = self.critic(part.input_ids, part.attention_mask)[:, :-1]
        pol = policy_loss(logp, self.old_logp[rows], self.advantages[rows], part.mask, loss_type=self.spec.loss_type,
                          epsilon_low=self.spec.epsilon_low, epsilon_high=self.spec.epsilon_high,
                          max_completion_length=self.spec.max_completion_length, num_items_in_batch=self.num_items,
                          grad_accum_steps=n_micro, entropy=entropy, entropy_coef=self.spec.entropy_coef,
                          batch_rows=part.whole.rows, batch_tokens=part.whole.tokens)
        val = value_loss(values, self.old_values[rows], self.returns[rows], part.mask, self.value_clip)
        logged = {}
        for key, value in (("loss", pol.loss), ("value_loss", val.loss), ("clip_low_frac", pol.clip_low_frac),
                           ("clip_high_frac", pol.clip_high_frac), ("entropy_mean", pol.entropy_mean),
                           ("value_clip_frac", val.clip_frac), ("explained_variance", val.explained_variance)):
            if value is not None:
                logged[key] = float(value.detach())
        return pol.loss + val.loss / n_micro, logged


class PPOTrainer(Run):
    """PPO built from the same parts as GRPO (rollouts, envs, learner, logs), plus a critic."""

    algorithm, title = "ppo", "PPO"

    def __init__(self, config: RunConfig, suite: EnvSuite, model: Any, tokenizer: Any, critic: ValueModel,
                 eval_suite: Optional[EnvSuite] = None) -> None:
        p = self._build(config, suite, model, tokenizer, eval_suite)
        if config.objective.beta > 0 and self.ref_model is None and config.optim.lora_rank == 0:
            raise ValueError("PPO with objective.beta > 0 needs the reference model")
        disable_dropout(critic)
        optimizer = torch.optim.AdamW([q for q in critic.parameters() if q.requires_grad],
                                      lr=config.objective.ppo.critic_learning_rate)
        self.critic, self.critic_optimizer = p.accelerator.prepare(critic, optimizer)
        self.learner = Learner(p.accelerator, [p.policy, Trainable(self.critic, self.critic_optimizer)],
                               micro_batch_size=config.optim.micro_batch_size, max_grad_norm=config.optim.max_grad_norm,
                               warn=lambda m: p.log.console.print(f"[yellow]warning:[/yellow] {m}"))
        self.spec = LossSpec.from_config(config.objective, config.rollout, max_turns=max_turns(suite))
        self._guard(self.learner.warn)
        self._resume_if_asked()   # after the critic is prepared: the checkpoint holds it too

    def step(self, step: int) -> dict[str, Any]:
        watch, t_step = Stopwatch(), time.perf_counter()
        # 1. rollouts: B prompts, n completions each, scored
        with watch.section("select"):   # drawing, and the answer probe's forward pass when on
            items = self.parts.drawer.draw(self.cfg.data.prompts_per_step)
        scored = self.parts.rollouts(items, watch)
        self.parts.drawer.observe(scored, step)
        if self.infra.blocks(scored, step):   # the machinery failed: no update on a batch it could not judge
            learn = LearnStats.not_taken().as_dict() | {"skipped_infra": 1}
            return self._row(step, scored, learn, watch, time.perf_counter() - t_step)
        # 2. batch (advantages come per token, from the critic)
        valid = [v.scored for v in scored.verdicts]
        batch = build_batch(scored.rollouts, [0.0] * len(scored.rollouts), valid, self.tokenizer.pad_token_id,
                            mask_truncated=self.cfg.objective.mask_truncated, device=self.accelerator.device)
        # 3. critic values, token rewards (score at the last token, -β·KL), GAE
        scores = torch.tensor([v.reward if v.scored else 0.0 for v in scored.verdicts])
        loss = self._loss(batch, scores, watch)
        # 4. update actor and critic
        with watch.section("learn"):
            learn = self.learner.update(batch, loss, passes=self.cfg.objective.num_iterations).as_dict()
        # 5. sync
        with watch.section("sync"):
            if sync_due(step, sync_every(self.cfg.rollout)):
                self.generator.sync_weights()
        # 6. row
        return self._row(step, scored, learn, watch, time.perf_counter() - t_step)

    def _loss(self, batch: TrainBatch, scores: torch.Tensor, watch: Stopwatch) -> PPOMicroLoss:
        o, autocast = self.cfg.objective, self.accelerator.autocast
        micro = self.learner.micro_batches(len(batch))
        with torch.no_grad():
            with watch.section("critic"):
                values = self.critic(batch.input_ids, batch.attention_mask)[:, :-1] * batch.mask
            old_logp = fixed_logps(self.model, batch, micro, self.spec.temperature, autocast)
            kl = None
            if o.beta > 0:
                ref = reference_logps(self.model, self.ref_model, self.accelerator.unwrap_model, batch, micro,
                                      self.spec.temperature, autocast, watch)
                kl = kl_estimate(old_logp, ref, o.kl_kind)
            rewards = token_rewards(scores.to(batch.mask.device), batch.mask, kl, o.beta)
            advantages, returns = gae(rewards, values, batch.mask, o.ppo.gamma, o.ppo.lam)
            if o.ppo.whiten_advantages:
                advantages = whiten(advantages, batch.mask)
        return PPOMicroLoss(self.model, self.critic, self.spec, self.learner.token_count(batch.mask), autocast,
                            old_logp, values, advantages, returns, o.ppo.value_clip)

    def _row(self, step: int, scored: Scored, learn: dict[str, float], watch: Stopwatch, step_s: float
             ) -> dict[str, Any]:
        zero = [False] * len(scored.rollouts)   # no groups: every judged sample teaches through the critic
        ledger = self._ledger(step, scored, [1.0 if v.scored else 0.0 for v in scored.verdicts], None, learn)
        kind, peak = peak_memory_bytes()
        extra = {"algorithm": "ppo", **{k: learn.get(k, math.nan)
                                        for k in ("value_loss", "value_clip_frac", "explained_variance")},
                 **self.parts.drawer.report()}
        values = StepValues(step=step, scored=scored, zero_signal=zero, zero_signal_frac=0.0, learn=learn,
                            times=dict(watch.totals), step_s=step_s, ledger=ledger, totals=self.totals,
                            lr=self.learner.lr, weight_version=self.generator.weight_version,
                            memory_kind=kind, peak_memory_bytes=peak, extra=extra)
        return step_row(values)
