"""Micro-batching changes nothing: the loss and gradient of a batch split into micro-batches
(a short last one included) equal those of the whole batch for every loss type, and the
update's metrics are over every completion token of the batch, as TRL defines them.

Two levels: ``policy_loss`` alone in float64 (each micro-batch told the whole batch's rows and
tokens), and the real ``Learner`` with ``GRPOMicroLoss`` on a small bigram model in float32
(micro-batches of 2 against one of 5)."""

from __future__ import annotations

import math
import os
from types import SimpleNamespace

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch = pytest.importorskip("torch")

from test_grpo_trainer import fresh_accelerator_state  # noqa: E402,F401

from proctor.trainer.algo import policy_loss  # noqa: E402
from proctor.trainer.batch import token_logps  # noqa: E402
from proctor.trainer.learn.learner import Learner, Trainable  # noqa: E402
from proctor.trainer.learn.objective import GRPOMicroLoss  # noqa: E402
from proctor.trainer.records import LossSpec, Max, Mean, Min, RowCount, TrainBatch, combine  # noqa: E402

F64 = torch.float64
LOSS_TYPES = ["grpo", "bnpo", "dr_grpo", "dapo"]
SPLIT = [slice(0, 2), slice(2, 4), slice(4, 5)]     # 5 rows in micro-batches of 2: the last one short


# ---------------------------------------------------------------- policy_loss alone, float64
def _tensors(seed: int = 0, B: int = 5, T: int = 7):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([7, 2, 5, 0, 3])[:B]                 # uneven, and one empty row
    mask = (torch.arange(T)[None, :] < lengths[:, None]).to(F64)
    logp = (-torch.rand(B, T, generator=g, dtype=F64) * 3).requires_grad_(True)
    old = logp.detach() + 0.3 * torch.randn(B, T, generator=g, dtype=F64)   # wide enough to clip
    ref = logp.detach() + 0.5 * torch.randn(B, T, generator=g, dtype=F64)
    entropy = (torch.rand(B, T, generator=g, dtype=F64) * 2).requires_grad_(True)
    adv = torch.randn(B, generator=g, dtype=F64)
    return logp, old, ref, entropy, adv, mask


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("importance_level", ["token", "sequence"])
@pytest.mark.parametrize("beta, entropy_coef", [(0.0, 0.0), (0.04, 0.01)])
def test_micro_batches_add_up_to_the_whole_batch(loss_type, importance_level, beta, entropy_coef):
    logp, old, ref, entropy, adv, mask = _tensors()
    kw = dict(loss_type=loss_type, importance_level=importance_level, epsilon_low=0.2, epsilon_high=0.28,
              beta=beta, kl_kind="k3", max_completion_length=8, num_items_in_batch=float(mask.sum()),
              entropy_coef=entropy_coef)
    rows, tokens = len(mask), float(mask.sum())

    def run(parts):
        logp.grad, entropy.grad = None, None
        total = sum(policy_loss(logp[s], old[s], adv[s], mask[s], ref_logp=ref[s], entropy=entropy[s],
                                grad_accum_steps=len(parts), batch_rows=rows, batch_tokens=tokens, **kw).loss
                    for s in parts)
        total.backward()
        grad_entropy = torch.zeros_like(entropy) if entropy.grad is None else entropy.grad.clone()
        return total.detach(), logp.grad.clone(), grad_entropy

    whole, split = run([slice(0, rows)]), run(SPLIT)
    for a, b in zip(whole, split):
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-15), (a - b).abs().max()
    assert whole[1].abs().sum() > 0


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo"])
def test_equal_micro_batches_are_trls_per_micro_batch_loss(loss_type):
    """With equal micro-batches, dividing by the batch's rows is TRL's (1/M) per-micro-batch mean."""
    logp, old, _, _, adv, mask = _tensors(B=4)
    kw = dict(loss_type=loss_type, max_completion_length=8, grad_accum_steps=2)
    for s in (slice(0, 2), slice(2, 4)):
        ours = policy_loss(logp[s], old[s], adv[s], mask[s], batch_rows=4, batch_tokens=float(mask.sum()), **kw)
        trl = policy_loss(logp[s], old[s], adv[s], mask[s], **kw)
        assert torch.allclose(ours.loss, trl.loss, rtol=1e-12)


