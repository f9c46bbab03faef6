"""``token_logps`` (completion positions only, chunked log-softmax, gradient written over the
logits) against the computation it replaced, kept below verbatim as the reference: the same
log-probs, entropies and parameter gradients to 1e-6, on the project's tiny model and on a
random-weight model, right- and left-padded, with the entropy in the loss and without; then
what the rewrite promises besides (fewer positions projected, a detached entropy metric,
loud failure instead of a silently wrong second backward, the measured peak)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from proctor.trainer.algo import policy_loss  # noqa: E402
from proctor.trainer.batch import TrainBatch, build_batch, token_logps  # noqa: E402
from proctor.trainer.rollout import Rollout  # noqa: E402

BENCH = Path(__file__).resolve().parents[1] / "bench" / "logp_memory.py"
TEMPERATURE = 0.7


def reference_token_logps(model, batch, temperature, with_entropy=False):
    """``token_logps`` before the rewrite (commit 88e1bdb), verbatim."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1].float()
    logits = logits / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, batch.targets.unsqueeze(-1)).squeeze(-1)
    entropy = None
    if with_entropy:
        entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


@pytest.fixture(scope="module", params=["tiny", "random"])
def model(request):
    if request.param == "tiny":
        from proctor.tiny_model import tiny_model_path

        return transformers.AutoModelForCausalLM.from_pretrained(tiny_model_path(pretrain_steps=0)).eval()
    cfg = transformers.LlamaConfig(vocab_size=3000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=False)
    torch.manual_seed(1)
    return transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()


def _rollout(prompt: list[int], completion: list[int], learn_mask: tuple[int, ...] = ()) -> Rollout:
    return Rollout(prompt_ids=tuple(prompt), completion_ids=tuple(completion), logprobs=(0.0,) * len(completion),
                   text="", finish_reason="stop", learn_mask=learn_mask)


def _right_padded(vocab: int) -> TrainBatch:
    """The trainer's layout (build_batch): prompts of different lengths, an env turn masked out,
    an unjudged row."""
    g = torch.Generator().manual_seed(0)
    ids = lambda n: torch.randint(0, vocab, (n,), generator=g).tolist()   # noqa: E731
    rollouts = [_rollout(ids(9), ids(7)), _rollout(ids(4), ids(11)),
                _rollout(ids(6), ids(8), learn_mask=(1, 1, 1, 0, 0, 1, 1, 1)), _rollout(ids(12), ids(3))]
    return build_batch(rollouts, [1.0, -0.5, 0.8, 0.3], [True, True, True, False], pad_id=0)


def _left_padded(vocab: int) -> TrainBatch:
    """Prompts left-padded so that every completion starts in the same column (TRL's layout)."""
    g = torch.Generator().manual_seed(1)
    prompts, completions, width_p, width_c = [5, 9, 7], [6, 4, 6], 9, 6
    ids = torch.zeros((3, width_p + width_c), dtype=torch.long)
    attn = torch.zeros_like(ids)
    mask = torch.zeros((3, width_p + width_c - 1))
    for i, (p, c) in enumerate(zip(prompts, completions)):
        ids[i, width_p - p:width_p + c] = torch.randint(0, vocab, (p + c,), generator=g)
        attn[i, width_p - p:width_p + c] = 1
        mask[i, width_p - 1:width_p - 1 + c] = 1
    return TrainBatch(ids, attn, ids[:, 1:].clone(), mask, torch.tensor([1.0, -1.0, 0.5]), torch.zeros_like(mask))


def _loss(logp, entropy, batch: TrainBatch, entropy_coef: float):
    # The trainer's loss with a KL term, so tokens weigh differently: the gradient is not one sum.
    ref = (logp.detach() - 0.1 * torch.arange(logp.shape[1]).remainder(3)).detach()
    return policy_loss(logp, None, batch.advantages, batch.mask, loss_type="dapo", beta=0.05, ref_logp=ref,
                       num_items_in_batch=float(batch.mask.sum()), entropy=entropy, entropy_coef=entropy_coef).loss


def _grads(model, fn) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    logp, entropy, loss = fn()
    loss.backward()
    grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
    return logp.detach(), entropy.detach(), grads


