"""`GRPOTrainer`: the critic-free loop, one step readable top to bottom.

    sample B prompts → G completions each → score them through the envs (overlapping
    generation) → group-relative advantages → clipped policy loss (+ KL) → optimizer step

The formulas live in ``proctor.trainer.algo`` (matched to TRL numerically); this file
is the plumbing: models, batches, timing, the zero-signal bookkeeping and the logs.
"""

from __future__ import annotations

import copy
import json
import math
import random
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np
import torch

from proctor.envs import EnvSuite, SuiteItem, Verdict

from . import checkpoint
from .algo import group_advantages, policy_loss
from .algo.is_correction import is_weights
from .batch import TrainBatch, build_batch, token_logps
from .config import GRPOConfig
from .metrics import MetricsLog, Stopwatch, plot_run
from .multiturn import continue_turns
from .passrate import PassRateMemory
from .pipeline import RolloutPipeline
from .step_row import gather_row, step_metrics
from .rollout import Rollout, SamplingParams
from .rollout.factory import make_generator, use_sleep


@dataclass
class Scored:
    """B groups of G rollouts with their verdicts, group-contiguous."""

    items: list[SuiteItem]            # one per rollout (each prompt's item repeated G times)
    rollouts: list[Rollout]
    verdicts: list[Verdict]


