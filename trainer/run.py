"""What every trainer (GRPO, PPO) is built from, and the loop that drives one.

``build_parts`` assembles, from a config and the objects a run starts with, the
accelerator, the prepared policy (and reference), the rollout backend, the prompt
drawer, the rollout runner and the metrics log: plain parts, no trainer object.
``train_loop`` runs steps, checkpoints, logs and stops on a non-finite streak; it
knows a trainer only through the ``LoopTrainer`` protocol.
"""

from __future__ import annotations

import copy
import functools
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional, Protocol

import torch

from proctor.envs import EnvSuite, SuiteItem
from proctor.envs.core.difficulty import check_knob

from . import checkpoint
from .config import GRPOConfig, flat_view
from .evaluation import EvalSettings, Share, describe, eval_items, evaluate, is_due
from .learner import Learner, Trainable, disable_dropout
from .metrics import MetricsLog, plot_run, read_metrics
from .multiturn import continue_turns
from .passrate import PassRateMemory
from .probe import AnswerProbe, answer_reference
from .selection import Frontier, SelectionRules
from .rollout import Generator, SamplingParams
from .rollout.factory import make_generator, run_sampling
from .rollout.weights import is_peft, is_sharded, is_zero3
from .sampling import EpochOrder, InfraGuard, PromptDrawer, PromptLimit, RolloutRunner
from .step_row import gather_row


@dataclass
class RunParts:
    """The pieces a trainer is made of (GRPO and PPO alike)."""

    accelerator: Any
    policy: Trainable
    ref_model: Optional[torch.nn.Module]
    generator: Generator
    stop_generator: Callable[[], None]
    sampling: SamplingParams
    drawer: PromptDrawer
    rollouts: RolloutRunner
    log: MetricsLog
    run_dir: Path
    # The eval_* values under the current weights (eval.every > 0), else None
    evaluate: Optional[Callable[[], dict[str, float]]] = None
    # The policy is sharded over several processes (FSDP, ZeRO-3): each of its forwards is a collective
    sharded: bool = False


def build_parts(cfg: GRPOConfig, suite: EnvSuite, model: Any, tokenizer: Any,
                eval_suite: Optional[EnvSuite] = None) -> RunParts:
    from accelerate import Accelerator

    accelerator = Accelerator(mixed_precision=cfg.optim.mixed_precision, log_with=cfg.log.report_to or None,
                              project_dir=cfg.output_dir, kwargs_handlers=process_group_kwargs())
    rank = accelerator.process_index
    torch.manual_seed(cfg.seed)
    policy, ref_model = _prepare_policy(cfg, model, accelerator)
    learner_model = accelerator.unwrap_model(policy.model)
    run_dir = Path(cfg.output_dir if accelerator.is_main_process else f"{cfg.output_dir}/rank{rank}")
    r = cfg.rollout
    generator, stop = make_generator(r, learner_model, tokenizer, run_dir, seed=cfg.seed,
                                     lora_rank=cfg.optim.lora_rank, accelerator=accelerator)
    sampling = run_sampling(r)
    # Each process draws its own prompts (data parallelism); weights start identical.
    rules = selection_rules(cfg)
    memory = PassRateMemory(r.group_size, skip_threshold=rules.skip_threshold, retry_prob=rules.explore,
                            skip_after=rules.skip_after)
    epochs = (EpochOrder(suite, cfg.data.shuffle, cfg.seed, rank, accelerator.num_processes)
              if cfg.data.order == "epochs" else None)
    template = cfg.data.chat_template_kwargs
    prompt_ids = functools.partial(tokenize, suite, tokenizer, chat_template_kwargs=template)
    drawer = PromptDrawer(suite.sample, cfg.seed + 1000 * rank, memory, rules, r.max_new_tokens, epochs,
                          build_frontier(cfg, suite, rules),
                          build_probe(cfg, suite, learner_model, tokenizer, prompt_ids))
    more_turns = (functools.partial(continue_turns, suite, generator, tokenizer, sampling,
                                    chat_template_kwargs=template)
                  if any(env.max_turns > 1 for env in suite.envs.values()) else None)
    # a dropped prompt's replacement is not probed: one probe pass per step keeps processes in step
    limit = PromptLimit(cfg.data.max_prompt_length, cfg.data.prompt_overflow,
                        functools.partial(drawer.draw, probe=False))
    runner = RolloutRunner(generator, prompt_ids, suite.score_batch, sampling, r.generation_batch_size, r.overlap_scoring, more_turns, limit)
    if cfg.log.report_to:   # trackers take scalars only: nested values (the env suite) go in as JSON text
        accelerator.init_trackers("proctor-grpo", config={
            k: v if isinstance(v, (int, float, str, bool)) else json.dumps(v) for k, v in flat_view(cfg).items()})
    earlier = read_metrics(run_dir) if cfg.checkpoint.resume_from else None
    log = MetricsLog(run_dir, trackers=accelerator if (cfg.log.report_to and accelerator.is_main_process) else None,
                     keep_rows=earlier)
    sharded = accelerator.num_processes > 1 and is_sharded(policy.model)
    return RunParts(accelerator, policy, ref_model, generator, stop, sampling, drawer, runner, log, run_dir,
                    _evaluator(cfg, eval_suite, generator, tokenizer, sampling, accelerator), sharded)


