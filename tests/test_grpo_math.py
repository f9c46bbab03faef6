"""Properties of the GRPO arithmetic (proctor.trainer.algo) that must hold for any input."""

from __future__ import annotations

import math
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from proctor.trainer.algo import (group_advantages, kl_estimate, mask_truncated, masked_mean,  # noqa: E402
                                  policy_loss, rewards_from_parts)

F64 = torch.float64
EPS = 1e-4
FAST = settings(max_examples=60, deadline=None)

reward = st.floats(-10.0, 10.0, allow_nan=False, allow_infinity=False)


@st.composite
def grouped_rewards(draw, min_g: int = 2, max_g: int = 8, max_groups: int = 4):
    G = draw(st.integers(min_g, max_g))
    n_groups = draw(st.integers(1, max_groups))
    values = draw(st.lists(reward, min_size=G * n_groups, max_size=G * n_groups))
    return torch.tensor(values, dtype=F64), G


def spread(x: torch.Tensor) -> float:
    return (x.max() - x.min()).item()


# ---------------------------------------------------------------- advantages
@FAST
@given(grouped_rewards(), st.floats(-100.0, 100.0), st.sampled_from(["group", "none"]), st.data())
def test_shifting_one_group_leaves_every_advantage_unchanged(rg, c, scale, data):
    rewards, G = rg
    g = data.draw(st.integers(0, rewards.numel() // G - 1))
    shifted = rewards.clone()
    shifted[g * G:(g + 1) * G] += c
    a, b = group_advantages(rewards, G, scale).advantages, group_advantages(shifted, G, scale).advantages
    # Rounding only: |c| + |r| <= 110 at 2^-52 relative, magnified by at most 1/eps.
    assert torch.allclose(a, b, rtol=0, atol=1e-8)


@FAST
@given(grouped_rewards(), st.floats(-100.0, 100.0), st.sampled_from(["group", "batch", "none"]))
def test_shifting_the_whole_batch_leaves_every_advantage_unchanged(rg, c, scale):
    rewards, G = rg
    assert torch.allclose(group_advantages(rewards, G, scale).advantages,
                          group_advantages(rewards + c, G, scale).advantages, rtol=0, atol=1e-8)


@FAST
@given(grouped_rewards(), st.floats(0.5, 10.0))
def test_group_scaled_advantages_are_scale_invariant_up_to_eps(rg, c):
    rewards, G = rg
    stats = group_advantages(rewards, G, "group")
    groups_std = rewards.view(-1, G).std(dim=1)
    assume(bool((groups_std > 0.1).all()))  # eps = 1e-4 must be small next to the spread
    scaled = group_advantages(rewards * c, G, "group").advantages
    # A(r) = z s/(s+eps) with z the exact z-score, so |A(cr) - A(r)| <= |z| eps / (min(1, c) s).
    z = (rewards.view(-1, G) - rewards.view(-1, G).mean(1, keepdim=True)) / groups_std[:, None]
    bound = (z.abs() * EPS / (min(1.0, c) * groups_std[:, None])).reshape(-1) + 1e-12
    assert ((scaled - stats.advantages).abs() <= bound).all()
    # ... and it is not exact: eps is really there.
    if c > 2 and spread(stats.advantages) > 0:
        assert (scaled - stats.advantages).abs().max() > 0


@FAST
@given(grouped_rewards(), st.floats(0.5, 10.0))
def test_unscaled_advantages_scale_with_the_rewards(rg, c):
    rewards, G = rg
    assert torch.allclose(group_advantages(rewards * c, G, "none").advantages,
                          c * group_advantages(rewards, G, "none").advantages, rtol=1e-12, atol=1e-9)


@FAST
@given(grouped_rewards(), st.sampled_from(["group", "batch", "none"]), st.randoms(use_true_random=False))
def test_permuting_within_groups_permutes_the_advantages(rg, scale, rnd):
    rewards, G = rg
    perm = torch.cat([torch.tensor(rnd.sample(range(g, g + G), G)) for g in range(0, rewards.numel(), G)])
    a = group_advantages(rewards, G, scale)
    b = group_advantages(rewards[perm], G, scale)
    assert torch.allclose(b.advantages, a.advantages[perm], rtol=0, atol=1e-9)
    assert torch.equal(b.zero_signal, a.zero_signal[perm])


@FAST
@given(st.integers(2, 8), st.data(), st.sampled_from(["group", "none"]), st.booleans())
def test_invalid_samples_get_zero_and_do_not_touch_the_others(G, data, scale, use_nan):
    rewards = torch.tensor(data.draw(st.lists(reward, min_size=G, max_size=G)), dtype=F64)
    valid = torch.tensor(data.draw(st.lists(st.booleans(), min_size=G, max_size=G)))
    assume(bool(valid.any()))
    garbage = torch.where(valid, rewards, torch.nan if use_nan else 1e9)  # an unjudged sample says nothing
    stats = group_advantages(garbage, G, scale, valid=None if use_nan else valid)
    assert (stats.advantages[~valid] == 0).all()
    assert torch.equal(stats.valid, valid)
    alone = group_advantages(rewards[valid], int(valid.sum()), scale)
    assert torch.allclose(stats.advantages[valid], alone.advantages, rtol=1e-12, atol=1e-12)
    assert torch.allclose(stats.group_mean[valid], alone.group_mean, rtol=1e-12, atol=1e-12)
    assert bool(stats.zero_signal[0]) == bool(alone.zero_signal[0])


def test_a_group_nobody_could_judge_has_zero_advantages_and_no_signal():
    rewards = torch.tensor([1.0, 0.0, torch.nan, torch.nan, 1.0, torch.nan], dtype=F64)
    stats = group_advantages(rewards, 2)
    assert stats.advantages.tolist()[2:] == [0.0, 0.0, 0.0, 0.0]
    assert stats.zero_signal.tolist() == [False, False, True, True, True, True]
    assert stats.frac_zero_signal == pytest.approx(2 / 3)


@FAST
@given(reward, st.sampled_from(["group", "batch", "none"]))
def test_two_equal_rewards_are_zero_signal_with_zero_advantages(r, scale):
    stats = group_advantages(torch.tensor([r, r], dtype=F64), 2, scale)
    assert stats.advantages.tolist() == [0.0, 0.0]
    assert stats.zero_signal.all() and stats.frac_zero_signal == 1.0
    assert stats.group_std.tolist() == [0.0, 0.0]


@FAST
@given(reward, reward)
def test_two_different_rewards_follow_the_bessel_formula(a, b):
    assume(abs(a - b) > 1e-3)
    stats = group_advantages(torch.tensor([a, b], dtype=F64), 2, "group")
    d = abs(a - b)
    # mean (a+b)/2; Bessel std sqrt(((d/2)^2 * 2) / 1) = d / sqrt(2); A = +-(d/2) / (d/sqrt(2) + eps)
    expected = (d / 2) / (d / math.sqrt(2) + EPS)
    assert stats.group_std[0].item() == pytest.approx(d / math.sqrt(2), rel=1e-12)
    assert stats.advantages[0].item() == pytest.approx(math.copysign(expected, a - b), rel=1e-9)
    assert stats.advantages[1].item() == pytest.approx(-stats.advantages[0].item(), rel=1e-12)
    assert expected < 1 / math.sqrt(2)  # eps only ever shrinks it
    assert not stats.zero_signal.any()
    none = group_advantages(torch.tensor([a, b], dtype=F64), 2, "none").advantages
    assert none[0].item() == pytest.approx((a - b) / 2, rel=1e-12, abs=1e-15)


def test_rewards_from_parts_nansum_and_unscorable_rows():
    nan = torch.nan
    parts = torch.tensor([[1.0, nan], [nan, nan], [0.5, 2.0], [nan, 1.0]], dtype=F64)
    r = rewards_from_parts(parts, torch.tensor([2.0, 0.5], dtype=F64))
    assert r[0].item() == 2.0 and math.isnan(r[1].item()) and r[2].item() == 2.0 and r[3].item() == 0.5


def test_bad_group_layout_is_refused():
    with pytest.raises(ValueError):
        group_advantages(torch.zeros(7), 4)
    with pytest.raises(ValueError):
        rewards_from_parts(torch.zeros(6, 2), torch.ones(2), "normalize_then_sum")


# ---------------------------------------------------------------- loss
@st.composite
def loss_batches(draw):
    B, T = draw(st.integers(2, 6)), draw(st.integers(1, 8))
    seed = draw(st.integers(0, 2**31 - 1))
    g = torch.Generator().manual_seed(seed)
    mask = (torch.rand(B, T, generator=g) < 0.7).long()
    empty = draw(st.lists(st.booleans(), min_size=B, max_size=B))
    assume(not all(empty))
    empty = torch.tensor(empty)
    mask[empty] = 0
    logp = -3 * torch.rand(B, T, generator=g, dtype=F64)
    old = logp + 0.3 * torch.randn(B, T, generator=g, dtype=F64)
    ref = logp + 0.3 * torch.randn(B, T, generator=g, dtype=F64)
    ent = torch.rand(B, T, generator=g, dtype=F64)
    adv = torch.randn(B, generator=g, dtype=F64)
    return mask, logp, old, ref, ent, adv, empty


LOSS_KW = st.fixed_dictionaries({
    "loss_type": st.sampled_from(["grpo", "bnpo", "dr_grpo", "dapo"]),
    "importance_level": st.sampled_from(["token", "sequence"]),
    "beta": st.sampled_from([0.0, 0.04]),
    "epsilon_high": st.sampled_from([None, 0.28]),
    "delta": st.sampled_from([None, 1.5]),
    "entropy_coef": st.sampled_from([0.0, 0.01]),
})


def run_loss(logp, old, adv, mask, ref, ent, kw):
    logp = logp.clone().requires_grad_(True)
    ent = ent.clone().requires_grad_(True)
    out = policy_loss(logp, old, adv, mask, ref_logp=ref, entropy=ent, max_completion_length=8, **kw)
    out.loss.backward()
    return out, logp.grad, torch.zeros_like(ent) if ent.grad is None else ent.grad


@FAST
@given(loss_batches(), LOSS_KW, st.booleans())
def test_masked_tokens_and_empty_rows_give_no_loss_and_no_gradient(batch, kw, with_old):
    mask, logp, old, ref, ent, adv, empty = batch
    old = old if with_old else None
    out, g_logp, g_ent = run_loss(logp, old, adv, mask, ref, ent, kw)
    assert torch.isfinite(out.loss)
    off = mask == 0
    assert (g_logp[off] == 0).all() and (g_logp[empty] == 0).all()
    assert (g_ent[off] == 0).all()
    # Garbage where the mask is off (NaN, -inf) changes nothing at all.
    garbage = torch.tensor([torch.nan, -torch.inf], dtype=F64)[torch.randint(0, 2, mask.shape)]
    junk = lambda x: torch.where(off, garbage, x)  # noqa: E731
    out2, g2, ge2 = run_loss(junk(logp), None if old is None else junk(old), adv, mask, junk(ref), junk(ent), kw)
    assert torch.equal(out2.loss, out.loss) and torch.equal(g2, g_logp) and torch.equal(ge2, g_ent)
    # Removing the empty rows: token-normalised losses are unchanged; the per-sequence ones
    # (grpo, dr_grpo) only lose the rows from their divisor B. (The entropy bonus is a token
    # mean whatever the loss type, so it is left out of this comparison.)
    keep = ~empty
    kw = dict(kw, entropy_coef=0.0)
    out, g_logp, _ = run_loss(logp, old, adv, mask, ref, ent, kw)
    out3, g3, _ = run_loss(logp[keep], None if old is None else old[keep], adv[keep], mask[keep], ref[keep],
                           ent[keep], kw)
    rows = len(empty) / int(keep.sum()) if kw["loss_type"] in ("grpo", "dr_grpo") else 1.0
    assert torch.allclose(out.loss * rows, out3.loss, rtol=1e-12, atol=1e-14)
    assert torch.allclose(g_logp[keep] * rows, g3, rtol=1e-12, atol=1e-14)


@FAST
@given(loss_batches(), LOSS_KW)
def test_on_policy_gradient_is_advantage_times_grad_logp(batch, kw):
    """old_logp=None: rho = 1 in value, and d loss / d logp_t = -A m_t / normaliser (no clipping)."""
    mask, logp, _, ref, ent, adv, _ = batch
    kw = dict(kw, beta=0.0, entropy_coef=0.0, importance_level="token")
    out, g, _ = run_loss(logp, None, adv, mask, ref, ent, kw)
    m = mask.to(F64)
    norm = {"grpo": m.sum(1, keepdim=True).clamp(min=1) * len(m), "bnpo": m.sum().clamp(min=1),
            "dr_grpo": torch.tensor(len(m) * 8.0), "dapo": m.sum().clamp(min=1)}[kw["loss_type"]]
    assert torch.allclose(g, -adv[:, None] * m / norm, rtol=1e-12, atol=1e-15)
    if mask.any():  # with no token at all there is no ratio to report (NaN)
        assert out.ratio_min.item() == out.ratio_max.item() == 1.0
    assert out.clip_region_frac.item() == 0.0


def test_clipping_stops_the_gradient_only_on_the_side_that_gains():
    logp = torch.log(torch.tensor([[1.5, 1.5, 0.5, 0.5]], dtype=F64)).requires_grad_(True)
    old = torch.zeros(1, 4, dtype=F64)  # rho = 1.5, 1.5, 0.5, 0.5
    mask = torch.ones(1, 4)
    for adv, live in [(1.0, [0, 0, 1, 1]), (-1.0, [1, 1, 0, 0])]:
        logp.grad = None
        out = policy_loss(logp, old, torch.tensor([adv], dtype=F64), mask, epsilon_low=0.2, epsilon_high=0.28)
        out.loss.backward()
        assert ((logp.grad != 0).long().tolist()[0]) == live
        assert out.clip_region_frac.item() == 0.5
    # delta caps the ratio of a negative-advantage token that the clip leaves alone.
    logp.grad = None
    policy_loss(logp, old, torch.tensor([-1.0], dtype=F64), mask, delta=1.2).loss.backward()
    assert (logp.grad[0, :2] == 0).all()


def test_mask_truncated_and_masked_mean():
    mask = torch.ones(3, 4, dtype=torch.long)
    out = mask_truncated(mask, torch.tensor([False, True, False]))
    assert out.tolist() == [[1] * 4, [0] * 4, [1] * 4] and out.dtype == mask.dtype
    x = torch.arange(12, dtype=F64).view(3, 4)
    assert masked_mean(x, out).item() == pytest.approx((0 + 1 + 2 + 3 + 8 + 9 + 10 + 11) / 8)
    assert masked_mean(x, out, dim=1).tolist() == [1.5, 0.0, 9.5]


def test_low_precision_inputs_are_reduced_in_float32():
    g = torch.Generator().manual_seed(0)
    B, T = 4, 700  # 2800 tokens: far past what bfloat16 can count exactly
    mask = torch.ones(B, T)
    mask[0, 300:] = 0
    logp = -torch.rand(B, T, generator=g, dtype=F64)
    old = logp + 0.05 * torch.randn(B, T, generator=g, dtype=F64)
    adv = torch.tensor([1.0, -0.5, 0.25, -2.0], dtype=F64)
    assert masked_mean(torch.ones(B, T, dtype=torch.bfloat16), mask).item() == 1.0
    for loss_type in ("grpo", "bnpo", "dr_grpo", "dapo"):
        exact = policy_loss(logp, old, adv, mask, loss_type=loss_type, num_items_in_batch=2401.0)
        low = policy_loss(logp.bfloat16(), old.bfloat16(), adv.float(), mask, loss_type=loss_type,
                          num_items_in_batch=2401.0)
        assert low.loss.dtype == torch.float32
        # Only the bf16 rounding of the inputs remains (~2^-9 relative on each log-prob).
        assert low.loss.item() == pytest.approx(exact.loss.item(), rel=1e-2, abs=1e-3)


def test_loss_argument_errors():
    z = torch.zeros(2, 3)
    with pytest.raises(ValueError):
        policy_loss(z, None, torch.zeros(2), torch.ones(2, 3), beta=0.1)
    with pytest.raises(ValueError):
        policy_loss(z, None, torch.zeros(2), torch.ones(2, 3), loss_type="ppo")


# ---------------------------------------------------------------- KL estimators
@pytest.mark.parametrize("seed", range(6))
def test_k1_and_k3_are_unbiased_and_k2_is_close_for_sampled_categoricals(seed):
    g = torch.Generator().manual_seed(seed)
    V = 3 + seed * 3
    logp_all = torch.log_softmax(torch.randn(V, generator=g, dtype=F64), 0)
    logq_all = torch.log_softmax(logp_all + 0.5 * torch.randn(V, generator=g, dtype=F64), 0)
    true_kl = (logp_all.exp() * (logp_all - logq_all)).sum().item()
    x = torch.multinomial(logp_all.exp(), 200_000, replacement=True, generator=g)  # tokens ~ pi_theta
    for kind in ("k1", "k3"):
        k = kl_estimate(logp_all[x], logq_all[x], kind)
        se = k.std().item() / math.sqrt(k.numel())
        assert abs(k.mean().item() - true_kl) < 5 * se, kind  # 5 sigma: fails ~1 in 3.5 million
    # k3 has the smaller variance here (the reason GRPO uses it); k2 is biased but close for small KL.
    assert kl_estimate(logp_all[x], logq_all[x], "k3").var() < kl_estimate(logp_all[x], logq_all[x], "k1").var()
    assert kl_estimate(logp_all[x], logq_all[x], "k2").mean().item() == pytest.approx(true_kl, rel=0.5)


logprob = st.floats(-60.0, 0.0, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(logprob, logprob, st.sampled_from([torch.float64, torch.float32, torch.bfloat16]))
def test_k3_and_k2_are_never_negative(a, b, dtype):
    lp, ref = torch.tensor([a], dtype=dtype), torch.tensor([b], dtype=dtype)
    assert kl_estimate(lp, ref, "k3").item() >= 0
    assert kl_estimate(lp, ref, "k2").item() >= 0


@settings(max_examples=300, deadline=None)
@given(st.floats(-1e-6, 1e-6), st.sampled_from([torch.float64, torch.float32]))
def test_k3_is_never_negative_near_zero(r, dtype):
    lp = torch.tensor([-1.0], dtype=dtype)
    assert kl_estimate(lp, lp + r, "k3").item() >= 0


@FAST
@given(logprob)
def test_estimators_vanish_when_policy_equals_reference(a):
    lp = torch.tensor([a, a / 2], dtype=F64)
    for kind in ("k1", "k2", "k3"):
        assert kl_estimate(lp, lp.clone(), kind).tolist() == [0.0, 0.0]
