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
from dataclasses import dataclass
from typing import Any

import torch

from proctor.envs import EnvSuite

from .algo import kl_estimate, policy_loss
from .algo.gae import gae, token_rewards, value_loss, whiten
from .batch import TrainBatch, build_batch, token_logps
from .config import GRPOConfig
from .grpo import GRPOTrainer, Scored
from .metrics import Stopwatch


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


@dataclass
class _Signal:
    """PPO has no groups: every judged sample teaches through the critic's baseline."""

    zero_signal: torch.Tensor
    frac_zero_signal: float


class PPOTrainer(GRPOTrainer):
    def __init__(self, config: GRPOConfig, suite: EnvSuite, model: Any, tokenizer: Any, critic: ValueModel) -> None:
        super().__init__(config, suite, model, tokenizer)
        optimizer = torch.optim.AdamW([p for p in critic.parameters() if p.requires_grad],
                                      lr=config.critic_learning_rate)
        self.critic, self.critic_optimizer = self.accelerator.prepare(critic, optimizer)
        if config.beta > 0 and self.ref_model is None and config.lora_rank == 0:
            raise ValueError("PPO with beta > 0 needs the reference model")

    def _zero_rows_are_inert(self) -> bool:
        return False   # per-token advantages: no row is known to be zero in advance

    def step(self, step: int) -> dict[str, float]:
        cfg, watch = self.cfg, Stopwatch()
        t_step = time.perf_counter()
        scored: Scored = self.rollout(self.draw_prompts(cfg.prompts_per_step), watch)
        valid = torch.tensor([v.scored for v in scored.verdicts])
        scores = torch.tensor([v.reward if v.scored else 0.0 for v in scored.verdicts])
        batch = build_batch(scored.rollouts, [0.0] * len(scored.rollouts), valid.tolist(),
                            self.tokenizer.pad_token_id, mask_truncated=cfg.mask_truncated,
                            device=self.accelerator.device)
        with torch.no_grad():
            with watch.section("critic"):
                values = self.critic(batch.input_ids, batch.attention_mask)[:, :-1] * batch.mask
            old_logp, _ = token_logps(self.model, batch, cfg.temperature)
            kl = None
            if cfg.beta > 0:
                with watch.section("reference"):
                    kl = kl_estimate(old_logp, self._ref_logps(batch), cfg.kl_kind)
            rewards = token_rewards(scores.to(batch.mask.device), batch.mask, kl, cfg.beta)
            advantages, returns = gae(rewards, values, batch.mask, cfg.gamma, cfg.lam)
            if cfg.whiten_advantages:
                advantages = whiten(advantages, batch.mask)
        learn = self._learn_ppo(batch, old_logp, values, advantages, returns, watch)
        self.generator.sync_weights()
        signal = _Signal(zero_signal=torch.zeros(len(scored.rollouts), dtype=torch.bool), frac_zero_signal=0.0)
        row = self._metrics(step, scored, signal, batch, learn, watch, 0, time.perf_counter() - t_step)
        row["algorithm"] = "ppo"
        return row

    def _learn_ppo(self, batch: TrainBatch, old_logp: torch.Tensor, old_values: torch.Tensor,
                   advantages: torch.Tensor, returns: torch.Tensor, watch: Stopwatch) -> dict[str, float]:
        cfg = self.cfg
        rows = len(batch)
        micro = [slice(i, min(i + cfg.micro_batch_size, rows)) for i in range(0, rows, cfg.micro_batch_size)]
        num_items = float(batch.mask.sum())
        stats: dict[str, list[float]] = {}
        grad_norm: Any = 0.0
        with watch.section("learn"):
            for _ in range(cfg.num_iterations):
                for m in micro:
                    part = batch.slice(m)
                    with self.accelerator.autocast():
                        logp, entropy = token_logps(self.model, part, cfg.temperature, with_entropy=True)
                        values = self.critic(part.input_ids, part.attention_mask)[:, :-1]
                    pol = policy_loss(logp, old_logp[m], advantages[m], part.mask, loss_type=cfg.loss_type,
                                      epsilon_low=cfg.epsilon_low, epsilon_high=cfg.epsilon_high,
                                      max_completion_length=cfg.max_new_tokens, num_items_in_batch=num_items,
                                      grad_accum_steps=len(micro), entropy=entropy, entropy_coef=cfg.entropy_coef)
                    val = value_loss(values, old_values[m], returns[m], part.mask, cfg.value_clip)
                    self.accelerator.backward(pol.loss + val.loss / len(micro))
                    for key, value in (("loss", pol.loss), ("value_loss", val.loss), ("clip_low_frac", pol.clip_low_frac),
                                       ("clip_high_frac", pol.clip_high_frac), ("entropy_mean", pol.entropy_mean),
                                       ("value_clip_frac", val.clip_frac), ("explained_variance", val.explained_variance)):
                        if value is not None:
                            stats.setdefault(key, []).append(float(value.detach()))
                grad_norm = self.accelerator.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
                self.accelerator.clip_grad_norm_(self.critic.parameters(), cfg.max_grad_norm)
                for opt in (self.optimizer, self.critic_optimizer):
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                self.scheduler.step()
        result = {k: sum(v) / len(v) for k, v in stats.items()}
        result["loss"] = sum(stats.get("loss", [0.0]))
        result["grad_norm"] = float(grad_norm)
        result["skipped_nonfinite"] = 0
        result["learned_rows"] = rows
        return result

    def _metrics(self, *args: Any, **kw: Any) -> dict[str, float]:
        row = super()._metrics(*args, **kw)
        learn = args[4]
        for key in ("value_loss", "value_clip_frac", "explained_variance"):
            row[key] = learn.get(key, math.nan)
        return row
