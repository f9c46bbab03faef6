"""The sampler/learner importance-sampling correction: why "auto" is token-level truncated IS
(TIS, cap 2) rather than a sequence-level product, the bounds and their validation, and what
the learner logs about it. The synthetic mismatches are ``bench/is_correction.py``'s."""

from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch = pytest.importorskip("torch")

from test_grpo_trainer import fresh_accelerator_state  # noqa: E402,F401
from test_micro_batch_loss import _batch, _learner  # noqa: E402

from proctor.trainer.algo.is_correction import importance_weights, is_weights  # noqa: E402
from proctor.trainer.batch import token_logps  # noqa: E402
from proctor.trainer.config import GRPOConfig, RolloutConfig, resolve_is_correction  # noqa: E402
from proctor.trainer.learn.objective import GRPOMicroLoss  # noqa: E402
from proctor.trainer.records import LossSpec  # noqa: E402

BENCH = Path(__file__).resolve().parents[1] / "bench" / "is_correction.py"
_spec = importlib.util.spec_from_file_location("is_bench", BENCH)
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

LENGTHS = (16, 256, 2048)
NOISE = bench.NOISE["large"]          # mean |log pi_old - log pi_sampler| about 0.05 per token


def _stats(mode: str, c_max: float, c_min=None) -> list[dict[str, float]]:
    out = []
    for T in LENGTHS:
        old, sampler = bench.simulate(64, T, NOISE, seed=T)
        out.append(bench.weight_stats(old, sampler, mode, c_max, c_min))
    return out


def test_sequence_weights_spread_with_length_and_token_weights_do_not():
    """The old default (sequence_mask, cap 3): the log-weight's spread grows as sqrt(T), the
    effective sample size collapses and most of pi_old's mass is lost on long completions.
    Token-level truncated IS at 2: the same spread, sample size and mass at every length."""
    seq = _stats("sequence_mask", 3.0)
    tok = _stats("token_truncate", 2.0)
    spread = [s["log_w_std"] for s in seq]
    assert spread[0] < spread[1] < spread[2] and spread[2] > 5 * spread[0]      # ~ sqrt(T)
    assert seq[0]["ess"] > 0.8 > 0.3 > seq[2]["ess"]                            # a few sequences carry the batch
    assert seq[2]["left"] > 0.5                                                  # most of the mass gone
    for s in tok:
        assert s["log_w_std"] == pytest.approx(tok[0]["log_w_std"], rel=0.1)    # per-token: no growth
        assert s["ess"] > 0.99 and s["altered"] < 1e-3 and abs(s["left"]) < 0.01


def test_auto_resolves_to_token_truncate_at_cap_2_with_vllm():
    for backend in ("vllm", "vllm_server"):
        rollout = GRPOConfig.from_flat(rollout_backend=backend).rollout
        assert resolve_is_correction(rollout) == "token_truncate"
        assert rollout.is_cap == 2.0 and rollout.is_min is None
    assert resolve_is_correction(GRPOConfig().rollout) is None                  # transformers: its own kernels
    assert resolve_is_correction(RolloutConfig(backend="vllm", is_correction="off")) is None
    assert resolve_is_correction(RolloutConfig(backend="vllm", is_correction="sequence_mask")) == "sequence_mask"


def test_the_default_correction_stays_bounded_on_long_completions():
    """What a vLLM run gets by default, on 2048-token completions with a 0.05 per-token mismatch."""
    rollout = GRPOConfig.from_flat(rollout_backend="vllm").rollout
    s = _stats(resolve_is_correction(rollout), rollout.is_cap, rollout.is_min)[-1]
    assert s["ess"] > 0.99 and abs(s["left"]) < 0.01


@pytest.mark.parametrize("correction", ["auto", "off", "token_truncate"])
def test_the_trainer_resolves_auto_as_the_config_does(tmp_path, correction):
    from tiny_runs import arithmetic_trainer

    with arithmetic_trainer(tmp_path, is_correction=correction) as trainer:
        assert trainer.is_mode == resolve_is_correction(trainer.cfg.rollout)