def test_trls_accumulation_over_weights_a_short_micro_batch():
    """Why the batch counts are needed: TRL's grpo normaliser, (1/M) mean over the micro-batch,
    gives the single row of the short last micro-batch twice the weight of every other row."""
    logp, old, _, _, adv, mask = _tensors()
    trl = sum(policy_loss(logp[s], old[s], adv[s], mask[s], loss_type="grpo", grad_accum_steps=3).loss for s in SPLIT)
    whole = policy_loss(logp, old, adv, mask, loss_type="grpo").loss
    assert not torch.allclose(trl, whole, rtol=1e-6)


# ---------------------------------------------------------------- the learner, a real model
V, PROMPT = 8, 2
LENGTHS = [4, 3, 2, 4, 1]


class Bigram(torch.nn.Module):
    """The smallest causal LM token_logps accepts: next-token logits from the current token."""

    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.table = torch.nn.Parameter(torch.randn(V, V, generator=g))

    def forward(self, input_ids, attention_mask=None, logits_to_keep=0):
        logits = self.table[input_ids] * attention_mask[..., None]
        return SimpleNamespace(logits=logits[:, -logits_to_keep:] if logits_to_keep else logits)


def _batch(advantages) -> TrainBatch:
    g = torch.Generator().manual_seed(1)
    width = PROMPT + max(LENGTHS)
    ids = torch.randint(0, V, (len(LENGTHS), width), generator=g)
    attn = torch.zeros_like(ids)
    mask = torch.zeros(len(LENGTHS), width - 1)
    for i, n in enumerate(LENGTHS):
        attn[i, :PROMPT + n] = 1
        mask[i, PROMPT - 1:PROMPT - 1 + n] = 1
    return TrainBatch(ids, attn, ids[:, 1:].clone(), mask, torch.tensor(advantages, dtype=torch.float32),
                      torch.zeros_like(mask))


def _learner(micro_batch_size: int):
    from accelerate import Accelerator

    acc = Accelerator(cpu=True)
    model, opt = acc.prepare(Bigram(), torch.optim.SGD(Bigram().parameters(), lr=0.0))
    grads: list[torch.Tensor] = []
    opt.optimizer.register_step_pre_hook(lambda o, a, k: grads.append(model.table.grad.detach().clone()))
    learner = Learner(acc, [Trainable(model, opt)], micro_batch_size=micro_batch_size, max_grad_norm=1e9,
                      warn=lambda m: None)
    return learner, model, acc, grads


def _update(micro_batch_size: int, batch: TrainBatch, loss_type: str, *, beta=0.0, entropy_coef=0.0,
            importance_level="token", old_from=None):
    learner, model, acc, grads = _learner(micro_batch_size)
    with torch.no_grad():
        logp = token_logps(model, batch, 1.0)[0]
    old = logp - 0.4 * torch.randn(logp.shape, generator=torch.Generator().manual_seed(2)) if old_from is None \
        else old_from(logp)
    ref = logp + 0.3 * torch.randn(logp.shape, generator=torch.Generator().manual_seed(3)) if beta else None
    spec = LossSpec(loss_type, importance_level, 0.2, 0.28, None, beta, "k3", entropy_coef, max(LENGTHS) + 2, 1.0)
    loss = GRPOMicroLoss(model, spec, float(batch.mask.sum()) + batch.inert.tokens, 1, acc.autocast, old, ref,
                         None, 2.0)
    stats = learner.update(batch, loss)
    return grads[0], stats, logp


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
@pytest.mark.parametrize("beta, entropy_coef", [(0.0, 0.0), (0.04, 0.01)])
def test_learners_gradient_does_not_depend_on_the_micro_batch_size(loss_type, beta, entropy_coef):
    batch = _batch([1.0, -0.5, 0.7, -1.2, 0.3])
    whole, _, _ = _update(5, batch, loss_type, beta=beta, entropy_coef=entropy_coef)
    split, _, _ = _update(2, batch, loss_type, beta=beta, entropy_coef=entropy_coef)    # 2, 2, 1
    assert whole.abs().sum() > 0
    assert torch.allclose(whole, split, rtol=0, atol=1e-6), (whole - split).abs().max()