def selection_rules(cfg: GRPOConfig) -> SelectionRules:
    d = cfg.data
    return SelectionRules(cfg.rollout.group_size, skip=d.skip_predicted_zero_signal, skip_threshold=d.skip_threshold,
                          skip_after=d.skip_after, explore=d.skip_explore, band=d.target_pass_rate,
                          probe_pool=d.probe_pool)


def build_probe(cfg: GRPOConfig, suite: EnvSuite, model: torch.nn.Module, tokenizer: Any,
                prompt_ids: Callable[[SuiteItem], list[int]]) -> Optional[AnswerProbe]:
    """The answer probe over the learner's model (None unless ``data.answer_probe``); an error
    when no env's tasks carry a gold answer to score."""
    d = cfg.data
    if not d.answer_probe:
        return None
    answered = [name for name, env in suite.envs.items() if len(env.source) and env.source[0].answer is not None]
    if not answered:
        raise ValueError(f"data.answer_probe scores each task's gold answer, but no env in data.envs "
                         f"({', '.join(suite.envs)}) has tasks with an answer: turn the probe off, or use "
                         "data.target_pass_rate with a difficulty knob / data.skip_predicted_zero_signal")
    return AnswerProbe(model, tokenizer, prompt_ids, answer_reference(d.answer_template),
                       cfg.rollout.temperature, cfg.rollout.generation_batch_size)


def build_frontier(cfg: GRPOConfig, suite: EnvSuite, rules: SelectionRules) -> Optional[Frontier]:
    """The frontier over the envs that get adaptive difficulty (None when ``data.target_pass_rate`` is unset)."""
    d = cfg.data
    if rules.band is None:
        return None
    knobs = {name: env.difficulty for name, env in suite.envs.items() if env.difficulty is not None}
    if d.order == "epochs":
        raise ValueError("data.target_pass_rate draws prompts at the difficulty frontier, data.order: epochs draws "
                         "every task once per epoch: use order: random with the band, or remove the band")
    chosen = list(knobs) if d.difficulty_envs is None else d.difficulty_envs
    for name in chosen:
        if name not in knobs:
            spec = d.envs.get(name, {}).get("id", "?")
            raise ValueError(f"data.difficulty_envs names {name!r}, whose env ({spec}) declares no difficulty knob: "
                             "remove it from difficulty_envs, or give the env a DifficultyKnob "
                             "(proctor.envs.DifficultyKnob; see docs/environments.md, 'Difficulty as a knob')")
    if not chosen and d.answer_probe:
        return None   # the band is the probe's alone
    if not chosen:
        raise ValueError(f"data.target_pass_rate is set but no env in data.envs ({', '.join(d.envs)}) declares a "
                         "difficulty knob: remove the band (use data.skip_predicted_zero_signal for envs without "
                         "one), or add an env with a knob (e.g. proctor/Arithmetic-v0)")
    for name in chosen:
        problem = check_knob(knobs[name], suite.envs[name].source)
        if problem:
            raise ValueError(f"data.envs.{name}: {problem}")
    return Frontier({name: (suite.envs[name].source, knobs[name]) for name in chosen}, rules)


