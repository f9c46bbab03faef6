"""The rollout backend a config asks for, built beside its learner."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

from .base import Generator
from .hf import TransformersGenerator


def use_sleep(cfg: Any) -> bool:
    """Sleep/wake only pays on a GPU shared with the learner, and not while generating ahead."""
    if cfg.rollout_backend != "vllm" or cfg.async_generation:
        return False
    if cfg.vllm_sleep == "auto":
        import torch

        return torch.cuda.is_available()
    return cfg.vllm_sleep == "on"


def make_generator(cfg: Any, learner: Any, tokenizer: Any, run_dir: Path,
                   accelerator: Any = None) -> tuple[Generator, Callable[[], None]]:
    """The generator and a function that releases what it started (a local server)."""
    if cfg.rollout_backend == "vllm":
        from .vllm_colocated import VLLMColocatedGenerator

        gen = VLLMColocatedGenerator(learner.name_or_path, learner, tokenizer, seed=cfg.seed,
                                     sync_every=cfg.vllm_sync_every, lora_sync=cfg.vllm_lora_sync,
                                     sleep_mode=use_sleep(cfg), sleep_level=cfg.vllm_sleep_level,
                                     gpu_memory_utilization=cfg.vllm_gpu_memory_utilization)
        return gen, lambda: None
    if cfg.rollout_backend == "vllm_server":
        from ..serve.launch import ManagedServer
        from .vllm_server import VLLMServerGenerator

        urls = list(cfg.vllm_server_urls)
        started: Optional[ManagedServer] = None
        if not urls:   # none named: one of our own, for this run
            args = list(cfg.vllm_server_args)
            if "--seed" not in args:
                args += ["--seed", str(cfg.seed)]
            if "--enable-lora" not in args and cfg.lora_rank > 0 and cfg.vllm_lora_sync == "adapter":
                args += ["--enable-lora", "--max-lora-rank", str(cfg.lora_rank)]
            started = ManagedServer(learner.name_or_path, run_dir / "vllm_server.log", extra_args=args)
            urls = [started.url]
        # Several training processes on the same named servers: the main one pushes weights.
        shared = started is None and accelerator is not None and accelerator.num_processes > 1
        if shared and cfg.async_generation:
            raise ValueError("async_generation with several training processes sharing vllm_server_urls is not "
                             "supported: leave vllm_server_urls empty (a server per process) or run synchronously")
        try:
            gen = VLLMServerGenerator(urls, learner, tokenizer, sync_every=cfg.vllm_sync_every,
                                      lora_sync=cfg.vllm_lora_sync, bucket_mb=cfg.vllm_bucket_mb,
                                      timeout_s=cfg.vllm_timeout_s, sync_timeout_s=cfg.vllm_sync_timeout_s,
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

        return gen, close
    return TransformersGenerator(learner, tokenizer, batch_size=cfg.generation_batch_size), lambda: None


__all__ = ["make_generator", "use_sleep"]
