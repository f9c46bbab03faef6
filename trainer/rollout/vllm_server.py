"""Rollouts from ``proctor serve`` engines in their own processes (their own GPUs).

Several URLs make data parallelism: the prompts of a call are split between the servers
and every weight sync goes to all of them, each tagged with the same version. Weights
travel in size-bounded safetensors buckets (a LoRA learner sends only its adapter), and
every call carries a timeout, so a hung engine is an error that names it.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Literal, Optional, Sequence

from ..serve.client import EngineClient, serialize_buckets
from ..serve.errors import EngineServerError
from .base import Rollout, SamplingParams, Snapshot, SyncInfo, check_logprobs_mode, stop_token_ids
from .weights import adapter_state, is_peft, is_sharded, policy_weights


class VLLMServerGenerator:
    """Implements the ``Generator`` interface against one or more engine servers."""

    def __init__(self, urls: Sequence[str], learner: Any, tokenizer: Any, *,
                 lora_sync: Literal["adapter", "merged"] = "adapter", bucket_mb: float = 256.0,
                 timeout_s: float = 600.0, sync_timeout_s: float = 120.0, pushes: bool = True,
                 barrier: Optional[Callable[[], None]] = None) -> None:
        if not urls:
            raise ValueError("VLLMServerGenerator needs at least one server URL")
        self.clients = [EngineClient(u, timeout_s=timeout_s, sync_timeout_s=sync_timeout_s) for u in urls]
        self.learner = learner
        self.tokenizer = tokenizer
        self.bucket_bytes = int(bucket_mb * 2**20)
        # Training processes sharing servers: one pushes (the weights are identical on all),
        # the others wait at the barrier until the servers hold the new version.
        self.pushes = pushes
        self.barrier = barrier
        self._pool = ThreadPoolExecutor(max_workers=len(self.clients), thread_name_prefix="engine-client")
        health = self._all(lambda c: c.health())
        # A server from before logprobs_mode was reported ran processed_logprobs.
        self.logprobs_modes = [h.get("logprobs_mode", "processed_logprobs") for h in health]
        self.adapter_sync = lora_sync == "adapter" and is_peft(learner)
        if self.adapter_sync:
            no_lora = [c.url for c, h in zip(self.clients, health) if not h.get("lora")]
            if no_lora:
                raise EngineServerError(
                    f"the learner trains LoRA adapters but the server(s) {', '.join(no_lora)} were started without "
                    "--enable-lora: restart them with `proctor serve MODEL --enable-lora --max-lora-rank R`, or set "
                    "vllm_lora_sync: merged to push merged weights")
        self.stop_ids = stop_token_ids(tokenizer)
        self.weight_version = 0
        self.last_sync: Optional[SyncInfo] = None
        # The servers may have loaded anything: start them all from the learner's weights
        # (with adapter sync, its base weights first, then the adapter).
        if self.adapter_sync and self.pushes:
            base = serialize_buckets(policy_weights(learner, merge=False), self.bucket_bytes)
            self._all(lambda c: c.push(base, kind="full", version=0))
        self.push(version=0)

    def _all(self, fn: Any) -> list[Any]:
        return list(self._pool.map(fn, self.clients))

    # ------------------------------------------------------------------ weights
    def sync_weights(self) -> bool:
        """Push the learner's policy to the servers now (the trainer decides when: weight_sync.py)."""
        self.push(self.weight_version + 1)
        return True

    def snapshot(self) -> Snapshot:
        """The learner's policy, serialized now: safe to send while the learner moves on."""
        if self.adapter_sync:
            tensors, config = adapter_state(self.learner)
            return Snapshot("lora", serialize_buckets(list(tensors.items()), self.bucket_bytes), config)
        return Snapshot("full", serialize_buckets(policy_weights(self.learner), self.bucket_bytes))

    def apply(self, snapshot: Snapshot, version: Optional[int] = None) -> int:
        self.push(self.weight_version + 1 if version is None else version, snapshot)
        return self.weight_version

    def restore(self, version: int) -> None:
        """After a resume: every server takes the restored learner's policy, under its version."""
        self.push(version)

    def push(self, version: int, snapshot: Optional[Snapshot] = None) -> None:
        if self.pushes:
            snap = snapshot or self.snapshot()
            blobs = snap.payload
            replies = self._all(lambda c: c.push(blobs, kind=snap.kind, version=version, config=snap.config))
            self.last_sync = SyncInfo(bytes=float(sum(len(b) for b, _ in blobs)), buckets=len(blobs),
                                      seconds=max(r["seconds"] for r in replies))
        elif snapshot is None and is_sharded(self.learner):
            policy_weights(self.learner, keep=False)   # join the gathers of the process that sends
        if self.barrier is not None:
            self.barrier()
        self.weight_version = version

    # ------------------------------------------------------------------ sampling
    def _request(self, prompts: Sequence[list[int]], **sampling: Any) -> list[tuple[int, list]]:
        """Contiguous shards, one per server; groups come back in prompt order with their version."""
        k = len(self.clients)
        size = -(-len(prompts) // k)
        shards = [(c, prompts[i * size:(i + 1) * size]) for i, c in enumerate(self.clients)]
        shards = [(c, p) for c, p in shards if p]
        replies = list(self._pool.map(lambda cp: cp[0].generate(cp[1], stop_ids=self.stop_ids, **sampling), shards))
        return [(r["weight_version"], g) for r in replies for g in r["groups"]]

    def generate(self, prompts: Sequence[list[int]], params: SamplingParams) -> list[list[Rollout]]:
        for url, mode in zip((c.url for c in self.clients), self.logprobs_modes):
            check_logprobs_mode(mode, params, f"the vLLM server {url}")
        out = self._request(prompts, n=params.n, temperature=params.temperature, top_p=params.top_p,
                            top_k=params.top_k, max_new_tokens=params.max_new_tokens, min_p=params.min_p,
                            repetition_penalty=params.repetition_penalty, stop=list(params.stop))
        return [[Rollout(prompt_ids=tuple(prompt), completion_ids=tuple(s["completion_ids"]),
                         logprobs=tuple(s["logprobs"]),
                         text=self.tokenizer.decode(s["completion_ids"], skip_special_tokens=True),
                         finish_reason="stop" if s["finish_reason"] == "stop" else "length", weight_version=version)
                 for s in group] for prompt, (version, group) in zip(prompts, out)]

    def greedy(self, prompts: Sequence[list[int]], max_new_tokens: int, *, stop: tuple[str, ...] = (),
               repetition_penalty: float = 1.0) -> list[str]:
        return [r.text for r in self.greedy_rollouts(prompts, max_new_tokens, stop=stop,
                                                     repetition_penalty=repetition_penalty)]

    def greedy_rollouts(self, prompts: Sequence[list[int]], max_new_tokens: int, *, stop: tuple[str, ...] = (),
                        repetition_penalty: float = 1.0) -> list[Rollout]:
        out = self._request(prompts, n=1, temperature=0.0, max_new_tokens=max_new_tokens,
                            repetition_penalty=repetition_penalty, stop=list(stop))
        return [Rollout(prompt_ids=tuple(prompt), completion_ids=tuple(g[0]["completion_ids"]),
                        logprobs=tuple(g[0].get("logprobs") or ()),
                        text=self.tokenizer.decode(g[0]["completion_ids"], skip_special_tokens=True),
                        finish_reason="stop" if g[0]["finish_reason"] == "stop" else "length", weight_version=version)
                for prompt, (version, g) in zip(prompts, out)]

    # ------------------------------------------------------------------ memory (the servers' own GPUs)
    def sleep(self) -> None:
        self._all(lambda c: c.sleep())

    def wake_up(self) -> None:
        self._all(lambda c: c.wake_up())

    def sync_and_wake(self) -> bool:
        self.wake_up()
        return self.sync_weights()

    def versions(self) -> list[int]:
        return [h["weight_version"] for h in self._all(lambda c: c.health())]

    def close(self) -> None:
        self._pool.shutdown(wait=False)


__all__ = ["VLLMServerGenerator"]