class GRPOTrainer:
    def __init__(self, config: GRPOConfig, suite: EnvSuite, model: Any, tokenizer: Any) -> None:
        from accelerate import Accelerator

        self.cfg = config
        self.suite = suite
        self.tokenizer = tokenizer
        self.accelerator = Accelerator(mixed_precision=config.mixed_precision,
                                       log_with=config.report_to or None, project_dir=config.output_dir)
        # Each process draws its own prompts (data parallelism); weights start identical.
        rank = self.accelerator.process_index
        torch.manual_seed(config.seed)
        self.rng = random.Random(config.seed + 1000 * rank)
        self.np_rng = np.random.default_rng(config.seed + 1000 * rank)
        if config.gradient_checkpointing:
            model.gradient_checkpointing_enable()
        if config.lora_rank > 0:
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(model, LoraConfig(r=config.lora_rank, lora_alpha=config.lora_alpha,
                                                     target_modules="all-linear", task_type="CAUSAL_LM"))
        # β = 0 loads no reference model; with LoRA the base (adapters off) is the reference.
        self.ref_model = None
        if config.beta > 0 and config.lora_rank == 0:
            self.ref_model = copy.deepcopy(model).eval().requires_grad_(False)
        params = [p for p in model.parameters() if p.requires_grad]
        try:   # the fused kernel: several times faster per step on CPU and GPU alike
            optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay, fused=True)
        except (RuntimeError, TypeError):
            optimizer = torch.optim.AdamW(params, lr=config.learning_rate, weight_decay=config.weight_decay)
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda s: min(1.0, (s + 1) / config.warmup_steps) if config.warmup_steps else 1.0)
        self.model, self.optimizer, self.scheduler = self.accelerator.prepare(model, optimizer, scheduler)
        if self.ref_model is not None:
            self.ref_model.to(self.accelerator.device)
        learner = self.accelerator.unwrap_model(self.model)
        run_dir = Path(config.output_dir if self.accelerator.is_main_process else f"{config.output_dir}/rank{rank}")
        self.generator, self._close_generator = make_generator(config, learner, tokenizer, run_dir, self.accelerator)
        self.sleeping = use_sleep(config)   # colocated on a GPU: the engine frees its memory for the update
        self.sampling = SamplingParams(n=config.group_size, temperature=config.temperature, top_p=config.top_p,
                                       top_k=config.top_k, max_new_tokens=config.max_new_tokens)
        self.memory = PassRateMemory(config.group_size, skip_threshold=config.skip_threshold)
        if config.report_to:
            # Trackers take scalars only: nested settings (the env suite) go in as JSON text.
            hparams = {k: v if isinstance(v, (int, float, str, bool)) else json.dumps(v)
                       for k, v in config.to_dict().items()}
            self.accelerator.init_trackers("proctor-grpo", config=hparams)
        self.is_main = self.accelerator.is_main_process
        # A resumed run keeps its earlier rows (trimmed to the checkpoint in resume()).
        earlier = checkpoint.read_metrics(run_dir / "metrics.jsonl") if config.resume_from else None
        self.log = MetricsLog(run_dir, trackers=self.accelerator if (config.report_to and self.is_main) else None,
                              keep_rows=earlier)
        self.totals = {"tokens_generated": 0, "tokens_learned": 0, "tokens_zero_signal": 0}
        self._scorer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="proctor-score")
        self.start_step = 0
        self.nonfinite_streak = 0
        mode = config.is_correction
        if mode == "auto":
            mode = None if config.rollout_backend == "transformers" else "sequence_mask"
        self.is_mode = None if mode in (None, "off") else mode
        self.pipeline: Optional[RolloutPipeline] = None
        self.pending_batches: list = []
        if config.resume_from:
            self.resume(config.resume_from)
        if config.async_generation:
            self.pipeline = RolloutPipeline(self, config.max_staleness, config.vllm_sync_every,
                                            policy_step=self.start_step, pending=self.pending_batches)

    # ================================================================== one step
    def step(self, step: int) -> dict[str, float]:
        cfg, watch = self.cfg, Stopwatch()
        t_step = time.perf_counter()

        # 1-3. B prompts → G completions each → verdicts (scoring overlaps generation);
        # async: the batch generated while the last update ran, at most max_staleness behind
        lags: Optional[list[int]] = None
        if self.pipeline is not None:
            scored, lags = self.pipeline.take(step - 1, watch)
        else:
            scored = self.rollout(self.draw_prompts(cfg.prompts_per_step), watch)
        rounds = 0
        # DAPO dynamic sampling: replace zero-signal groups with fresh prompts, a bounded number of times.
        while cfg.dynamic_sampling and rounds < cfg.max_resample_rounds:
            keep = self._groups_with_signal(scored)
            missing = cfg.prompts_per_step - sum(keep)
            if missing == 0:
                break
            more = self.draw_prompts(missing)
            fresh = (self.pipeline.run(lambda: self.rollout(more, watch)) if self.pipeline is not None
                     else self.rollout(more, watch))
            scored = self._merge(self._keep_groups(scored, keep), fresh)
            rounds += 1

        # 4. group-relative advantages; unjudged samples are excluded and get A = 0
        rewards = torch.tensor([v.reward if v.scored else math.nan for v in scored.verdicts])
        valid = torch.tensor([v.scored for v in scored.verdicts])
        adv = group_advantages(rewards, cfg.group_size, scale=cfg.scale_rewards, valid=valid)
        for g in range(len(scored.rollouts) // cfg.group_size):
            group = slice(g * cfg.group_size, (g + 1) * cfg.group_size)
            self.memory.update(scored.items[group.start].task.id,
                               [v.correct for v in scored.verdicts[group] if v.scored], step)

        # 5. the policy update: μ passes of clipped-ratio loss (+ β·KL) over micro-batches
        batch = build_batch(scored.rollouts, adv.advantages.tolist(), valid.tolist(), self.tokenizer.pad_token_id,
                            mask_truncated=cfg.mask_truncated, device=self.accelerator.device)
        if self.sleeping:
            self.generator.sleep()   # the engine's KV cache and weights leave the GPU for the update
        learn = self.learn(batch, watch)
        with watch.section("sync"):   # the engine samples from the new weights from now on
            if self.pipeline is not None:
                self.pipeline.sync(step)
            elif self.sleeping:
                self.generator.sync_and_wake()
            else:
                self.generator.sync_weights()

        # 6. what happened, per step
        return self._metrics(step, scored, adv, batch, learn, watch, rounds, time.perf_counter() - t_step, lags)

    # ================================================================== the parts
    def draw_prompts(self, n: int) -> list[SuiteItem]:
        """n tasks from the suite; with pass-rate memory, prompts predicted zero-signal are skipped."""
        items: list[SuiteItem] = []
        tries = 0
        while len(items) < n:
            item = self.suite.sample(1, self.np_rng)[0]
            tries += 1
            if (self.cfg.skip_predicted_zero_signal and tries < 50 * n
                    and self.memory.should_skip(item.task.id, self.rng)):
                self.memory.note_skip(self.cfg.group_size * self._mean_completion_tokens())
                continue
            items.append(item)
        return items

    def rollout(self, items: Sequence[SuiteItem], watch: Stopwatch) -> Scored:
        """Generate in chunks; each finished chunk is scored in a thread while the next generates."""
        prompts = [self._tokenize(item) for item in items]
        per_chunk = max(1, self.cfg.generation_batch_size // self.cfg.group_size)
        pending: list[tuple[list[SuiteItem], list[Rollout], Future]] = []
        for start in range(0, len(items), per_chunk):
            chunk_items = list(items[start:start + per_chunk])
            with watch.section("generate"):
                groups = self.generator.generate(prompts[start:start + per_chunk], self.sampling)
            flat_items = [it for it in chunk_items for _ in range(self.cfg.group_size)]
            flat = [r for g in groups for r in g]
            if self.cfg.overlap_scoring:
                future = self._scorer.submit(self._score, flat_items, flat, watch)
            else:   # score only once everything is generated (the baseline the overlap is measured against)
                future = Future()
                future.set_result(None)
            pending.append((flat_items, flat, future))
        items_out, rollouts, verdicts = [], [], []
        with watch.section("score_exposed"):   # scoring time that generation did not hide
            for flat_items, flat, future in pending:
                items_out += flat_items
                rollouts += flat
                verdicts += future.result() if self.cfg.overlap_scoring else self._score(flat_items, flat, watch)
        if any(env.max_turns > 1 for env in self.suite.envs.values()):
            with watch.section("later_turns"):
                rollouts, verdicts, turns = continue_turns(
                    self.suite, self.generator, self.tokenizer, self.sampling, items_out, rollouts, verdicts,
                    lambda its, rs: self._score(its, rs, watch))
            self._turns = turns
        return Scored(items_out, rollouts, verdicts)

    def _score(self, items: list[SuiteItem], rollouts: list[Rollout], watch: Stopwatch) -> list[Verdict]:
        with watch.section("score"):
            return self.suite.score_batch(items, [r.text for r in rollouts])

    def learn(self, batch: TrainBatch, watch: Stopwatch) -> dict[str, float]:
        cfg = self.cfg
        # dapo normalises by the tokens of the whole generation batch, over every process.
        num_items = float(self.accelerator.reduce(batch.mask.sum().detach(), reduction="sum"))
        learned_rows = len(batch)
        if self._zero_rows_are_inert():
            # A row with advantage 0 has loss and gradient exactly 0 here (dapo's normaliser
            # is the global token count above, no KL, no entropy bonus): skip its forward
            # and backward. Zero-signal groups then cost rollout tokens but no learner time.
            keep = (batch.advantages != 0) & (batch.mask.sum(-1) > 0)
            batch = batch.select(keep)
            learned_rows = len(batch)
        rows = len(batch)
        micro = [slice(i, min(i + cfg.micro_batch_size, rows)) for i in range(0, rows, cfg.micro_batch_size)]
        old_logp = ref_logp = None
        with torch.no_grad():
            if cfg.num_iterations > 1:   # π_old must stay fixed across the μ passes
                with watch.section("old_logp"):
                    old_logp = torch.cat([token_logps(self.model, batch.slice(m), cfg.temperature)[0] for m in micro])
            if cfg.beta > 0:
                with watch.section("reference"):
                    ref_logp = torch.cat([self._ref_logps(batch.slice(m)) for m in micro])
        stats: dict[str, list[float]] = {}
        skipped = 0
        grad_norm: Any = 0.0
        with watch.section("learn"):
            for _ in range(cfg.num_iterations):
                if not micro:
                    # Nothing taught this step: the update is Adam's with zero gradients, exactly
                    # what the full backward would have produced.
                    for p in self.model.parameters():
                        if p.requires_grad:
                            p.grad = torch.zeros_like(p)
                for m in micro:
                    part = batch.slice(m)
                    with self.accelerator.autocast():
                        logp, entropy = token_logps(self.model, part, cfg.temperature, with_entropy=True)
                    if _ == 0:
                        self._sampler_mismatch(logp.detach(), part, stats)
                    is_w = None
                    if self.is_mode is not None:
                        pi_old = logp.detach() if old_logp is None else old_logp[m]
                        is_w = is_weights(pi_old, part.sampler_logp, part.mask, self.is_mode, c_max=cfg.is_cap)
                        if part.mask.any():
                            stats.setdefault("is_weight_mean", []).append(float(is_w[part.mask > 0].mean()))
                    out = policy_loss(
                        logp, None if old_logp is None else old_logp[m], part.advantages, part.mask,
                        loss_type=cfg.loss_type, importance_level=cfg.importance_level,
                        epsilon_low=cfg.epsilon_low, epsilon_high=cfg.epsilon_high, delta=cfg.delta,
                        beta=cfg.beta, ref_logp=None if ref_logp is None else ref_logp[m], kl_kind=cfg.kl_kind,
                        max_completion_length=cfg.max_new_tokens, num_items_in_batch=num_items,
                        num_processes=self.accelerator.num_processes,
                        grad_accum_steps=len(micro), entropy=entropy, entropy_coef=cfg.entropy_coef,
                        is_weight=is_w)
                    self.accelerator.backward(out.loss)
                    for key in ("loss", "clip_low_frac", "clip_high_frac", "kl_mean", "entropy_mean", "ratio_mean"):
                        value = getattr(out, key)
                        if value is not None:
                            stats.setdefault(key, []).append(float(value.detach()))
                grad_norm = self.accelerator.clip_grad_norm_(self.model.parameters(), cfg.max_grad_norm)
                loss_sum = sum(stats.get("loss", [0.0])[-len(micro):])
                if not (math.isfinite(float(grad_norm)) and math.isfinite(loss_sum)):
                    # A NaN/inf update would poison the weights for good: drop it and say so.
                    self.optimizer.zero_grad(set_to_none=True)
                    self.nonfinite_streak += 1
                    skipped += 1
                    self.log.console.print(f"[yellow]warning:[/yellow] non-finite loss ({loss_sum}) or gradient "
                                           f"norm ({float(grad_norm)}): update skipped "
                                           f"({self.nonfinite_streak} in a row)")
                    continue
                self.nonfinite_streak = 0
                self.optimizer.step()
                self.scheduler.step()
                self.optimizer.zero_grad(set_to_none=True)
        result = {k: sum(v) / len(v) for k, v in stats.items()}
        result["loss"] = sum(stats.get("loss", [0.0]))   # the per-micro losses add up to the step's loss
        result["grad_norm"] = float(grad_norm)
        result["skipped_nonfinite"] = skipped
        result["learned_rows"] = learned_rows
        return result

    @staticmethod
    def _sampler_mismatch(logp: torch.Tensor, part: TrainBatch, stats: dict[str, list[float]]) -> None:
        """How far the sampler's log-probs are from the learner's on the same tokens (vLLM vs
        transformers kernels, precision): the importance ratio π_learner/π_sampler per token."""
        mask = part.mask > 0
        if not mask.any():
            return
        diff = (logp - part.sampler_logp)[mask]
        ratio = diff.exp()
        for key, value in (("sampler_logp_diff_mean", diff.abs().mean()), ("sampler_logp_diff_max", diff.abs().max()),
                           ("sampler_ratio_min", ratio.min()), ("sampler_ratio_mean", ratio.mean()),
                           ("sampler_ratio_max", ratio.max())):
            stats.setdefault(key, []).append(float(value))

    def _zero_rows_are_inert(self) -> bool:
        cfg = self.cfg
        # Several processes must run the same number of backward passes (DDP all-reduces in
        # them), so rows are only skipped when one process trains alone.
        return (cfg.loss_type == "dapo" and cfg.beta == 0 and cfg.entropy_coef == 0
                and self.accelerator.num_processes == 1)

    def _ref_logps(self, part: TrainBatch) -> torch.Tensor:
        if self.ref_model is not None:
            return token_logps(self.ref_model, part, self.cfg.temperature)[0]
        with self.accelerator.unwrap_model(self.model).disable_adapter():   # LoRA: the base is the reference
            return token_logps(self.model, part, self.cfg.temperature)[0]

    # ================================================================== helpers
    def _tokenize(self, item: SuiteItem) -> list[int]:
        prompt = self.suite.prompt_of(item)
        if isinstance(prompt, str):
            return self.tokenizer(prompt, add_special_tokens=True)["input_ids"]
        ids = self.tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)
        return list(ids["input_ids"] if hasattr(ids, "keys") else ids)

    def _groups_with_signal(self, scored: Scored) -> list[bool]:
        g = self.cfg.group_size
        keep = []
        for start in range(0, len(scored.verdicts), g):
            rewards = [v.reward for v in scored.verdicts[start:start + g] if v.scored]
            keep.append(len(rewards) >= 2 and max(rewards) - min(rewards) > 1e-6)
        return keep

    def _keep_groups(self, scored: Scored, keep: list[bool]) -> Scored:
        g = self.cfg.group_size
        idx = [i for i in range(len(scored.rollouts)) if keep[i // g]]
        return Scored([scored.items[i] for i in idx], [scored.rollouts[i] for i in idx],
                      [scored.verdicts[i] for i in idx])

    @staticmethod
    def _merge(a: Scored, b: Scored) -> Scored:
        return Scored(a.items + b.items, a.rollouts + b.rollouts, a.verdicts + b.verdicts)

    def _mean_completion_tokens(self) -> int:
        rows = self.log.rows[-5:]
        lens = [r["completion_len_mean"] for r in rows if r.get("completion_len_mean")]
        return int(sum(lens) / len(lens)) if lens else self.cfg.max_new_tokens

    def _metrics(self, step: int, scored: Scored, adv: Any, batch: TrainBatch, learn: dict[str, float],
                 watch: Stopwatch, rounds: int, step_s: float, lags: Optional[list[int]] = None) -> dict[str, Any]:
        return step_metrics(self, step, scored, adv, learn, watch, rounds, step_s, lags)

    def resume(self, where: str) -> None:
        path = checkpoint.latest_checkpoint(self.cfg.output_dir) if where == "latest" else Path(where)
        if path is None:
            raise FileNotFoundError(f"resume_from=latest: no checkpoint under {self.cfg.output_dir}/checkpoints")
        self.start_step = checkpoint.load(self, path)
        self.log.rows = [r for r in self.log.rows if r.get("step", 0) <= self.start_step]
        self.log.path.write_text("".join(json.dumps(r) + "\n" for r in self.log.rows))
        self.log.console.print(f"resumed from {path} after step {self.start_step}")

    def save_model(self, path: Path) -> None:
        """The trained weights as safetensors with the tokenizer: loadable with from_pretrained."""
        self.accelerator.wait_for_everyone()
        if self.is_main:
            self.accelerator.unwrap_model(self.model).save_pretrained(path, safe_serialization=True)
            self.tokenizer.save_pretrained(path)

    def _gather(self, row: dict[str, Any]) -> dict[str, Any]:
        return gather_row(self.accelerator, row)

    # ================================================================== the run
    def train(self) -> list[dict[str, Any]]:
        try:
            return self._train()
        finally:
            if self.pipeline is not None:
                self.pipeline.close()
            self._close_generator()

    def _train(self) -> list[dict[str, Any]]:
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        cfg = self.cfg
        with Progress(TextColumn("[bold]GRPO"), BarColumn(), TextColumn("step {task.completed}/{task.total}"),
                      TextColumn("{task.fields[info]}"), TimeRemainingColumn(), console=self.log.console) as bar:
            task = bar.add_task("train", total=cfg.max_steps, info="", completed=self.start_step)
            for step in range(self.start_step + 1, cfg.max_steps + 1):
                row = self._gather(self.step(step))
                if self.nonfinite_streak >= cfg.max_nonfinite_steps:
                    path = checkpoint.save(self, step)
                    raise RuntimeError(
                        f"{self.nonfinite_streak} steps in a row had a non-finite loss or gradient; stopped at step "
                        f"{step} with a checkpoint in {path}. Lower learning_rate, check the rewards for NaN, or "
                        "try mixed_precision: no; resume with resume_from.")
                if cfg.save_every and step % cfg.save_every == 0 and step < cfg.max_steps:
                    checkpoint.save(self, step)
                if not self.is_main:
                    continue
                self.log.log(row)
                bar.update(task, advance=1, info=f"reward {row['reward_mean']:.3f}  zero-signal "
                                                  f"{row['zero_signal_frac']:.2f}")
                if step % cfg.log_every == 0:
                    self.log.print_step()
        checkpoint.save(self, cfg.max_steps)
        self.save_model(Path(cfg.output_dir) / "model")
        self.plots = plot_run(cfg.output_dir) if self.is_main else []
        if self.is_main:
            self.log.print_summary()
        if cfg.report_to:
            self.accelerator.end_training()
        self._scorer.shutdown(wait=True)
        return self.log.rows
