"""proctor.trainer.algo against TRL's own code (trl 1.16), in float64.

* Loss: the real, unbound ``GRPOTrainer._compute_loss`` runs on a stand-in ``self`` that has
  only the attributes it reads, with ``_get_per_token_logps_and_entropies`` replaced on the
  instance by a function returning fixed leaf tensors. Loss values, gradients with respect
  to those leaves and the logged metrics are compared with ours.
* Advantages: TRL computes them inline in ``_generate_and_score_completions`` (no function
  to call without generating), so ``trl_advantages`` below repeats its few tensor lines,
  calling TRL's own ``nanstd``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

from collections import defaultdict  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("trl")
from trl.trainer.grpo_trainer import GRPOTrainer  # noqa: E402
from trl.trainer.utils import nanstd as trl_nanstd  # noqa: E402

from proctor.trainer.algo import group_advantages, nanstd, policy_loss, rewards_from_parts  # noqa: E402

F64 = torch.float64


def close(a, b, tol: float = 1e-10) -> bool:
    return torch.allclose(torch.as_tensor(a, dtype=F64), torch.as_tensor(b, dtype=F64), rtol=tol, atol=tol,
                          equal_nan=True)


# ---------------------------------------------------------------- advantages
# TRL's nanstd computes Bessel's factor as ``count / (count - 1)`` from integer counts, which
# lands in torch's *default* dtype (float32): 4/3 and 8/7 then carry a ~1e-8 relative error
# even for float64 rewards. Ours is exact in the rewards' dtype. To compare everything else
# to 1e-12 the TRL side runs with float64 as the default dtype; test_trl_nanstd_float32_quirk
# pins the size of the difference under the normal default.
class float64_default:
    def __enter__(self):
        self.saved = torch.get_default_dtype()
        torch.set_default_dtype(F64)

    def __exit__(self, *exc):
        torch.set_default_dtype(self.saved)


def trl_advantages(parts: torch.Tensor, weights: torch.Tensor, G: int, scale: str, aggregation: str):
    """TRL 1.16 ``_generate_and_score_completions``, the advantage lines, single process."""
    with float64_default():
        return _trl_advantages(parts, weights, G, scale, aggregation)


def _trl_advantages(parts: torch.Tensor, weights: torch.Tensor, G: int, scale: str, aggregation: str):
    unscorable = torch.isnan(parts).all(dim=1)
    if aggregation == "sum_then_normalize":
        rewards = (parts * weights.unsqueeze(0)).nansum(dim=1)
        rewards[unscorable] = torch.nan
        mean = torch.nanmean(rewards.view(-1, G), dim=1).repeat_interleave(G, dim=0)
        if scale in ("group", "none"):
            std = (trl_nanstd(rewards.view(-1, G), dim=1).repeat_interleave(G, dim=0) if G > 1
                   else torch.zeros_like(rewards))
        else:
            std = trl_nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
        adv = rewards - mean
        if scale != "none":
            adv = adv / (std + 1e-4)
    else:
        grouped = parts.view(-1, G, parts.shape[1])
        mean_k = torch.nanmean(grouped, dim=1, keepdim=True)
        std_k = trl_nanstd(grouped, dim=1, keepdim=True) if G > 1 else torch.zeros_like(mean_k)
        reward_k = ((grouped - mean_k) / (std_k + 1e-4)).view(-1, parts.shape[1])
        rewards = (reward_k * weights.unsqueeze(0)).nansum(dim=1)
        rewards[unscorable] = torch.nan
        std = trl_nanstd(rewards).expand_as(rewards) if rewards.numel() > 1 else torch.zeros_like(rewards)
        mean = torch.nanmean(rewards).expand_as(rewards)
        adv = (rewards - mean) / (std + 1e-4)
    is_std_zero = torch.isclose(std, torch.zeros_like(std))
    return torch.nan_to_num(adv, nan=0.0), rewards, mean, std, is_std_zero


def random_parts(seed: int, groups: int, G: int, K: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    N = groups * G
    binary = torch.randint(0, 2, (N, K), generator=g).to(F64)      # 0/1 verifiers: many zero-std groups
    real = torch.randn(N, K, generator=g, dtype=F64)
    parts = torch.where(torch.rand(N, K, generator=g) < 0.5, binary, real)
    parts[torch.rand(N, K, generator=g) < 0.15] = torch.nan          # a function that does not apply
    parts[torch.rand(N, generator=g) < 0.1] = torch.nan              # unscorable rows
    parts[:G] = 1.0                                                  # a solved group: zero signal
    if groups > 2:
        parts[G:2 * G] = torch.nan                                   # a group nobody could judge
        parts[2 * G + 1:3 * G] = torch.nan                           # a group with a single valid sample
    return parts


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("G", [2, 4, 8])
@pytest.mark.parametrize("K", [1, 3])
@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_advantages_sum_then_normalize_match_trl(seed, G, K, scale):
    parts = random_parts(seed, groups=5, G=G, K=K)
    weights = torch.linspace(1.0, 0.25, K, dtype=F64)
    adv_trl, rewards_trl, mean_trl, std_trl, _ = trl_advantages(parts, weights, G, scale, "sum_then_normalize")

    rewards = rewards_from_parts(parts, weights)
    stats = group_advantages(rewards, G, scale=scale)
    assert close(rewards, rewards_trl)
    assert close(stats.advantages, adv_trl)
    assert close(stats.group_mean, mean_trl)
    if scale != "batch":
        assert close(stats.group_std, std_trl)
    # Invalid samples: exactly 0, never a "wrong answer".
    assert (stats.advantages[torch.isnan(rewards)] == 0).all()


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("G", [2, 4])
def test_valid_mask_is_the_same_as_a_nan_reward(seed, G):
    """TRL spells "not judged" as an all-None (NaN) row; our ``valid=False`` must match it."""
    parts = random_parts(seed, groups=4, G=G, K=1)
    weights = torch.ones(1, dtype=F64)
    adv_trl = trl_advantages(parts, weights, G, "group", "sum_then_normalize")[0]
    rewards = parts[:, 0]
    valid = ~torch.isnan(rewards)
    stats = group_advantages(torch.nan_to_num(rewards, nan=0.0), G, valid=valid)
    assert close(stats.advantages, adv_trl)


def test_frac_zero_signal_matches_trl_when_every_group_has_two_valid_samples():
    g = torch.Generator().manual_seed(0)
    G = 4
    rewards = torch.randint(0, 2, (40 * G,), generator=g).to(F64)  # binary: a zero std is exactly 0
    is_std_zero = trl_advantages(rewards[:, None], torch.ones(1, dtype=F64), G, "group", "sum_then_normalize")[-1]
    stats = group_advantages(rewards, G)
    assert 0 < stats.frac_zero_signal < 1
    assert stats.frac_zero_signal == pytest.approx(is_std_zero.double().mean().item(), abs=1e-12)
    assert torch.equal(stats.zero_signal, is_std_zero)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("G", [1, 2, 4])
def test_advantages_normalize_then_sum_match_trl(seed, G):
    parts = random_parts(seed, groups=5, G=G, K=3)
    weights = torch.tensor([1.0, 0.5, 2.0], dtype=F64)
    adv_trl, rewards_trl, *_ = trl_advantages(parts, weights, G, "group", "normalize_then_sum")
    rewards = rewards_from_parts(parts, weights, "normalize_then_sum", group_size=G)
    stats = group_advantages(rewards, G, scale="batch", center="batch")
    assert close(rewards, rewards_trl)
    assert close(stats.advantages, adv_trl)


@pytest.mark.parametrize("seed", range(3))
def test_nanstd_matches_trl(seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(7, 5, generator=g, dtype=F64)
    x[torch.rand(7, 5, generator=g) < 0.3] = torch.nan
    x[0] = torch.nan
    x[1, 1:] = torch.nan
    with float64_default():
        for dim in (None, 0, 1):
            assert close(nanstd(x, dim=dim), trl_nanstd(x, dim=dim))
            if dim is not None:
                assert close(nanstd(x, dim=dim, keepdim=True), trl_nanstd(x, dim=dim, keepdim=True))


def test_trl_nanstd_float32_quirk():
    x = torch.tensor([[0.0, 1.0, 3.0, 7.0]], dtype=F64)  # n = 4: Bessel's factor 4/3 is inexact in float32
    exact = torch.tensor([x.std().item()], dtype=F64)
    assert torch.equal(nanstd(x, dim=1), exact)
    with float64_default():
        assert close(trl_nanstd(x, dim=1), exact, tol=1e-15)
    if torch.get_default_dtype() == torch.float32:
        off = (trl_nanstd(x, dim=1) / exact - 1).abs().item()
        assert 0 < off < 1e-7


# ---------------------------------------------------------------- loss
def make_batch(seed: int, B: int, T: int, holes: bool):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, T + 1, (B,), generator=g)
    lengths[0], lengths[-1] = 0, T                              # an empty row and a full one
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    if holes:                                                   # tool-output tokens cut out of the loss
        mask = mask * (torch.rand(B, T, generator=g) > 0.25).long()
    logp = -torch.rand(B, T, generator=g, dtype=F64) * 3.0      # values at padding are arbitrary too
    old = logp + 0.3 * torch.randn(B, T, generator=g, dtype=F64)  # wide enough to clip both ways
    ref = logp + 0.5 * torch.randn(B, T, generator=g, dtype=F64)
    entropy = torch.rand(B, T, generator=g, dtype=F64) * 2.0
    adv = torch.randn(B, generator=g, dtype=F64)
    adv[1] = 0.0
    return mask, logp, old, ref, entropy, adv


class _Accelerator:
    num_processes = 1
    sync_gradients = True

    def __init__(self, num_processes: int = 1):
        self.num_processes = num_processes

    @staticmethod
    def reduce(x, reduction="sum"):
        return x

    @staticmethod
    def gather(x):
        return x

    gather_for_metrics = gather


def trl_loss(batch, *, loss_type, importance_level, beta, epsilon, epsilon_high, with_old, delta=None,
             entropy_coef=0.0, M=1, S=1, P=1, num_items=None, max_completion_length=None):
    """Call the real ``GRPOTrainer._compute_loss``; return loss, grads w.r.t. logps/entropies, metrics.

    The stand-in has every attribute that path reads. The branches policy_loss does not
    implement are switched off: top-entropy mask, off-policy sequence mask, vLLM
    importance-sampling correction, KL bias correction, MoE aux loss, adaptive entropy.
    Every case compared here runs TRL's real code; none needed a transcription.
    """
    mask, logp, old, ref, entropy, adv = batch
    B, T = mask.shape
    logp_leaf = logp.clone().requires_grad_(True)
    entropy_leaf = entropy.clone().requires_grad_(True)
    stub = SimpleNamespace(
        args=SimpleNamespace(use_bias_correction_kl=False, delta=delta, steps_per_generation=S),
        loss_type=loss_type, beta=beta, importance_sampling_level=importance_level,
        epsilon_low=epsilon, epsilon_high=epsilon if epsilon_high is None else epsilon_high,  # as GRPOTrainer.__init__
        max_completion_length=T if max_completion_length is None else max_completion_length,
        aux_loss_enabled=False, top_entropy_quantile=1.0, off_policy_mask_threshold=None,
        use_vllm=False, vllm_importance_sampling_correction=False,
        model=SimpleNamespace(training=True), current_gradient_accumulation_steps=M,
        accelerator=_Accelerator(P), _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        entropy_coef=entropy_coef, use_adaptive_entropy=False, _entropy_bonus_enabled=entropy_coef != 0.0,
    )
    stub._get_per_token_logps_and_entropies = lambda *a, **k: (logp_leaf, entropy_leaf, None)
    inputs = {
        "prompt_ids": torch.zeros(B, 2, dtype=torch.long), "prompt_mask": torch.ones(B, 2, dtype=torch.long),
        "completion_ids": torch.zeros(B, T, dtype=torch.long), "completion_mask": mask,
        "advantages": adv,
        # In TRL this count is an integer tensor, and ``.clamp(min=1.0) / P`` then runs in float32
        # (a ~1e-8 relative difference); a float64 count keeps the comparison at 1e-12.
        "num_items_in_batch": torch.tensor(float(mask.sum() if num_items is None else num_items), dtype=F64),
    }
    if with_old:
        inputs["old_per_token_logps"] = old
    if beta != 0.0:
        inputs["ref_per_token_logps"] = ref
    loss = GRPOTrainer._compute_loss(stub, None, inputs)
    loss.backward()
    metrics = {k: v[-1] for k, v in stub._metrics["train"].items()}
    return loss.detach(), logp_leaf.grad, entropy_leaf.grad, metrics


def ours(batch, *, loss_type, importance_level, beta, epsilon, epsilon_high, with_old, delta=None,
         entropy_coef=0.0, M=1, S=1, P=1, num_items=None, max_completion_length=None):
    mask, logp, old, ref, entropy, adv = batch
    logp_leaf = logp.clone().requires_grad_(True)
    entropy_leaf = entropy.clone().requires_grad_(True)
    out = policy_loss(
        logp_leaf, old if with_old else None, adv, mask, loss_type=loss_type, importance_level=importance_level,
        epsilon_low=epsilon, epsilon_high=epsilon_high, delta=delta, beta=beta,
        ref_logp=ref if beta != 0.0 else None, max_completion_length=max_completion_length,
        num_items_in_batch=num_items, num_processes=P, grad_accum_steps=M, steps_per_generation=S,
        entropy=entropy_leaf, entropy_coef=entropy_coef,
    )
    out.loss.backward()
    grad_entropy = entropy_leaf.grad if entropy_leaf.grad is not None else torch.zeros_like(entropy)
    return out, logp_leaf.grad, grad_entropy


def assert_same(batch, **kw):
    loss_t, grad_t, grad_ent_t, metrics = trl_loss(batch, **kw)
    out, grad, grad_ent = ours(batch, **kw)
    assert close(out.loss, loss_t), (out.loss.item(), loss_t.item())
    assert close(grad, grad_t)
    assert close(grad_ent, grad_ent_t if grad_ent_t is not None else torch.zeros_like(grad_ent))
    if batch[0].shape[1] == 1:
        # TRL's metric helper takes any [B, 1] tensor for a sequence-level one and averages it
        # over all B rows, mask ignored; with T = 1 its token-level entropy and clip metrics
        # therefore count padding. Ours stay masked token means, so only loss and grads compare.
        return out
    # TRL logs the clip fractions from ``flag.float()``, i.e. in float32: compare to float32 precision.
    assert close(out.clip_low_frac, metrics["clip_ratio/low_mean"], tol=1e-7)
    assert close(out.clip_high_frac, metrics["clip_ratio/high_mean"], tol=1e-7)
    assert close(out.clip_region_frac, metrics["clip_ratio/region_mean"], tol=1e-7)
    assert close(out.entropy_mean, metrics["entropy"])
    if kw["beta"] != 0.0:
        assert close(out.kl_mean, metrics["kl"])
    return out


SHAPES = [(6, 9, False), (5, 1, False), (8, 17, True)]


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("importance_level", ["token", "sequence"])
@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("epsilon_high", [None, 0.28])
@pytest.mark.parametrize("with_old", [True, False])
def test_policy_loss_matches_trl(loss_type, importance_level, beta, epsilon_high, with_old):
    clipped = 0.0
    for seed, (B, T, holes) in enumerate(SHAPES * 2):
        out = assert_same(make_batch(seed, B, T, holes), loss_type=loss_type, importance_level=importance_level,
                          beta=beta, epsilon=0.2, epsilon_high=epsilon_high, with_old=with_old)
        clipped += out.clip_region_frac.item()
    # The comparison only means something if the clip was actually exercised.
    assert (clipped > 0) == with_old


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
@pytest.mark.parametrize("importance_level", ["token", "sequence"])
def test_delta_and_entropy_bonus_match_trl(loss_type, importance_level):
    for seed, (B, T, holes) in enumerate(SHAPES):
        batch = make_batch(100 + seed, B, T, holes)
        assert_same(batch, loss_type=loss_type, importance_level=importance_level, beta=0.04, epsilon=0.2,
                    epsilon_high=0.28, with_old=True, delta=1.1)
        assert_same(batch, loss_type=loss_type, importance_level=importance_level, beta=0.0, epsilon=0.2,
                    epsilon_high=None, with_old=True, entropy_coef=0.01)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_accumulation_processes_and_normalisers_match_trl(loss_type):
    for seed, (B, T, holes) in enumerate(SHAPES):
        batch = make_batch(200 + seed, B, T, holes)
        n_local = int(batch[0].sum())
        for M, S, P, num_items, L in [(2, 2, 1, None, None), (4, 8, 2, 3 * n_local + 5, 32), (2, 1, 3, 0, 20)]:
            if num_items is None and loss_type == "dapo":
                num_items = n_local  # our default (None) is the local count with no M/S/P scaling; tested below
            assert_same(batch, loss_type=loss_type, importance_level="token", beta=0.04, epsilon=0.2,
                        epsilon_high=0.28, with_old=True, entropy_coef=0.01, M=M, S=S, P=P,
                        num_items=num_items, max_completion_length=L)


def test_dapo_without_num_items_is_the_local_token_mean():
    batch = make_batch(7, 6, 9, True)
    kw = dict(loss_type="dapo", importance_level="token", beta=0.04, epsilon=0.2, epsilon_high=0.28, with_old=True)
    loss_t, grad_t, _, _ = trl_loss(batch, **kw)  # TRL with N = local tokens, M = S = P = 1
    out, grad, _ = ours(batch, **kw)               # ours with num_items_in_batch=None
    assert close(out.loss, loss_t) and close(grad, grad_t)
