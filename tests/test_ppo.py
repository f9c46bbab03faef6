"""PPO beside GRPO: GAE and the value loss against hand-computed values; the PPO step runs."""

from __future__ import annotations

import math
import os

import pytest
import torch

os.environ.setdefault("OMP_NUM_THREADS", "1")

from proctor.trainer.algo.gae import gae, token_rewards, value_loss, whiten  # noqa: E402


def test_gae_by_hand():
    rewards = torch.tensor([[0.0, 0.0, 1.0]])
    values = torch.tensor([[0.5, 0.6, 0.7]])
    mask = torch.ones(1, 3)
    adv, ret = gae(rewards, values, mask, gamma=1.0, lam=0.95)
    # δ2 = 1 − 0.7 = 0.3; δ1 = 0.7 − 0.6 = 0.1; δ0 = 0.6 − 0.5 = 0.1
    # A2 = 0.3; A1 = 0.1 + 0.95·0.3 = 0.385; A0 = 0.1 + 0.95·0.385 = 0.46575
    assert torch.allclose(adv, torch.tensor([[0.46575, 0.385, 0.3]]))
    assert torch.allclose(ret, torch.tensor([[0.96575, 0.985, 1.0]]))


def test_gae_with_discount_and_padding_by_hand():
    # Row: one prompt position (masked out), two completion tokens, one pad.
    rewards = torch.tensor([[0.0, 0.0, 2.0, 0.0]])
    values = torch.tensor([[9.0, 1.0, 0.5, 9.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0, 0.0]])
    adv, ret = gae(rewards, values, mask, gamma=0.9, lam=0.5)
    # δ2 = 2 + 0.9·0 − 0.5 = 1.5; δ1 = 0 + 0.9·0.5 − 1 = −0.55; A1 = −0.55 + 0.9·0.5·1.5 = 0.125
    assert torch.allclose(adv, torch.tensor([[0.0, 0.125, 1.5, 0.0]]))
    assert torch.allclose(ret, torch.tensor([[0.0, 1.125, 2.0, 0.0]]))


def test_token_rewards_put_the_score_on_the_last_token_and_subtract_kl():
    mask = torch.tensor([[0.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    kl = torch.full((3, 4), 0.5)
    r = token_rewards(torch.tensor([1.0, 0.25, 7.0]), mask, kl, beta=0.1)
    assert torch.allclose(r, torch.tensor([[0.0, -0.05, 0.95, 0.0], [0.2, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]))


def test_value_loss_by_hand():
    values, old = torch.tensor([[1.0, 2.0]]), torch.tensor([[0.5, 2.5]])
    returns, mask = torch.tensor([[1.5, 1.0]]), torch.ones(1, 2)
    out = value_loss(values, old, returns, mask, clip_range=0.2)
    # clipped V: 0.7, 2.3; squared errors 0.25, 1 vs clipped 0.64, 1.69 → max 0.64, 1.69 → ½·mean = 0.5825
    assert out.loss.item() == pytest.approx(0.5825)
    assert out.clip_frac.item() == 1.0
    unclipped = value_loss(values, old, returns, mask, clip_range=None)
    assert unclipped.loss.item() == pytest.approx(0.5 * (0.25 + 1.0) / 2)


def test_whiten_over_masked_entries():
    x = torch.tensor([[1.0, 2.0, 3.0, 100.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    w = whiten(x, mask)
    assert w[0, 3] == 0 and abs(float(w[0, :3].mean())) < 1e-6
    assert float((w[0, :3] ** 2).mean()) == pytest.approx(1.0, rel=1e-4)


def test_ppo_trainer_step_holds_a_critic_and_learns(tmp_path):
    from tiny_runs import ppo_trainer

    trainer = ppo_trainer(tmp_path, prompts_per_step=6, max_new_tokens=6, max_steps=2, learning_rate=1e-3,
                          critic_learning_rate=1e-3)
    head_before = trainer.critic.head.weight.detach().clone()
    rows = trainer.train()
    assert len(rows) == 2 and rows[-1]["algorithm"] == "ppo"
    assert not math.isnan(rows[-1]["value_loss"]) and rows[-1]["tokens_generated"] > 0
    assert not torch.equal(head_before, trainer.critic.head.weight)     # the critic learned
    critic_state = sum(t.numel() * t.element_size() for s in trainer.critic_optimizer.optimizer.state.values()
                       for t in s.values() if torch.is_tensor(t) and t.dim() > 0)
    assert critic_state > 0                                              # and holds optimizer state


def test_is_weights_by_hand():
    from proctor.trainer.algo.is_correction import is_weights

    old = torch.tensor([[-1.0, -2.0, 0.0]])
    sampler = torch.tensor([[-1.5, -1.0, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    # d = [0.5, -1.0, 0 (masked)]
    tok = is_weights(old, sampler, mask, "token_truncate", c_max=1.5)
    assert torch.allclose(tok, torch.tensor([[1.5, math.exp(-1.0), 0.0]]))
    seq = is_weights(old, sampler, mask, "sequence_truncate", c_max=3.0)
    assert torch.allclose(seq, torch.tensor([[math.exp(-0.5), math.exp(-0.5), 0.0]]))
    masked = is_weights(old, sampler, mask, "token_mask", c_max=1.5)
    assert torch.allclose(masked, torch.tensor([[0.0, math.exp(-1.0), 0.0]]))
    with pytest.raises(ValueError, match="mode"):
        is_weights(old, sampler, mask, "nope")  # type: ignore[arg-type]


def test_is_weight_scales_the_surrogate_not_the_kl():
    from proctor.trainer.algo import policy_loss

    logp = torch.tensor([[-1.0, -1.0]], requires_grad=True)
    mask = torch.ones(1, 2)
    base = policy_loss(logp, None, torch.tensor([1.0]), mask, loss_type="dapo")
    half = policy_loss(logp, None, torch.tensor([1.0]), mask, loss_type="dapo", is_weight=torch.full((1, 2), 0.5))
    assert half.loss.item() == pytest.approx(0.5 * base.loss.item())
