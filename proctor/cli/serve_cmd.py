"""``proctor serve MODEL``: a vLLM engine in its own process for trainers to generate from."""

from __future__ import annotations

from typing import Annotated, Optional

import typer


def _serve_on_ray(model: str, count: int, address: str, name: str, gpus: float, args: list[str]) -> None:
    """Start ``count`` engines on the cluster, print their URLs, and hold them until interrupted."""
    import time

    from proctor.trainer.serve.ray_engines import EngineBundle, RayEngines

    try:
        engines = RayEngines.start(model, count, address=address, name=name, bundle=EngineBundle(gpus=gpus),
                                   args=args)
    except (ValueError, ImportError, RuntimeError) as exc:
        raise typer.BadParameter(str(exc)) from None
    for i, (url, node) in enumerate(zip(engines.urls, engines.nodes)):
        print(f"proctor serve: engine {name}-{i} ready on {url} (node {node[:8]})", flush=True)
    print(f"trainers find them with rollout.vllm.ray: {{address: {address}, name: {name}}}; Ctrl-C stops them",
          flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        engines.close()


def _exit_with(pid: int) -> None:
    """A trainer killed outright cannot stop the server it started: the server stops itself."""
    import os
    import threading
    import time

    def watch() -> None:
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                os._exit(0)
            except PermissionError:
                pass   # alive, owned by someone else
            time.sleep(1.0)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()


def serve(
    model: Annotated[str, typer.Argument(help="Model path or hub id; 'tiny' / 'tiny:STEPS' for the offline tiny model.")],
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (0: any free one; see --ready-file).")] = 8765,
    dtype: Annotated[str, typer.Option(help="Engine dtype: auto, bfloat16, float16, float32.")] = "auto",
    max_model_len: Annotated[Optional[int], typer.Option(help="Longest prompt + completion, in tokens.")] = None,
    gpu_memory_utilization: Annotated[float, typer.Option(help="Share of GPU memory for weights and KV cache.")] = 0.9,
    tensor_parallel_size: Annotated[int, typer.Option(help="GPUs one engine spans.")] = 1,
    enable_lora: Annotated[bool, typer.Option(help="Accept LoRA adapters from the trainer (unmerged).")] = False,
    max_lora_rank: Annotated[int, typer.Option(help="Largest adapter rank accepted with --enable-lora.")] = 16,
    sleep_mode: Annotated[bool, typer.Option(help="Allow /sleep and /wake_up (GPU only).")] = False,
    seed: Annotated[int, typer.Option(help="Engine sampling seed.")] = 0,
    logprobs_mode: Annotated[str, typer.Option(help="processed_logprobs (after temperature and filters) or "
                                               "raw_logprobs (temperature 1, before filters): the trainer says which "
                                               "its sampling params need.")] = "processed_logprobs",
    op_timeout: Annotated[float, typer.Option(help="Seconds an engine call may take before the server reports it hung.")] = 600.0,
    ready_file: Annotated[Optional[str], typer.Option(help="Write the URL here once ready (for launchers).")] = None,
    exit_with: Annotated[Optional[int], typer.Option(help="Exit when this process (the launching trainer) is gone.")] = None,
    ray_engines: Annotated[int, typer.Option(help="Start this many engines as actors on a Ray cluster (one per "
                                             "placement-group bundle) and keep them until interrupted; trainers "
                                             "find them with rollout.vllm.ray.")] = 0,
    ray_address: Annotated[str, typer.Option(help="The Ray cluster for --ray-engines.")] = "auto",
    ray_name: Annotated[str, typer.Option(help="Name the engines <name>-0, <name>-1, ...")] = "proctor-rollout",
    gpus_per_engine: Annotated[float, typer.Option(help="GPUs each --ray-engines engine reserves (0: CPU-only "
                                                   "cluster); --tensor-parallel-size should match.")] = 1.0,
) -> None:
    """Serve rollouts from a vLLM engine; trainers push weights to it in buckets, with timeouts.

    Data parallel: start one server per GPU set and list every URL in the trainer's
    vllm_server_urls; prompts are split between them and every sync goes to all.
    """
    from proctor.trainer.build import resolve_model_path
    from proctor.trainer.rollout.vllm_engine import VLLMEngine
    from proctor.trainer.serve.server import serve as run_server

    if ray_engines:
        args = ["--dtype", dtype, "--gpu-memory-utilization", str(gpu_memory_utilization), "--seed", str(seed),
                "--tensor-parallel-size", str(tensor_parallel_size), "--logprobs-mode", logprobs_mode,
                "--op-timeout", str(op_timeout), "--max-lora-rank", str(max_lora_rank)]
        args += (["--max-model-len", str(max_model_len)] if max_model_len else []) + (
            ["--enable-lora"] if enable_lora else []) + (["--sleep-mode"] if sleep_mode else [])
        _serve_on_ray(model, ray_engines, ray_address, ray_name, gpus_per_engine, args)
        return
    if exit_with:
        _exit_with(exit_with)
    path = resolve_model_path(model)
    try:
        engine = VLLMEngine(path, dtype=dtype, max_model_len=max_model_len,
                            gpu_memory_utilization=gpu_memory_utilization, seed=seed,
                            tensor_parallel_size=tensor_parallel_size, enable_lora=enable_lora,
                            max_lora_rank=max_lora_rank, sleep_mode=sleep_mode, logprobs_mode=logprobs_mode)
    except (ImportError, ValueError) as exc:
        raise typer.BadParameter(str(exc)) from None
    run_server(engine, host, port, op_timeout=op_timeout, ready_file=ready_file, model_name=path)
