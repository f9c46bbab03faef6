"""The rollout backend a config asks for, built beside its learner."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from ..config import RolloutConfig
from .base import Generator, SamplingParams, Sleeper, WeightTransfer, logprobs_mode
from .hf import TransformersGenerator


def run_sampling(rollout: RolloutConfig) -> SamplingParams:
    """The run's sampling params: the rollout fields, with ``generation_kwargs`` over them."""
    base = SamplingParams(n=rollout.group_size, temperature=rollout.temperature, top_p=rollout.top_p,
                          top_k=rollout.top_k, max_new_tokens=rollout.max_new_tokens)
    return base.with_kwargs(rollout.generation_kwargs, rollout.backend)


def use_sleep(rollout: RolloutConfig) -> bool:
    """Sleep/wake only pays on a GPU shared with the learner, and not while generating ahead."""
    if rollout.backend != "vllm" or rollout.async_generation:
        return False
    if rollout.vllm.sleep == "auto":
        import torch

        return torch.cuda.is_available()
    return rollout.vllm.sleep == "on"


@dataclass(frozen=True)
class Engine:
    """The rollout backend a run config names: the generator; ``close``, which releases it and
    whatever it started (a local server); the same engine as a ``WeightTransfer`` when it holds
    weights of its own (vLLM: what the async pipeline needs), and as a ``Sleeper`` when it frees
    the learner's GPU for the update (``use_sleep``)."""

    generator: Generator
    close: Callable[[], None]
    transfer: Optional[WeightTransfer] = None
    sleeper: Optional[Sleeper] = None


def make_engine(rollout: RolloutConfig, learner: Any, tokenizer: Any, run_dir: Path, *, seed: int = 0,
                lora_rank: int = 0, accelerator: Any = None) -> Engine:
    """The engine ``rollout`` names, built around the learner's model."""
    v = rollout.vllm
    if rollout.backend == "vllm":
        from .vllm_colocated import VLLMColocatedGenerator

        gen = VLLMColocatedGenerator(learner.name_or_path, learner, tokenizer, seed=seed,
                                     lora_sync=v.lora_sync,
                                     sleep_mode=use_sleep(rollout), sleep_level=v.sleep_level,
                                     gpu_memory_utilization=v.gpu_memory_utilization,
                                     logprobs_mode=logprobs_mode(run_sampling(rollout)))
        return Engine(gen, gen.close, transfer=gen, sleeper=gen if use_sleep(rollout) else None)
    if rollout.backend == "vllm_server":
        return _server_generator(rollout, learner, tokenizer, run_dir, seed, lora_rank, accelerator)
    gen = TransformersGenerator(learner, tokenizer, batch_size=rollout.generation_batch_size)
    return Engine(gen, gen.close)


def _server_generator(rollout: RolloutConfig, learner: Any, tokenizer: Any, run_dir: Path, seed: int,
                      lora_rank: int, accelerator: Any) -> Engine:
    v = rollout.vllm
    from ..serve.launch import ManagedServer
    from .vllm_server import VLLMServerGenerator

    urls = list(v.server_urls)
    started: Optional[Any] = None   # what this run started, closed with it: a ManagedServer or RayEngines
    args = list(v.server_args)
    if "--logprobs-mode" not in args:
        args += ["--logprobs-mode", logprobs_mode(run_sampling(rollout))]
    if "--seed" not in args:
        args += ["--seed", str(seed)]
    if "--enable-lora" not in args and lora_rank > 0 and v.lora_sync == "adapter":
        args += ["--enable-lora", "--max-lora-rank", str(lora_rank)]
    if v.ray is not None:
        urls, started = _ray_engines(v.ray, learner.name_or_path, args, run_dir)
    elif not urls:   # none named: one of our own, for this run
        started = ManagedServer(learner.name_or_path, run_dir / "vllm_server.log", extra_args=args)
        urls = [started.url]
    # Several training processes on the same named servers: the main one pushes weights.
    shared = started is None and accelerator is not None and accelerator.num_processes > 1
    if shared and rollout.async_generation:
        raise ValueError("rollout.async_generation with several training processes sharing rollout.vllm.server_urls is "
                         "not supported: leave rollout.vllm.server_urls empty (a server per process) or run synchronously")
    try:
        gen = VLLMServerGenerator(urls, learner, tokenizer, lora_sync=v.lora_sync, bucket_mb=v.bucket_mb,
                                  timeout_s=v.timeout_s, sync_timeout_s=v.sync_timeout_s,
                                  pushes=not shared or accelerator.is_main_process,
                                  barrier=accelerator.wait_for_everyone if shared else None)
    except BaseException:
        if started is not None:
            started.close()
        raise

    def close() -> None:
        gen.close()
        if started is not None:
            started.close()

    return Engine(gen, close, transfer=gen)


def _ray_engines(ray_cfg: Any, model: str, args: list[str], run_dir: Path) -> tuple[list[str], Optional[Any]]:
    """URLs of the engines on the cluster: started for this run (``engines`` > 0), or found by name."""
    from ..serve.errors import ServerUnreachable
    from ..serve.ray_engines import EngineBundle, RayEngines, find_engines

    if ray_cfg.engines > 0:
        engines = RayEngines.start(model, ray_cfg.engines, address=ray_cfg.address, name=ray_cfg.name,
                                   bundle=EngineBundle(ray_cfg.gpus_per_engine, ray_cfg.cpus_per_engine),
                                   args=args, log_dir=str(run_dir / "engines"),
                                   start_timeout_s=ray_cfg.start_timeout_s)
        return engines.urls, engines
    urls = find_engines(ray_cfg.name, address=ray_cfg.address)
    if not urls:
        raise ServerUnreachable(f"no rollout engines named {ray_cfg.name!r} run on the Ray cluster at "
                                f"{ray_cfg.address!r}: start them (`proctor serve MODEL --ray-engines N`), or set "
                                "rollout.vllm.ray.engines to start them for this run")
    return urls, None


__all__ = ["Engine", "make_engine", "run_sampling", "use_sleep"]
