"""A training run, whatever the algorithm: the loop, the token ledger's totals, the state
and checkpoints, evaluation, the saved model and the close.

GRPO and PPO (``grpo.py``, ``ppo.py``) are subclasses that keep only their own step (and
the state only they have); everything else about a run is here, once:

    trainer = GRPOTrainer(cfg, suite, model, tokenizer, eval_suite)   # builds the parts, resumes
    trainer.train()      # evaluate before step 1; step, checkpoint, evaluate, log; save; plot

Every decision that changes control flow is taken once for all processes, or one would wait
in a collective forever: a step's update is skipped on the whole step's infra fraction
(``InfraGuard`` sums every process's counts), so the streaks that stop the run are equal
everywhere; evaluation and checkpoints follow the step schedule, and every process evaluates
its share of the eval set. (Dynamic sampling's rounds are decided together in ``grpo.py``.)
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any, Callable, Optional

from proctor.envs import EnvSuite, SuiteItem

from . import checkpoint
from .config import RunConfig
from .consensus import Consensus
from .evaluation import describe, is_due
from .learn.learner import Learner
from .metrics import plot_run
from .parts import RunParts, build_parts
from .learn.placement import fsdp_on_cpu, full_state_dict
from .records import Ledger, Scored
from .rollout.weights import is_zero3
from .sampling import InfraGuard
from .step_row import gather_row, sample_rows, step_ledger, with_eval_tokens


class Run:
    """The run around an algorithm's ``step``; subclasses set ``algorithm`` and ``title``, build
    their learner after :meth:`_build`, then call :meth:`_resume_if_asked`."""

    algorithm = "grpo"      # its name in trackers and rows
    title = "GRPO"          # the progress bar's
    learner: Learner
    infra: InfraGuard

    # ================================================================== building
    def _build(self, config: RunConfig, suite: EnvSuite, model: Any, tokenizer: Any,
               eval_suite: Optional[EnvSuite]) -> RunParts:
        self.cfg, self.suite, self.tokenizer = config, suite, tokenizer
        self.parts = p = build_parts(config, suite, model, tokenizer, eval_suite, self.algorithm)
        self.accelerator, self.generator, self.ref_model = p.accelerator, p.generator, p.ref_model
        self.model, self.optimizer, self.scheduler = p.policy.model, p.policy.optimizer, p.policy.scheduler
        self.agree = Consensus.of(p.accelerator)     # control-flow decisions, taken by every process together
        self.totals = Ledger()                       # the run's token ledger
        self.plots: list[Path] = []
        self.start_step = 0
        return p

    def _guard(self, warn: Callable[[str], None]) -> None:
        self.infra = InfraGuard(self.cfg.optim.max_infra_frac, warn, total=self.agree.sum)

    def _resume_if_asked(self) -> None:
        if self.cfg.checkpoint.resume_from:
            self.resume(self.cfg.checkpoint.resume_from)

    # ================================================================== the algorithm's
    def step(self, step: int) -> dict[str, Any]:
        """One optimizer step (rollouts, update, sync) and its row."""
        raise NotImplementedError

    def _own_state(self, step: int) -> dict[str, Any]:
        """What only this algorithm must save beside the run's state."""
        return {}

    def _load_own_state(self, state: dict[str, Any]) -> None:
        """Restore :meth:`_own_state`'s part of ``state``."""

    def _on_engine(self, fn: Callable[[], dict[str, float]]) -> dict[str, float]:
        """``fn()`` where generation runs (async GRPO: on the engine's thread, in order)."""
        return fn()

    def close(self) -> None:
        """Stop the scorers' threads and the rollout engine."""
        self.parts.rollouts.close()
        self.parts.engine.close()

    # ================================================================== parts for steps and callers
    def draw_prompts(self, n: int) -> list[SuiteItem]:
        """n tasks from the suite, through the drawer's selection (memory, frontier, probe)."""
        return self.parts.drawer.draw(n)

    def _ledger(self, step: int, scored: Scored, weights: list[float], dropped: Optional[Scored],
                learn: dict[str, float]) -> Ledger:
        """The step's token ledger (``weights``: each sample's advantage, 0 = taught nothing),
        added to the run's totals; the step's samples go to samples.jsonl."""
        taken = not learn.get("skipped_infra") and learn["skipped_nonfinite"] < self.cfg.objective.num_iterations
        skipped = self.parts.drawer.memory.tokens_saved - self.totals.skipped_estimate   # since the last row
        ledger = step_ledger(scored, weights, dropped, taken, skipped)
        self.totals = self.totals + ledger
        self.parts.log.samples(sample_rows(step, scored, self.cfg.log.sample_completions))
        return ledger

    def evaluate(self) -> dict[str, float]:
        """The eval_* values under the current weights ({} when eval.every is 0); every process
        evaluates its share and gets the whole's values."""
        if self.parts.evaluate is None:
            return {}
        values, self.totals = with_eval_tokens(self._on_engine(self.parts.evaluate), self.totals, self.agree.sum)
        return values

    # ================================================================== state
    def state_dict(self, step: int) -> dict[str, Any]:
        """This process's state after ``step``, as plain data (weights, optimizer, scheduler and RNGs are
        saved beside it: ``checkpoint.save_training``)."""
        return {"step": step, "drawer": self.parts.drawer.state_dict(), "totals": asdict(self.totals),
                "weight_version": self.generator.weight_version, "config": self.cfg.to_dict(),
                **self._own_state(step)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        self.start_step = int(state["step"])
        self.parts.drawer.load_state_dict(state["drawer"])
        self.totals = Ledger.from_state(state["totals"])
        # The engine holds the initial weights: give it the restored ones (never resume stale).
        self.generator.restore(state["weight_version"])
        self._load_own_state(state)

    def save_checkpoint(self, step: int) -> Path:
        """Weights, optimizer, scheduler and RNGs (as plain data, or through accelerate under
        DeepSpeed: ``checkpoint.save_training``), then each process's own state; rank 0's file goes
        last and marks the checkpoint complete. Only the newest ``checkpoint.save_total_limit``
        checkpoints stay."""
        path = checkpoint.checkpoint_dir(self.cfg.output_dir, step)
        acc, policy = self.accelerator, self.parts.policy
        state = self.state_dict(step)
        checkpoint.save_training(path, acc, self.learner.trainables, sharded=fsdp_on_cpu(acc))
        if fsdp_on_cpu(acc):
            checkpoint.save_sharded(path, policy.model, policy.optimizer)
        if acc.process_index != 0:
            checkpoint.save(path, state, acc.process_index)
        acc.wait_for_everyone()
        if acc.process_index == 0:
            checkpoint.save(path, state, 0)
            checkpoint.prune(self.cfg.output_dir, self.cfg.checkpoint.save_total_limit)
        acc.wait_for_everyone()
        return path

    def resume(self, where: str) -> Path:
        """Load the checkpoint ``where`` (a directory, or "latest") into the prepared objects and
        this run's state; metrics.jsonl is cut back to its step."""
        out = self.cfg.output_dir
        path = checkpoint.latest_checkpoint(out) if where == "latest" else Path(where)
        if path is None:
            raise FileNotFoundError(f"checkpoint.resume_from=latest: no checkpoint under {out}/checkpoints")
        state = checkpoint.load(path, self.accelerator.process_index)
        checkpoint.load_training(path, self.accelerator, self.learner.trainables, sharded=fsdp_on_cpu(self.accelerator))
        if fsdp_on_cpu(self.accelerator):
            checkpoint.load_sharded(path, self.parts.policy.model, self.parts.policy.optimizer)
        self.load_state_dict(state)
        self.parts.log.truncate_after(self.start_step)
        self.parts.log.console.print(f"resumed from {path} after step {self.start_step}")
        return path

    def save_model(self, path: Path) -> None:
        """The trained weights as safetensors with the tokenizer: loadable with from_pretrained."""
        acc, model = self.accelerator, self.parts.policy.model
        acc.wait_for_everyone()
        state = None
        if fsdp_on_cpu(acc):
            state = full_state_dict(model)
        elif is_zero3():   # the engine's full weights, gathered on rank 0 (every process joins)
            state = acc.get_state_dict(model)
        if acc.is_main_process:
            acc.unwrap_model(model).save_pretrained(path, state_dict=state, safe_serialization=True)
            self.tokenizer.save_pretrained(path)

    # ================================================================== the loop
    def train(self) -> list[dict[str, Any]]:
        """Steps ``start_step + 1 .. max_steps`` with a progress bar; the rows of the run."""
        try:
            return self._loop()
        finally:
            self.close()

    def _loop(self) -> list[dict[str, Any]]:
        from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

        cfg, log, is_main = self.cfg, self.parts.log, self.accelerator.is_main_process
        with Progress(TextColumn(f"[bold]{self.title}"), BarColumn(), TextColumn("step {task.completed}/{task.total}"),
                      TextColumn("{task.fields[info]}"), TimeRemainingColumn(), console=log.console) as bar:
            task = bar.add_task("train", total=cfg.max_steps, info="", completed=self.start_step)
            if self.start_step == 0 and is_due(0, cfg.eval.every, cfg.max_steps):
                values = self._evaluate_and_show()   # the weights before any update
                if is_main:
                    log.log({"step": 0, **values})
            for step in range(self.start_step + 1, cfg.max_steps + 1):
                row = gather_row(self.accelerator, self.step(step))
                self._stop_on_streaks(step)
                every = cfg.checkpoint.save_every
                if every and step % every == 0 and step < cfg.max_steps:
                    self.save_checkpoint(step)
                if is_due(step, cfg.eval.every, cfg.max_steps):
                    row.update(self._evaluate_and_show())
                if not is_main:
                    continue
                log.log(row)
                bar.update(task, advance=1, info=f"reward {row['reward_mean']:.3f}  zero-signal "
                                                  f"{row['zero_signal_frac']:.2f}")
                if step % cfg.log.log_every == 0:
                    log.print_step()
        self.save_checkpoint(cfg.max_steps)
        self.save_model(Path(cfg.output_dir) / "model")
        self.plots = plot_run(cfg.output_dir) if is_main else []
        if is_main:
            log.print_summary()
        if cfg.log.report_to:
            self.accelerator.end_training()
        return log.rows

    def _stop_on_streaks(self, step: int) -> None:
        """Stop with a checkpoint after too many non-finite or unjudged steps in a row."""
        cfg = self.cfg
        if self.learner.nonfinite_streak >= cfg.optim.max_nonfinite_steps:
            path = self.save_checkpoint(step)
            raise RuntimeError(
                f"{self.learner.nonfinite_streak} steps in a row had a non-finite loss or gradient; stopped at step "
                f"{step} with a checkpoint in {path}. Lower optim.learning_rate, check the rewards for NaN, or "
                "try optim.mixed_precision: no; resume with checkpoint.resume_from.")
        if self.infra.streak >= cfg.optim.max_infra_steps:
            path = self.save_checkpoint(step)
            raise RuntimeError(
                f"{self.infra.streak} steps in a row had more than {cfg.optim.max_infra_frac:.0%} of their "
                f"completions not judged (infra_error); stopped at step {step} with a checkpoint in {path}. "
                "Check the sandbox hosts (`proctor doctor`) or the scorer named in the warnings above, then "
                "resume with checkpoint.resume_from.")

    def _evaluate_and_show(self) -> dict[str, float]:
        values = self.evaluate()
        if self.accelerator.is_main_process:
            self.parts.log.console.print(describe(values), highlight=False)
        return values


__all__ = ["Run"]