def _evaluator(cfg: GRPOConfig, eval_suite: Optional[EnvSuite], generator: Generator, tokenizer: Any,
               sampling: SamplingParams, accelerator: Any) -> Optional[Callable[[], dict[str, float]]]:
    """Every process evaluates its share of the eval set (gathered: each gets the same values)."""

    if cfg.eval.every == 0:
        return None
    if eval_suite is None:
        raise ValueError(f"eval.every is {cfg.eval.every} but the trainer was given no eval suite: build it with "
                         "proctor.trainer.build.build_trainer(cfg), or pass eval_suite=build_eval_suite(cfg)")
    prompt_ids = functools.partial(tokenize, eval_suite, tokenizer, chat_template_kwargs=cfg.data.chat_template_kwargs)
    share = Share(accelerator.process_index, accelerator.num_processes, gather_each)
    run = functools.partial(evaluate, generator, prompt_ids, eval_suite, eval_items(eval_suite),
                            EvalSettings.from_config(cfg, sampling), share)
    return functools.partial(own_random_stream, run, cfg.seed + EVAL_SEED_OFFSET)


EVAL_SEED_OFFSET = 1_000_003


def gather_each(value: Any) -> list[Any]:
    """``value`` from every process, in rank order (accelerate's gather_object concatenates lists)."""
    from accelerate.utils import gather_object

    return gather_object([value])


def own_random_stream(fn: Callable[[], dict[str, float]], seed: int) -> dict[str, float]:
    """``fn()`` sampling from torch's generator seeded with ``seed``, the training stream restored after.

    Evaluation's pass@k samples would otherwise take numbers from the stream the rollouts
    sample from, so turning evaluation on would change every later rollout. Seeded the
    same each time, every evaluation samples alike (less noise between two of them).
    (vLLM engines sample from their own engine seed, which evaluation does advance.)
    """
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        return fn()


def _prepare_policy(cfg: GRPOConfig, model: Any, accelerator: Any) -> tuple[Trainable, Optional[torch.nn.Module]]:
    o = cfg.optim
    disable_dropout(model)
    if o.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    if o.lora_rank > 0:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=o.lora_rank, lora_alpha=o.lora_alpha,
                                                 target_modules="all-linear", task_type="CAUSAL_LM"))
    # β = 0 loads no reference model; with LoRA the base (adapters off) is the reference.
    ref_model = None
    if cfg.objective.beta > 0 and o.lora_rank == 0:
        ref_model = copy.deepcopy(model).eval().requires_grad_(False)
    if fsdp_on_cpu(accelerator):   # shard first: the optimizer holds the sharded parameters
        model = shard_fsdp2(model)
    optimizer = adamw([p for p in model.parameters() if p.requires_grad], o.learning_rate, o.weight_decay)
    scheduler = lr_schedule(optimizer, o.lr_scheduler, o.warmup_steps, cfg.max_steps * cfg.objective.num_iterations)
    plugin = accelerator.state.deepspeed_plugin   # None unless DeepSpeed
    if plugin is not None:
        fit_deepspeed_config(plugin.deepspeed_config, plugin.is_auto, o.micro_batch_size, o.max_grad_norm)
    if not fsdp_on_cpu(accelerator):   # sharded by hand: accelerate would checkpoint it as a plain model
        model, optimizer = accelerator.prepare(model, optimizer)
    model.eval()   # rollouts in eval mode; the learner switches to train mode for the update
    # Stepped once per optimizer step by the learner on every process (not through accelerate,
    # which would step it once per process); checkpointed with the rest.
    accelerator.register_for_checkpointing(scheduler)
    if ref_model is not None:
        ref_model.to(accelerator.device)
    return Trainable(model, optimizer, scheduler), ref_model


