"""The Learner: one optimizer step from a micro-batch loss, on a real accelerate Accelerator:
fp16 overflow handled by the grad scaler, non-finite losses guarded, gradient checkpointing
that really recomputes, and a reference model on the policy's precision path."""

from __future__ import annotations

import math
import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch = pytest.importorskip("torch")

from test_grpo_trainer import DigitShare, fresh_accelerator_state, tiny, trainer_for  # noqa: E402,F401

from proctor.trainer.learn.learner import Learner, Trainable  # noqa: E402
from proctor.trainer.records import TrainBatch  # noqa: E402


def _batch(rows: int = 4) -> TrainBatch:
    ids = torch.randint(0, 10, (rows, 5))
    return TrainBatch(ids, torch.ones_like(ids), ids[:, 1:], torch.ones(rows, 4), torch.ones(rows),
                      torch.zeros(rows, 4))


def _learner(scaler=None):
    from accelerate import Accelerator

    acc = Accelerator(cpu=True)
    if scaler is not None:   # what accelerate sets up for fp16 on a GPU, here on CPU
        acc.scaler = scaler
    model = torch.nn.Linear(4, 1)
    model, opt = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    warnings: list[str] = []
    return Learner(acc, [Trainable(model, opt)], micro_batch_size=2, max_grad_norm=1e9,
                   warn=warnings.append), model, warnings


def _loss(model, blow_up):
    def loss(part, rows, n_micro, pass_index):
        out = model(part.mask).sum() / n_micro
        if blow_up():
            out = out * 3e38            # fp32 overflow in backward once scaled: inf gradients
        return out, {"loss": float(out.detach())}
    return loss


def test_fp16_overflow_is_skipped_by_the_scaler_and_training_goes_on():
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    learner, model, _ = _learner(scaler)
    before = [p.detach().clone() for p in model.parameters()]
    stats = [learner.update(_batch(), _loss(model, lambda: True)) for _ in range(2)]
    assert [s.skipped_nonfinite for s in stats] == [1, 1]                 # counted, not raised
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))   # nothing applied
    assert scaler.get_scale() < 2.0**16                                    # the scaler backed off
    third = learner.update(_batch(), _loss(model, lambda: False))          # the old guard broke here
    assert third.skipped_nonfinite == 0 and math.isfinite(third.grad_norm)
    assert not all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    assert learner.nonfinite_streak == 0                                   # overflow is not a bad run


def test_without_a_scaler_a_non_finite_loss_is_dropped_and_counted():
    learner, model, warnings = _learner()
    before = [p.detach().clone() for p in model.parameters()]

    def nan_loss(part, rows, n_micro, pass_index):
        out = model(part.mask).sum() * float("nan")
        return out, {"loss": float(out.detach())}

    stats = learner.update(_batch(), nan_loss)
    assert stats.skipped_nonfinite == 1 and learner.nonfinite_streak == 1 and "non-finite" in warnings[0]
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def _saved_bytes_and_layer_calls(trainer):
    """Bytes autograd saves for backward during one update, and calls of the first decoder layer."""
    from proctor.trainer.batch import build_batch
    from proctor.trainer.metrics import Stopwatch

    scored = trainer.rollout(trainer.draw_prompts(3), Stopwatch())
    batch = build_batch(scored.rollouts, [1.0, -1.0] * 6, [True] * 12, trainer.tokenizer.pad_token_id)
    saved = [0]

    def pack(t):
        saved[0] += t.numel() * t.element_size()
        return t

    calls = [0]
    layer = trainer.accelerator.unwrap_model(trainer.model).model.layers[0]
    forward = layer.forward   # wrapped, not hooked: torch runs no module hooks while recomputing

    def counted(*args, **kwargs):
        calls[0] += 1
        return forward(*args, **kwargs)

    layer.forward = counted
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        trainer.learn(batch, Stopwatch())
    return saved[0], calls[0]


def test_gradient_checkpointing_recomputes_and_saves_less(tiny, tmp_path):
    plain_bytes, plain_calls = _saved_bytes_and_layer_calls(trainer_for(tiny, tmp_path / "a", DigitShare()))
    ckpt_bytes, ckpt_calls = _saved_bytes_and_layer_calls(
        trainer_for(tiny, tmp_path / "b", DigitShare(), gradient_checkpointing=True))
    assert plain_calls == 2 and ckpt_calls == 4        # 2 micro-batches; forward, then the recompute in backward
    assert ckpt_bytes < 0.7 * plain_bytes              # activations are not kept between the passes


def test_dropout_is_off_for_the_update(tiny, tmp_path):
    trainer = trainer_for(tiny, tmp_path, DigitShare(), gradient_checkpointing=True)
    model = trainer.accelerator.unwrap_model(trainer.model)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            assert module.p == 0.0
        for name, value in vars(module).items():
            if "dropout" in name and isinstance(value, float):
                assert value == 0.0, name


def test_bf16_reference_goes_through_the_policys_precision_path(tiny, tmp_path):
    trainer = trainer_for(tiny, tmp_path, DigitShare(), mixed_precision="bf16", beta=0.04)
    row = trainer.step(1)
    assert row["kl"] == 0.0          # same weights, same autocast: exactly zero at step 1


def test_deepspeed_config_is_fitted_to_the_learner_or_refused():
    from proctor.trainer.learn.placement import fit_deepspeed_config

    ds = {"train_micro_batch_size_per_gpu": "auto", "gradient_clipping": "auto", "gradient_accumulation_steps": 1,
          "zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": False}}
    fit_deepspeed_config(ds, lambda key: ds.get(key) == "auto", micro_batch_size=4, max_grad_norm=0.5)
    assert ds["train_micro_batch_size_per_gpu"] == 4 and ds["gradient_clipping"] == 0.5
    assert ds["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
    with pytest.raises(ValueError, match="gradient_accumulation_steps is 4; set it to 1"):
        fit_deepspeed_config({"gradient_accumulation_steps": 4}, lambda key: False, 4, 1.0)
    with pytest.raises(ValueError, match="gradient_clipping is 2.0 but optim.max_grad_norm is 1.0"):
        fit_deepspeed_config({"gradient_clipping": 2.0}, lambda key: False, 4, 1.0)