@pytest.mark.parametrize("kw, message", [
    (dict(rollout_backend="vllm", is_cap=0.5), r"rollout.is_cap must be >= 1 \(got 0.5\).*2 is the usual cap"),
    (dict(rollout_backend="vllm", is_min=1.0), r"rollout.is_min must be in \[0, 1\) or null \(got 1.0\)"),
    (dict(rollout_backend="vllm", is_min=-0.1), r"rollout.is_min must be in \[0, 1\)"),
    (dict(is_min=0.5), r"rollout.is_min is set but no IS correction is in force.*choose a rollout.is_correction"),
    (dict(rollout_backend="vllm", is_correction="off", is_min=0.5), r"no IS correction is in force"),
])
def test_is_bounds_are_refused_with_the_field_and_the_fix(kw, message):
    with pytest.raises(ValueError, match=message):
        GRPOConfig.from_flat(**kw)


def test_is_bounds_that_make_sense_are_accepted():
    cfg = GRPOConfig.from_dict({"rollout": {"backend": "vllm", "is_correction": "token_mask", "is_cap": 2.0,
                                            "is_min": 0.5}})
    assert cfg.rollout.is_min == 0.5


def test_weights_and_bounds_by_hand():
    old = torch.tensor([[math.log(3.0), math.log(0.25), 0.0, 5.0]])
    sampler = torch.zeros(1, 4)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])                 # r = 3, 0.25, 1 (and padding)
    w = importance_weights(old, sampler, mask, "token_truncate", c_max=2.0, c_min=0.5)
    assert torch.allclose(w.weight, torch.tensor([[2.0, 0.5, 1.0, 0.0]]))
    assert w.truncated.tolist() == [[True, True, False, False]] and not w.masked.any()
    w = importance_weights(old, sampler, mask, "token_mask", c_max=2.0, c_min=0.5)
    assert torch.allclose(w.weight, torch.tensor([[0.0, 0.0, 1.0, 0.0]]))
    assert w.masked.tolist() == [[True, True, False, False]] and not w.truncated.any()
    # sequence: r = 3 * 0.25 * 1 = 0.75 on every masked token; kept at [0.5, 2], cut at [0.8, 2]
    assert torch.allclose(is_weights(old, sampler, mask, "sequence_mask", 2.0, 0.5), torch.tensor([[0.75] * 3 + [0.0]]))
    w = importance_weights(old, sampler, mask, "sequence_truncate", 2.0, 0.8)
    assert torch.allclose(w.weight, torch.tensor([[0.8] * 3 + [0.0]])) and w.truncated.sum() == 3


def test_an_overflowing_sequence_weight_is_masked_to_zero_not_nan():
    """sum_t d_t = 100: exp overflows float32 to inf, and inf * 0 was NaN in the loss."""
    old, sampler, mask = torch.full((1, 2), 50.0), torch.zeros(1, 2), torch.ones(1, 2)
    assert is_weights(old, sampler, mask, "sequence_mask", 3.0).tolist() == [[0.0, 0.0]]
    assert is_weights(old, sampler, torch.tensor([[1.0, 0.0]]), "token_mask", 3.0,
                      ).tolist() == [[0.0, 0.0]]                # -inf-free padding: masked_fill, not a product


def test_the_learner_logs_the_share_of_tokens_truncated_and_masked():
    """Rows with r = pi_old/pi_sampler of 3, 1, 0.25, 1.5, 1 on 4, 3, 2, 4, 1 tokens; bounds [0.5, 2]."""
    r = torch.tensor([3.0, 1.0, 0.25, 1.5, 1.0])
    for mode, frac_key, weight_mean in [
            ("token_truncate", "is_truncated_frac", (4 * 2 + 3 + 2 * 0.5 + 4 * 1.5 + 1) / 14),
            ("token_mask", "is_masked_frac", (3 + 4 * 1.5 + 1) / 14)]:
        batch = _batch([1.0, -0.5, 0.7, -1.2, 0.3])
        learner, model, acc, _ = _learner(2)
        with torch.no_grad():
            logp = token_logps(model, batch, 1.0)[0]
        batch.sampler_logp = (logp - torch.log(r)[:, None]) * batch.mask
        spec = LossSpec("dapo", "token", 0.2, 0.28, None, 0.0, "k3", 0.0, 6, 1.0, is_min=0.5)
        loss = GRPOMicroLoss(model, spec, float(batch.mask.sum()), 1, acc.autocast, None, None, mode, 2.0)
        v = learner.update(batch, loss).values
        assert v[frac_key] == pytest.approx(6 / 14)
        assert v["is_weight_mean"] == pytest.approx(weight_mean, rel=1e-5)
        assert v["sampler_ratio_max"] == pytest.approx(3.0, rel=1e-5)        # the extreme, not a mean of extremes
        assert v["sampler_ratio_min"] == pytest.approx(0.25, rel=1e-5)