def process_group_kwargs() -> list:
    """DeepSpeed on CPU processes (no accelerator device): accelerate 1.15 finds no backend
    there and would count every process as rank 0 of 1; gloo, named, gives it the real world."""
    from accelerate.utils import InitProcessGroupKwargs

    deepspeed = os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true"
    return [InitProcessGroupKwargs(backend="gloo")] if deepspeed and not torch.cuda.is_available() else []


def fit_deepspeed_config(ds: dict, is_auto: Callable[[str], bool], micro_batch_size: int,
                         max_grad_norm: float) -> None:
    """The DeepSpeed config, made to agree with the learner, which accumulates micro-batches
    itself (the engine must not divide the loss again) and has no dataloader for accelerate
    to read the micro-batch size off; the engine clips, at ``optim.max_grad_norm``; ZeRO-3
    gathers full weights for the saved model."""
    if is_auto("train_micro_batch_size_per_gpu"):
        ds["train_micro_batch_size_per_gpu"] = micro_batch_size
    if is_auto("gradient_clipping"):
        ds["gradient_clipping"] = max_grad_norm
    accumulation = ds.get("gradient_accumulation_steps", 1)
    if accumulation not in (1, "auto"):
        raise ValueError(f"DeepSpeed config: gradient_accumulation_steps is {accumulation}; set it to 1 "
                         "(proctor accumulates micro-batches itself: optim.micro_batch_size)")
    zero = ds.get("zero_optimization", {})
    if zero.get("stage") == 3:
        # save_model writes full weights (loadable with from_pretrained) whatever accelerate's
        # zero3_save_16bit_model says (its default, false, would leave the saved model empty)
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    clipping = ds.get("gradient_clipping")
    if clipping not in (None, "auto") and float(clipping) != float(max_grad_norm):
        raise ValueError(f"DeepSpeed config: gradient_clipping is {clipping} but optim.max_grad_norm is "
                         f"{max_grad_norm}; DeepSpeed does the clipping, so make them equal")


def fsdp_on_cpu(accelerator: Any) -> bool:
    """FSDP was asked for (``accelerate launch`` with an FSDP config, or ACCELERATE_USE_FSDP=true)
    on CPU processes. accelerate 1.15 turns FSDP on for accelerator devices only (its state keeps
    MULTI_CPU and would wrap the model in DDP), so proctor shards with torch's FSDP2 itself."""
    from accelerate.utils import DistributedType

    return (accelerator.distributed_type == DistributedType.MULTI_CPU
            and os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true")


def shard_fsdp2(model: torch.nn.Module) -> torch.nn.Module:
    """``fully_shard`` on each transformer block (the model's ``_no_split_modules``), then the
    root, as accelerate's TRANSFORMER_BASED_WRAP does; FSDP_RESHARD_AFTER_FORWARD as there."""
    from torch.distributed.fsdp import fully_shard

    if os.environ.get("FSDP_VERSION", "2") != "2":
        raise ValueError("FSDP on CPU processes is FSDP2 only: set fsdp_version: 2 (FSDP_VERSION=2)")
    if is_peft(model):
        raise ValueError("FSDP on CPU processes shards a full model; LoRA (optim.lora_rank > 0) is not supported there")
    reshard = os.environ.get("FSDP_RESHARD_AFTER_FORWARD", "true").lower() == "true"
    blocks = set(model._no_split_modules or ())
    for module in model.modules():
        if module.__class__.__name__ in blocks:
            fully_shard(module, reshard_after_forward=reshard)
    return fully_shard(model, reshard_after_forward=reshard)


def lr_schedule(optimizer: torch.optim.Optimizer, kind: str, warmup_steps: int, total_steps: int) -> Any:
    """Linear warmup from 0 over ``warmup_steps``, then constant, linear to 0 or cosine to 0 at
    ``total_steps`` optimizer steps: transformers' schedules, as TRL and the HF Trainer use them."""
    from transformers import get_scheduler

    name = {"constant": "constant_with_warmup", "linear": "linear", "cosine": "cosine"}[kind]
    return get_scheduler(name, optimizer, num_warmup_steps=warmup_steps, num_training_steps=max(1, total_steps))


def adamw(params: list[torch.nn.Parameter], lr: float, weight_decay: float = 0.0) -> torch.optim.Optimizer:
    try:   # the fused kernel: several times faster per step on CPU and GPU alike
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)
    except (RuntimeError, TypeError):
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)