@pytest.mark.parametrize("layout", ["right", "left"])
@pytest.mark.parametrize("entropy_in_loss", [False, True])
@pytest.mark.parametrize("temperature", [0.7, 1.3])
def test_gradients_equal_the_previous_computation(model, layout, entropy_in_loss, temperature):
    batch = (_right_padded if layout == "right" else _left_padded)(model.config.vocab_size)
    coef = 0.05 if entropy_in_loss else 0.0

    def before():
        logp, entropy = reference_token_logps(model, batch, temperature, with_entropy=True)
        return logp, entropy, _loss(logp, entropy, batch, coef)

    def after():
        logp, entropy = token_logps(model, batch, temperature, with_entropy=True, entropy_grad=entropy_in_loss)
        return logp, entropy, _loss(logp, entropy, batch, coef)

    ref_logp, ref_entropy, ref_grads = _grads(model, before)
    logp, entropy, grads = _grads(model, after)
    m = batch.mask
    assert logp.shape == entropy.shape == m.shape
    torch.testing.assert_close(logp * m, ref_logp * m, atol=1e-6, rtol=0)
    torch.testing.assert_close(entropy * m, ref_entropy * m, atol=1e-6, rtol=0)
    assert ref_grads.abs().max() > 1e-3                      # a real gradient, not two zeros
    torch.testing.assert_close(grads, ref_grads, atol=1e-6, rtol=0)


def test_only_positions_from_the_first_completion_token_are_projected(model):
    batch = _right_padded(model.config.vocab_size)
    seen = []
    hook = model.get_output_embeddings().register_forward_hook(lambda mod, args, out: seen.append(out.shape[1]))
    try:
        with torch.no_grad():
            logp, entropy = token_logps(model, batch, TEMPERATURE)
    finally:
        hook.remove()
    first = int(batch.mask.any(0).nonzero()[0])             # the shortest prompt ends here (4 tokens: column 3)
    assert first == 3 and entropy is None
    assert seen == [batch.targets.shape[1] - first + 1]     # +1: the last position, dropped as before
    assert (logp[:, :first] == 0).all()
    ref, _ = reference_token_logps(model, batch, TEMPERATURE)
    torch.testing.assert_close(logp[:, first:], ref[:, first:], atol=1e-6, rtol=0)


def test_entropy_is_a_detached_metric_unless_it_is_in_the_loss(model):
    batch = _left_padded(model.config.vocab_size)
    logp, metric = token_logps(model, batch, TEMPERATURE, with_entropy=True)
    assert logp.requires_grad and not metric.requires_grad
    _, in_loss = token_logps(model, batch, TEMPERATURE, with_entropy=True, entropy_grad=True)
    assert in_loss.requires_grad
    torch.testing.assert_close(metric, in_loss.detach())


def test_nothing_to_learn_still_backpropagates_zeros(model):
    batch = _left_padded(model.config.vocab_size)
    batch.mask.zero_()
    model.zero_grad(set_to_none=True)
    logp, entropy = token_logps(model, batch, TEMPERATURE, with_entropy=True)
    _loss(logp, entropy, batch, 0.0).backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all((g == 0).all() for g in grads)


def test_a_second_backward_through_the_overwritten_logits_fails_loudly(model):
    # The backward writes the gradient over the saved logits: reusing the graph must raise,
    # never compute from the overwritten values.
    batch = _left_padded(model.config.vocab_size)
    logp, _ = token_logps(model, batch, TEMPERATURE)
    loss = (logp * batch.mask).sum()
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="inplace"):
        loss.backward()


def test_bad_temperature_is_refused(model):
    with pytest.raises(ValueError, match="temperature"):
        token_logps(model, _left_padded(model.config.vocab_size), 0.0)


def measure_peak(variant: str, shape: dict) -> dict:
    """Peak bytes of one forward + backward, measured by ``bench/logp_memory.py`` in a fresh process."""
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(BENCH), "--worker", variant, "--shape-json", json.dumps(shape)],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_measured_peak_is_at_most_1_5x_one_fp32_logits_tensor_and_below_the_previous():
    shape = {"vocab": 32768, "hidden": 64, "rows": 4, "prompt": [24, 48], "completion": [40, 80]}
    unit = 4 * shape["rows"] * (shape["prompt"][1] + shape["completion"][1]) * shape["vocab"]
    new = measure_peak("new", shape)["peak_bytes"]
    old = measure_peak("old", shape)["peak_bytes"]
    assert new <= 1.5 * unit, (new / unit, old / unit)
    assert old >= 3 * unit and new < old / 3
