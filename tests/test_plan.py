"""``proctor plan``: the write-up's example, the CLI, sharding/offload/LoRA arithmetic, and the
planner's training-state bytes checked against the tensors real optimizer steps leave behind."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from proctor.cli.plan_cmd import plan as plan_command
from proctor.plan import (PlanInput, load_shape, logit_value_bytes, logprob_bytes, model_shape_from_model, plan,
                          shape_from_config, shape_from_params, state_cost, training_state)

GB = 10**9


def _app() -> typer.Typer:
    app = typer.Typer()
    app.command("plan")(plan_command)

    @app.callback()
    def _root() -> None:          # a group, so the command is invoked as `plan` like `proctor plan`
        pass

    return app


def _invoke(*args: str):
    return CliRunner().invoke(_app(), ["plan", *args])


# ---------------------------------------------------------------- the write-up's example
def test_70b_ppo_actor_plus_critic_adamw_is_at_least_600gb():
    p = plan(PlanInput(params=70e9, algorithm="ppo"))
    ppo = p.algorithms["ppo"]
    # The write-up's "over 600 GB" (~8.6 bytes per actor parameter) is a floor: full mixed-precision
    # AdamW costs 16 bytes per trainable parameter, for the actor and the actor-sized critic.
    assert ppo.training_state_bytes >= 600 * GB
    assert ppo.trainable_params == 140 * 10**9
    assert ppo.state_cost.total == 16
    assert ppo.training_state_bytes == 16 * ppo.trainable_params
    assert ppo.total_bytes > ppo.training_state_bytes            # plus reference, reward model, activations, KV
    cost = state_cost("adamw", "bf16-mixed")
    assert (cost.weights, cost.grads, cost.master, cost.moments) == (2, 2, 4, 8)
    assert "bf16 weight 2 + bf16 grad 2 + fp32 master 4 + fp32 m 4 + fp32 v 4 = 16" in cost.describe()
    assert any("= 16 bytes per trainable parameter" in line for line in p.assumptions)


def test_per_parameter_costs_of_each_optimizer_and_precision():
    assert state_cost("adamw", "bf16").total == 8          # 2 + 2 + bf16 m, v
    assert state_cost("adamw", "fp32").total == 16         # 4 + 4 + 8, no master
    assert state_cost("adamw8bit", "bf16-mixed").total == 10
    assert state_cost("sgd", "bf16-mixed").total == 8      # 2 + 2 + master 4, no moments
    assert state_cost("sgd", "fp32").moments == 0


def test_shape_guessed_from_a_count_is_llama_70b_like():
    shape = shape_from_params(70e9)
    assert shape.params == 70 * 10**9                      # the count itself is kept exactly
    assert (shape.hidden, shape.kv_heads, shape.head_dim) == (8192, 8, 128)
    assert 76 <= shape.layers <= 82
    with pytest.raises(ValueError, match="--params"):
        shape_from_params(0)


# ---------------------------------------------------------------- CLI
def test_cli_ppo_json_as_written():
    result = _invoke("--params", "70e9", "--algorithm", "ppo", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["algorithms"] == ["ppo"]
    assert data["ppo"]["total_bytes"] >= 600 * GB
    assert data["ppo"]["training_state_bytes_per_trainable_param"] == 16
    assert {"name", "bytes_per_gpu", "bytes_total"} <= set(data["ppo"]["components"][0])
    assert data["ppo"]["rollout_tokens_per_step"] == 8 * 1 * 1024
    assert data["assumptions"] and "difference_bytes" not in data


def test_cli_default_plans_both_and_grpo_costs_less():
    result = _invoke("--params", "70e9", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    grpo, ppo = data["grpo"], data["ppo"]
    assert grpo["total_bytes"] < ppo["total_bytes"]
    assert data["difference_bytes"] == ppo["total_bytes"] - grpo["total_bytes"]
    assert grpo["rollout_tokens_per_step"] == 8 * ppo["rollout_tokens_per_step"]   # G = 8 vs 1 sample

    table = _invoke("--params", "70e9")
    assert table.exit_code == 0, table.output
    for text in ("GRPO", "PPO", "critic optimizer moments", "rollout KV cache", "PPO - GRPO", "Assumptions",
                 "rollout tokens per step"):
        assert text in table.output


@pytest.mark.parametrize("args, option", [
    (["--params", "7e9", "--gpus", "0"], "--gpus"),
    (["--params", "7e9", "--zero", "4"], "--zero"),
    (["--params", "7e9", "--fsdp", "--zero", "2"], "--fsdp"),
    (["--model", "/no/such/model"], "--model"),
    ([], "--params"),
])
def test_cli_bad_options_name_the_option(args, option):
    result = _invoke(*args)
    assert result.exit_code == 2
    assert option in result.output


# ---------------------------------------------------------------- sharding and offload
def _actor(p, name):
    return p.algorithms["grpo"].component(name)


def test_zero_stages_divide_the_right_components():
    base = dict(params=7e9, algorithm="grpo", gpus=8)
    full = plan(PlanInput(**base, sharding=0))
    w, g, m, master = (_actor(full, f"actor {x}").bytes_per_gpu
                       for x in ("weights", "gradients", "optimizer moments", "master weights"))
    ref = _actor(full, "reference model").bytes_per_gpu
    expect = {0: (w, g, m, master, ref), 1: (w, g, m / 8, master / 8, ref), 2: (w, g / 8, m / 8, master / 8, ref),
              3: (w / 8, g / 8, m / 8, master / 8, ref / 8), "fsdp": (w / 8, g / 8, m / 8, master / 8, ref / 8)}
    for stage, want in expect.items():
        p = plan(PlanInput(**base, sharding=stage))
        got = tuple(_actor(p, n).bytes_per_gpu for n in ("actor weights", "actor gradients",
                    "actor optimizer moments", "actor master weights", "reference model"))
        assert got == pytest.approx(want, abs=1), stage
        # A sharded part is stored once over all GPUs; a replicated one eight times.
        assert _actor(p, "actor optimizer moments").bytes_total == (m * 8 if stage == 0 else m)
    assert w == 2 * 7e9 and m == 8 * 7e9 and master == 4 * 7e9


def test_offload_moves_optimizer_state_and_master_to_cpu():
    base = dict(params=7e9, algorithm="ppo", gpus=4, sharding=2)
    on_gpu = plan(PlanInput(**base)).algorithms["ppo"]
    offloaded = plan(PlanInput(**base, offload=True)).algorithms["ppo"]
    moved = sum(on_gpu.component(f"{r} {x}").bytes_total for r in ("actor", "critic")
                for x in ("optimizer moments", "master weights"))
    assert offloaded.cpu_bytes == moved == 2 * 12 * 7 * 10**9
    assert on_gpu.total_bytes - offloaded.total_bytes == moved
    assert offloaded.component("actor optimizer moments").bytes_per_gpu == 0
    assert offloaded.component("actor gradients") == on_gpu.component("actor gradients")
    assert offloaded.training_state_bytes == on_gpu.training_state_bytes   # moved, not gone


# ---------------------------------------------------------------- LoRA and KL
def test_lora_trainable_bytes_scale_with_rank_and_reference_is_free():
    shape = shape_from_params(8e9)
    r8, r16 = (training_state(shape, "adamw", "bf16-mixed", r) for r in (8, 16))
    assert r16.trainable_params == 2 * r8.trainable_params
    assert r16.grads == 2 * r8.grads and r16.moments == 2 * r8.moments
    assert r8.frozen_params == shape.params and r8.weights == 2 * shape.params + 2 * r8.trainable_params
    lora = plan(PlanInput(params=8e9, lora_rank=8, kl=True))
    full = plan(PlanInput(params=8e9, kl=True))
    assert lora.algorithms["grpo"].component("reference model").bytes_total == 0
    assert full.algorithms["grpo"].component("reference model").bytes_total == 2 * 8 * 10**9
    assert lora.algorithms["grpo"].total_bytes < full.algorithms["grpo"].total_bytes / 4


def test_kl_off_drops_the_reference():
    on, off = (plan(PlanInput(params=7e9, algorithm="grpo", kl=kl)).algorithms["grpo"] for kl in (True, False))
    assert on.total_bytes - off.total_bytes == 2 * 7 * 10**9


# ---------------------------------------------------------------- measured on real models
def _tiny_qwen2(tied: bool):
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    cfg = Qwen2Config(vocab_size=1024, hidden_size=128, intermediate_size=352, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=tied)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)


def _train_and_measure(model, optimizer_name: str, steps: int = 2) -> dict[str, int]:
    """Take real optimizer steps, then sum the bytes held by parameters, .grad and optimizer state."""
    import torch

    trainable = [p for p in model.parameters() if p.requires_grad]
    opt = (torch.optim.AdamW(trainable, lr=1e-3) if optimizer_name == "adamw"
           else torch.optim.SGD(trainable, lr=1e-3, momentum=0.0))
    ids = torch.randint(0, model.config.vocab_size, (2, 16))
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
    params = list({id(p): p for p in model.parameters()}.values())       # tied tensors once
    def size(t) -> int:
        return t.numel() * t.element_size()

    state = [(k, t) for s in opt.state.values() for k, t in s.items() if torch.is_tensor(t)]
    return {"weights": sum(size(p) for p in params),
            "grads": sum(size(p.grad) for p in params if p.grad is not None),
            # AdamW's per-tensor scalar `step` counters are left out of the comparison (4 bytes each).
            "moments": sum(size(t) for k, t in state if k != "step"),
            "step_counters": sum(size(t) for k, t in state if k == "step")}


def _check(measured: dict[str, int], planned, rel: float = 0.02) -> None:
    assert planned.weights == pytest.approx(measured["weights"], rel=rel)
    assert planned.grads == pytest.approx(measured["grads"], rel=rel)
    assert planned.master + planned.moments == pytest.approx(measured["moments"], rel=rel)
    held = measured["weights"] + measured["grads"] + measured["moments"]
    assert planned.total == pytest.approx(held, rel=rel)
    assert planned.total == pytest.approx(held + measured["step_counters"], rel=rel)


@pytest.mark.parametrize("tied", [False, True])
def test_measured_fp32_adamw_full_training(tied):
    model = _tiny_qwen2(tied)
    shape = model_shape_from_model(model)
    assert shape_from_config(model.config).params == shape.params     # config arithmetic == real tensors
    measured = _train_and_measure(model, "adamw")
    planned = training_state(shape, "adamw", "fp32")
    _check(measured, planned)
    assert planned.total == 16 * shape.params


def test_measured_pure_bf16_adamw_and_sgd():
    import torch

    model = _tiny_qwen2(tied=False).to(torch.bfloat16)
    _check(_train_and_measure(model, "adamw"), training_state(model_shape_from_model(model), "adamw", "bf16"))
    model = _tiny_qwen2(tied=False)
    measured = _train_and_measure(model, "sgd")
    assert measured["moments"] == 0
    _check(measured, training_state(model_shape_from_model(model), "sgd", "fp32"))


def test_measured_lora_adapters_on_a_frozen_base():
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(_tiny_qwen2(tied=True), LoraConfig(r=4, target_modules="all-linear", lora_dropout=0.0))
    shape = model_shape_from_model(model)
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    assert shape.lora_params(4) == n_trainable
    _check(_train_and_measure(model, "adamw"), training_state(shape, "adamw", "fp32", lora_rank=4))


def test_measured_project_tiny_model_read_from_its_config(tmp_path):
    """The shape is read from the directory's config.json, then checked against the loaded model's tensors."""
    from transformers import AutoModelForCausalLM

    from proctor.tiny_model import count_parameters, tiny_model_path

    path = tiny_model_path()
    shape = load_shape(str(path))
    assert shape.params == count_parameters(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    _check(_train_and_measure(model, "adamw", steps=1), training_state(shape, "adamw", "fp32"))
    p = plan(PlanInput(shape=shape, precision="fp32", algorithm="grpo"))
    assert p.algorithms["grpo"].training_state_bytes == 16 * shape.params

    # The same directory through the command line, and --params overriding the count it reads.
    result = _invoke("--model", str(path), "--precision", "fp32", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    assert data["model"]["params"] == shape.params and data["model"]["layers"] == shape.layers
    assert data["grpo"]["training_state_bytes"] == 16 * shape.params
    assert PlanInput(model=str(path / "config.json"), params=1e9).resolve_shape().params == 10**9


# ---------------------------------------------------------------- the learner's log-prob logits, measured
@pytest.mark.parametrize("precision", ["fp32", "bf16-mixed"])
def test_measured_logprob_peak_matches_the_planned_activations(precision):
    """One forward + backward of ``token_logps`` on a model whose logits dominate, its peak measured by
    ``bench/logp_memory.py`` in a fresh process, against the plan's activations for the same micro batch."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from transformers import Qwen2Config

    bench = Path(__file__).resolve().parents[1] / "bench" / "logp_memory.py"
    rows, prompt, completion = 4, 96, 32
    spec = {"vocab": 32768, "hidden": 32, "rows": rows, "prompt": [prompt, prompt], "completion": [completion] * 2}
    variant = "new" if precision == "fp32" else f"new@{precision}"
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(bench), "--worker", variant, "--shape-json", json.dumps(spec)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    measured = json.loads(proc.stdout.strip().splitlines()[-1])
    shape = shape_from_config(Qwen2Config.from_dict(measured["config"]))
    planned = plan(PlanInput(shape=shape, algorithm="grpo", precision=precision, prompt_len=prompt,
                             completion_len=completion, micro_batch=rows, batch_size=1, group_size=rows,
                             gradient_checkpointing=False, kl=False)).algorithms["grpo"].component("activations")
    # Within 15%: the rest is the output head's gradient before it joins .grad and small buffers.
    assert 0.85 <= measured["peak_bytes"] / planned.bytes_per_gpu <= 1.15, (measured["peak_bytes"], planned)
    # The figure the plan used to give (fp32 logits at every position) would fail the same check.
    layers = planned.bytes_per_gpu - logprob_bytes(shape.vocab, completion, rows, logit_value_bytes(precision))
    assert measured["peak_bytes"] / (layers + 4 * rows * (prompt + completion) * shape.vocab) < 0.85


def test_planner_chunking_is_the_learners():
    from proctor.plan import costs
    from proctor.trainer import batch

    assert (costs.LOGP_CHUNK_VALUES, costs.LOGP_CHUNK_FRACTION) == (batch.LOGP_CHUNK_VALUES, batch.LOGP_CHUNK_FRACTION)