def tokenize(suite: EnvSuite, tokenizer: Any, item: SuiteItem,
             chat_template_kwargs: Optional[Mapping[str, Any]] = None) -> list[int]:
    """The prompt's token ids: plain text as is, chat messages through the chat template
    (given ``chat_template_kwargs``, e.g. ``enable_thinking``)."""
    prompt = suite.prompt_of(item)
    if isinstance(prompt, str):
        return tokenizer(prompt, add_special_tokens=True)["input_ids"]
    ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True,
                                        **dict(chat_template_kwargs or {}))
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


class LoopTrainer(Protocol):
    """What ``train_loop`` needs of a trainer."""

    def step(self, step: int) -> dict[str, Any]: ...

    def save_checkpoint(self, step: int) -> Path: ...

    def save_model(self, path: Path) -> None: ...

    def evaluate(self) -> dict[str, float]: ...

    learner: Learner        # its nonfinite_streak stops the run
    infra: InfraGuard       # its streak of steps the verifiers could not judge stops the run


def train_loop(trainer: LoopTrainer, parts: RunParts, cfg: GRPOConfig, start_step: int, title: str
               ) -> tuple[list[dict[str, Any]], list[Path]]:
    """Steps ``start_step + 1 .. max_steps`` with a progress bar; returns (rows, plots)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

    log, is_main = parts.log, parts.accelerator.is_main_process
    with Progress(TextColumn(f"[bold]{title}"), BarColumn(), TextColumn("step {task.completed}/{task.total}"),
                  TextColumn("{task.fields[info]}"), TimeRemainingColumn(), console=log.console) as bar:
        task = bar.add_task("train", total=cfg.max_steps, info="", completed=start_step)
        # Every process evaluates (its share, gathered); rank 0 logs.
        if start_step == 0 and is_due(0, cfg.eval.every, cfg.max_steps):
            values = _evaluate(trainer, log, is_main)   # the weights before any update
            if is_main:
                log.log({"step": 0, **values})
        for step in range(start_step + 1, cfg.max_steps + 1):
            row = gather_row(parts.accelerator, trainer.step(step))
            if trainer.learner.nonfinite_streak >= cfg.optim.max_nonfinite_steps:
                path = trainer.save_checkpoint(step)
                raise RuntimeError(
                    f"{trainer.learner.nonfinite_streak} steps in a row had a non-finite loss or gradient; stopped at step "
                    f"{step} with a checkpoint in {path}. Lower optim.learning_rate, check the rewards for NaN, or "
                    "try optim.mixed_precision: no; resume with checkpoint.resume_from.")
            if trainer.infra.streak >= cfg.optim.max_infra_steps:
                path = trainer.save_checkpoint(step)
                raise RuntimeError(
                    f"{trainer.infra.streak} steps in a row had more than {cfg.optim.max_infra_frac:.0%} of their "
                    f"completions not judged (infra_error); stopped at step {step} with a checkpoint in {path}. "
                    "Check the sandbox hosts (`proctor doctor`) or the scorer named in the warnings above, then "
                    "resume with checkpoint.resume_from.")
            every = cfg.checkpoint.save_every
            if every and step % every == 0 and step < cfg.max_steps:
                trainer.save_checkpoint(step)
            if is_due(step, cfg.eval.every, cfg.max_steps):
                row.update(_evaluate(trainer, log, is_main))
            if not is_main:
                continue
            log.log(row)
            bar.update(task, advance=1, info=f"reward {row['reward_mean']:.3f}  zero-signal "
                                              f"{row['zero_signal_frac']:.2f}")
            if step % cfg.log.log_every == 0:
                log.print_step()
    trainer.save_checkpoint(cfg.max_steps)
    trainer.save_model(Path(cfg.output_dir) / "model")
    plots = plot_run(cfg.output_dir) if is_main else []
    if is_main:
        log.print_summary()
    if cfg.log.report_to:
        parts.accelerator.end_training()
    return log.rows, plots


def _evaluate(trainer: LoopTrainer, log: MetricsLog, show: bool) -> dict[str, float]:
    values = trainer.evaluate()
    if show:
        log.console.print(describe(values), highlight=False)
    return values


def save_model(parts: RunParts, tokenizer: Any, path: Path) -> None:
    """The trained weights as safetensors with the tokenizer: loadable with from_pretrained."""
    parts.accelerator.wait_for_everyone()
    state = None
    if fsdp_on_cpu(parts.accelerator):
        state = full_state_dict(parts.policy.model)
    elif is_zero3():   # the engine's full weights, gathered on rank 0 (every process joins)
        state = parts.accelerator.get_state_dict(parts.policy.model)
    if parts.accelerator.is_main_process:
        parts.accelerator.unwrap_model(parts.policy.model).save_pretrained(path, state_dict=state,
                                                                          safe_serialization=True)
        tokenizer.save_pretrained(path)


def full_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """An FSDP2 model's full weights on rank 0, in CPU memory ({} elsewhere); every process calls it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))




