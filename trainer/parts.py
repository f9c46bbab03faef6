"""What every trainer (GRPO, PPO) is built from: ``build_parts`` assembles, from a config and
the objects a run starts with, the accelerator, the prepared policy (and reference), the
rollout backend, the prompt drawer (with its pass-rate memory, difficulty frontier and answer
probe), the rollout runner, the evaluator and the metrics log: plain parts, no trainer object.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

import torch

from proctor.envs import EnvSuite, SuiteItem
from proctor.envs.core.difficulty import check_knob
from proctor.envs.tools import is_tool_env

from .config import GRPOConfig, flat_view
from .evaluation import EvalSettings, Share, eval_items, evaluate
from .learn.learner import Trainable
from .metrics import MetricsLog, read_metrics
from .rollout.multiturn import continue_turns
from .rollout.tool_turns import ToolTurns
from .select.passrate import PassRateMemory
from .learn.placement import prepare_policy, process_group_kwargs
from .select.probe import AnswerProbe, answer_reference
from .select.frontier import Frontier, SelectionRules
from .rollout import Generator, SamplingParams
from .rollout.factory import Engine, make_engine, run_sampling
from .rollout.weights import is_sharded
from .sampling import EpochOrder, PromptDrawer, PromptLimit, RolloutRunner


@dataclass
class RunParts:
    """The pieces a trainer is made of (GRPO and PPO alike)."""

    accelerator: Any
    policy: Trainable
    ref_model: Optional[torch.nn.Module]
    engine: Engine                      # the generator, its close, and what else the backend can do
    sampling: SamplingParams
    drawer: PromptDrawer
    rollouts: RolloutRunner
    log: MetricsLog
    run_dir: Path
    # The eval_* values under the current weights (eval.every > 0), else None
    evaluate: Optional[Callable[[], dict[str, float]]] = None
    # The policy is sharded over several processes (FSDP, ZeRO-3): each of its forwards is a collective
    sharded: bool = False

    @property
    def generator(self) -> Generator:
        return self.engine.generator


def build_parts(cfg: GRPOConfig, suite: EnvSuite, model: Any, tokenizer: Any,
                eval_suite: Optional[EnvSuite] = None, algorithm: str = "grpo") -> RunParts:
    """The parts of a run of ``algorithm`` ("grpo", "ppo": the trackers' project name)."""
    from accelerate import Accelerator

    accelerator = Accelerator(mixed_precision=cfg.optim.mixed_precision, log_with=cfg.log.report_to or None,
                              project_dir=cfg.output_dir, kwargs_handlers=process_group_kwargs())
    rank = accelerator.process_index
    torch.manual_seed(cfg.seed)
    policy, ref_model = prepare_policy(cfg, model, accelerator)
    learner_model = accelerator.unwrap_model(policy.model)
    run_dir = Path(cfg.output_dir if accelerator.is_main_process else f"{cfg.output_dir}/rank{rank}")
    r = cfg.rollout
    engine = make_engine(r, learner_model, tokenizer, run_dir, seed=cfg.seed, lora_rank=cfg.optim.lora_rank,
                         accelerator=accelerator)
    generator = engine.generator
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
                  if any(env.max_turns > 1 and not is_tool_env(env) for env in suite.envs.values()) else None)
    tool_turns = tool_turns_of(suite, tokenizer, template)
    # a dropped prompt's replacement is not probed: one probe pass per step keeps processes in step
    limit = PromptLimit(cfg.data.max_prompt_length, cfg.data.prompt_overflow,
                        functools.partial(drawer.draw, probe=False))
    runner = RolloutRunner(generator, prompt_ids, suite.score_batch, sampling, r.generation_batch_size,
                           r.overlap_scoring, more_turns, limit, tool_turns)
    if cfg.log.report_to:   # trackers take scalars only: nested values (the env suite) go in as JSON text
        accelerator.init_trackers(f"proctor-{algorithm}", config={
            k: v if isinstance(v, (int, float, str, bool)) else json.dumps(v) for k, v in flat_view(cfg).items()})
    earlier = read_metrics(run_dir) if cfg.checkpoint.resume_from else None
    log = MetricsLog(run_dir, trackers=accelerator if (cfg.log.report_to and accelerator.is_main_process) else None,
                     keep_rows=earlier)
    sharded = accelerator.num_processes > 1 and is_sharded(policy.model)
    return RunParts(accelerator, policy, ref_model, engine, sampling, drawer, runner, log, run_dir,
                    _evaluator(cfg, eval_suite, generator, tokenizer, sampling, accelerator), sharded)

def max_turns(suite: EnvSuite) -> int:
    """The most turns an episode of ``suite`` runs (1 when every env is single-turn)."""
    return max((env.max_turns for env in suite.envs.values()), default=1)


def tool_turns_of(suite: EnvSuite, tokenizer: Any, chat_template_kwargs: Optional[Mapping[str, Any]]
                  ) -> Optional[ToolTurns]:
    """The tool episodes of ``suite``'s tool envs (None when it has none)."""
    if not any(is_tool_env(env) for env in suite.envs.values()):
        return None
    return ToolTurns(suite, tokenizer, chat_template_kwargs)


def selection_rules(cfg: GRPOConfig) -> SelectionRules:
    d = cfg.data
    return SelectionRules(cfg.rollout.group_size, skip=d.skip_predicted_zero_signal, skip_threshold=d.skip_threshold,
                          skip_after=d.skip_after, explore=d.skip_explore, band=d.target_pass_rate,
                          probe_pool=d.probe_pool, group_sizes=cfg.rollout.adaptive_group_size)

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

def tokenize(suite: EnvSuite, tokenizer: Any, item: SuiteItem,
             chat_template_kwargs: Optional[Mapping[str, Any]] = None) -> list[int]:
    """The prompt's token ids: plain text as is, chat messages through the chat template
    (given ``chat_template_kwargs``, e.g. ``enable_thinking``, and a tool env's tools)."""
    prompt = suite.prompt_of(item)
    if isinstance(prompt, str):
        return tokenizer(prompt, add_special_tokens=True)["input_ids"]
    env = suite.envs[item.env]
    tools = {"tools": env.tool_schemas()} if is_tool_env(env) else {}   # the template renders a tool env's tools
    ids = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True,
                                        **dict(chat_template_kwargs or {}), **tools)
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)

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
                            EvalSettings.from_config(cfg, sampling), share,
                            tool_turns_of(eval_suite, tokenizer, cfg.data.chat_template_kwargs))
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


__all__ = ["EVAL_SEED_OFFSET", "RunParts", "build_frontier", "build_parts", "build_probe", "gather_each", "max_turns",
           "own_random_stream", "selection_rules", "tokenize", "tool_turns_of"]