def test_sequence_level_gradient_does_not_depend_on_the_micro_batch_size():
    batch = _batch([1.0, -0.5, 0.7, -1.2, 0.3])
    whole, _, _ = _update(5, batch, "grpo", importance_level="sequence", beta=0.04)
    split, _, _ = _update(2, batch, "grpo", importance_level="sequence", beta=0.04)
    assert torch.allclose(whole, split, rtol=0, atol=1e-6), (whole - split).abs().max()


# Ratios set by hand: old = logp - log(rho) row by row, so pi_theta/pi_old = rho on every token.
RHO = [1.5, 0.5, 1.0, 1.5, 0.5]
ADV = [1.0, -1.0, 1.0, -1.0, 0.0]


def _by_hand(logp):
    return logp - torch.log(torch.tensor(RHO[:len(logp)]))[:, None]


def test_metrics_are_over_every_token_of_the_batch_by_hand():
    """14 tokens in micro-batches of 2, 2 and 1 rows (7, 6 and 1 tokens). eps 0.2 / 0.28:
    row 1 (rho 0.5, A < 0, 3 tokens) is clipped low; row 0 (rho 1.5, A > 0, 4 tokens) high;
    row 3 (rho 1.5, A < 0) and row 4 (A = 0) are not clipped."""
    batch = _batch(ADV)
    _, stats, logp = _update(2, batch, "dapo", old_from=_by_hand)
    v = stats.values
    assert v["clip_low_frac"] == pytest.approx(3 / 14)
    assert v["clip_high_frac"] == pytest.approx(4 / 14)
    assert v["clip_region_frac"] == pytest.approx(7 / 14)
    assert v["ratio_mean"] == pytest.approx((4 * 1.5 + 3 * 0.5 + 2 * 1.0 + 4 * 1.5 + 1 * 0.5) / 14, rel=1e-5)
    assert v["ratio_min"] == pytest.approx(0.5, rel=1e-5) and v["ratio_max"] == pytest.approx(1.5, rel=1e-5)
    # The entropy: the masked token mean over the whole batch, by the formula, in one forward.
    logits = Bigram().table[batch.input_ids[:, :-1]]
    lp = torch.log_softmax(logits.detach(), -1)
    entropy = -(lp.exp() * lp).sum(-1)
    assert v["entropy_mean"] == pytest.approx(float((entropy * batch.mask).sum() / batch.mask.sum()), rel=1e-5)


def test_rows_skipped_as_inert_stay_in_the_clip_fractions():
    """Row 4 (A = 0) is left out of the forward, as the trainer does for dapo with beta = 0: its
    token still counts in the clip fractions' denominator (TRL counts every completion token;
    A = 0 never clips), while entropy and ratio are over the 13 tokens that had a forward."""
    batch = _batch(ADV)
    keep = batch.advantages != 0
    selected = batch.select(keep)
    assert selected.inert == RowCount(1, 1.0) and len(selected) == 4
    _, stats, _ = _update(2, selected, "dapo", old_from=_by_hand)
    v = stats.values
    assert v["clip_low_frac"] == pytest.approx(3 / 14)
    assert v["clip_high_frac"] == pytest.approx(4 / 14)
    assert v["ratio_mean"] == pytest.approx((4 * 1.5 + 3 * 0.5 + 2 * 1.0 + 4 * 1.5) / 13, rel=1e-5)


def test_inert_rows_do_not_change_the_gradient_of_any_loss_type():
    """Skipped rows stay in grpo's and dr_grpo's row count and bnpo's token count: skipping them is exact."""
    batch = _batch(ADV)
    for loss_type in LOSS_TYPES:
        whole, _, _ = _update(2, batch, loss_type, old_from=_by_hand)
        skipped, _, _ = _update(2, batch.select(batch.advantages != 0), loss_type, old_from=_by_hand)
        assert whole.abs().sum() > 0
        assert torch.allclose(whole, skipped, rtol=0, atol=1e-6), loss_type


def test_logged_values_combine_by_count_min_and_max():
    assert combine([Mean(3.0, 7.0), Mean(0.0, 6.0), Mean(0.0, 1.0)]) == pytest.approx(3 / 14)
    assert combine([Min(0.5), Min(0.2)]) == 0.2 and combine([Max(0.5), Max(2.0)]) == 2.0
    assert combine([1.0, 2.0]) == 1.5
    assert math.isnan(combine([Mean(0.0, 0.0)]))