def save_checkpoint(parts: RunParts, output_dir: str, step: int, state: dict[str, Any],
                    keep: Optional[int] = None) -> Path:
    """Model, optimizer and scheduler through accelerate, then each process's own state;
    rank 0's file goes last and marks the checkpoint complete. ``keep``: only the newest
    that many checkpoints stay (``checkpoint.save_total_limit``)."""
    path = checkpoint.checkpoint_dir(output_dir, step)
    acc = parts.accelerator
    acc.save_state(str(path))
    if fsdp_on_cpu(acc):
        checkpoint.save_sharded(path, parts.policy.model, parts.policy.optimizer)
    if acc.process_index != 0:
        checkpoint.save(path, state, acc.process_index)
    acc.wait_for_everyone()
    if acc.process_index == 0:
        checkpoint.save(path, state, 0)
        checkpoint.prune(output_dir, keep)
    acc.wait_for_everyone()
    return path


def load_checkpoint(parts: RunParts, output_dir: str, where: str) -> tuple[Path, dict[str, Any]]:
    """The checkpoint ``where`` (a directory, or "latest"), loaded into the prepared objects;
    returns its path and this process's saved state."""
    path = checkpoint.latest_checkpoint(output_dir) if where == "latest" else Path(where)
    if path is None:
        raise FileNotFoundError(f"checkpoint.resume_from=latest: no checkpoint under {output_dir}/checkpoints")
    state = checkpoint.load(path, parts.accelerator.process_index)
    parts.accelerator.load_state(str(path))
    if fsdp_on_cpu(parts.accelerator):
        checkpoint.load_sharded(path, parts.policy.model, parts.policy.optimizer)
    return path, state


__all__ = ["LoopTrainer", "RunParts", "adamw", "build_parts", "load_checkpoint", "save_checkpoint", "save_model",
           "tokenize", "train_loop"]
