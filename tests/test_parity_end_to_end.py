"""Parity beyond the loss: from a fixed batch of rewards to the gradient, through Proctor's
real trainer wiring (advantages, tensors, micro-batching, the token count N, unjudged rows),
against TRL's ``GRPOTrainer`` on the same batch and the same weights.

TRL's side: advantages by TRL's own lines (``trl_advantages``, as in the loss parity tests),
then the real ``GRPOTrainer.compute_loss`` on each micro-batch (left-padded prompts,
right-padded completions, as TRL lays them out), gradients accumulated. TRL 1.16 computes
log-probs through its fused LM head (``fused_lm_head=True``), which differs from a full
log-softmax by ~3e-3 per token on this model; its ``_get_per_token_logps_and_entropies`` is
given the plain forward instead (the model, TRL's layout, the full softmax at TRL's
temperature), so what is compared is everything between the log-probs and the gradient.

Where Proctor differs on purpose: a completion that could not be judged (``infra_error``)
is masked out of the loss, so it also leaves dapo's token count N; TRL keeps its tokens in
the completion mask (advantage 0), so they stay in N. The last test pins that difference
to exactly the ratio of the two counts.
"""

from __future__ import annotations

import copy
import math
import os

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from test_grpo_trainer import fresh_accelerator_state, tiny, trainer_for  # noqa: E402,F401
from test_grpo_trl_parity import trl_advantages  # noqa: E402

from proctor.envs import Verdict, Verifier  # noqa: E402
from proctor.trainer.batch import build_batch  # noqa: E402
from proctor.trainer.metrics import Stopwatch  # noqa: E402

G = 4
# 3 groups: mixed rewards, one unjudged row; a solved group (zero signal); real-valued rewards.
REWARDS = [1.0, 0.0, math.nan, 1.0, 1.0, 1.0, 1.0, 1.0, 0.2, 0.9, 0.5, 0.0]


class Scripted(Verifier):
    """Rewards in call order; NaN means the sandbox failed (infra_error)."""

    def __init__(self) -> None:
        self.i = 0

    def verify(self, task, completion):
        r = REWARDS[self.i % len(REWARDS)]
        self.i += 1
        if math.isnan(r):
            return Verdict.infra("sandbox gone (scripted)")
        return Verdict(reward=r, parts={"correct": r}, correct=r >= 1.0)


def proctor_grads(trainer, scored):
    grads: list[torch.Tensor] = []
    params = [p for p in trainer.model.parameters()]
    trainer.optimizer.optimizer.register_step_pre_hook(
        lambda opt, args, kwargs: grads.extend(p.grad.detach().clone() for p in params))
    adv, valid = trainer._advantages(scored)
    batch = build_batch(scored.rollouts, adv.advantages.tolist(), valid.tolist(), trainer.tokenizer.pad_token_id)
    trainer.learn(batch, Stopwatch())
    return grads, adv, batch


def trl_inputs(scored, advantages, pad_id, keep_unjudged_tokens: bool):
    """TRL's batch layout: left-padded prompts, right-padded completions, masks, advantages."""
    P = max(len(r.prompt_ids) for r in scored.rollouts)
    C = max(len(r.completion_ids) for r in scored.rollouts)
    rows = len(scored.rollouts)
    prompt_ids = torch.full((rows, P), pad_id)
    prompt_mask = torch.zeros(rows, P, dtype=torch.long)
    completion_ids = torch.full((rows, C), pad_id)
    completion_mask = torch.zeros(rows, C, dtype=torch.long)
    for i, (r, v) in enumerate(zip(scored.rollouts, scored.verdicts)):
        p, c = len(r.prompt_ids), len(r.completion_ids)
        prompt_ids[i, P - p:] = torch.tensor(r.prompt_ids)
        prompt_mask[i, P - p:] = 1
        completion_ids[i, :c] = torch.tensor(r.completion_ids)
        if v.scored or keep_unjudged_tokens:
            completion_mask[i, :c] = 1
    return dict(prompt_ids=prompt_ids, prompt_mask=prompt_mask, completion_ids=completion_ids,
                completion_mask=completion_mask, advantages=advantages.float())


def trl_grads(model, inputs, micro: int, loss_type: str):
    from trl import GRPOConfig, GRPOTrainer

    args = GRPOConfig(output_dir="/tmp/proctor-parity-trl", per_device_train_batch_size=micro, num_generations=G,
                      use_cpu=True, report_to=[], loss_type=loss_type, beta=0.0, epsilon=0.2, epsilon_high=0.28,
                      temperature=1.0, max_completion_length=inputs["completion_ids"].shape[1],
                      scale_rewards="group", disable_tqdm=True)
    from datasets import Dataset

    trainer = GRPOTrainer(model=model, reward_funcs=[lambda completions, **kw: [0.0] * len(completions)],
                          args=args, train_dataset=Dataset.from_dict({"prompt": ["x"] * G}))
    trainer._get_per_token_logps_and_entropies = lambda *a, **k: plain_logps(trainer.temperature, *a, **k)
    rows = inputs["completion_ids"].shape[0]
    slices = [slice(i, min(i + micro, rows)) for i in range(0, rows, micro)]
    trainer.current_gradient_accumulation_steps = len(slices)
    trainer.args.steps_per_generation = len(slices)
    n = inputs["completion_mask"].sum().to(torch.float64)
    model.train()          # as in TRL's training loop (its loss divides by accumulation only then)
    model.zero_grad()
    for s in slices:
        part = {k: v[s] for k, v in inputs.items()} | {"num_items_in_batch": n}
        trainer.compute_loss(model, part).backward()
    return [p.grad.detach().clone() for p in model.parameters()], n


def plain_logps(temperature, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                compute_entropy=False, **_):
    """Per-token log-probs of the last ``logits_to_keep`` tokens by a full log-softmax."""
    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, -logits_to_keep - 1:-1]
    logp_all = torch.log_softmax(logits.float() / temperature, dim=-1)
    logp = logp_all.gather(-1, input_ids[:, -logits_to_keep:].unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1) if compute_entropy else None
    return logp, entropy, None


@pytest.mark.parametrize("loss_type", ["dapo", "grpo", "dr_grpo"])
def test_rewards_to_gradient_match_trl(tiny, tmp_path, loss_type):
    trainer = trainer_for(tiny, tmp_path, Scripted(), loss_type=loss_type, micro_batch_size=4,
                          max_grad_norm=1e9)   # the gradient as computed, before clipping
    twin = copy.deepcopy(trainer.accelerator.unwrap_model(trainer.model))    # the same weights, for TRL
    scored = trainer.rollout(trainer.draw_prompts(3), Stopwatch())
    ours, adv, _ = proctor_grads(trainer, scored)

    rewards = torch.tensor(REWARDS, dtype=torch.float64).unsqueeze(1)
    trl_adv = trl_advantages(rewards, torch.ones(1, dtype=torch.float64), G, "group", "sum_then_normalize")[0]
    assert torch.allclose(adv.advantages.double(), trl_adv, atol=1e-6)     # advantages: TRL's lines
    theirs, _ = trl_grads(twin, trl_inputs(scored, trl_adv, trainer.tokenizer.pad_token_id, False), 4, loss_type)
    for a, b in zip(ours, theirs):
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), (a - b).abs().max()
    assert any(a.abs().sum() > 0 for a in ours)                               # a real gradient, not zeros


def test_unjudged_rows_leave_dapos_token_count_on_purpose(tiny, tmp_path):
    trainer = trainer_for(tiny, tmp_path, Scripted(), loss_type="dapo", micro_batch_size=4, max_grad_norm=1e9)
    twin = copy.deepcopy(trainer.accelerator.unwrap_model(trainer.model))
    scored = trainer.rollout(trainer.draw_prompts(3), Stopwatch())
    ours, _, batch = proctor_grads(trainer, scored)
    rewards = torch.tensor(REWARDS, dtype=torch.float64).unsqueeze(1)
    trl_adv = trl_advantages(rewards, torch.ones(1, dtype=torch.float64), G, "group", "sum_then_normalize")[0]
    inputs = trl_inputs(scored, trl_adv, trainer.tokenizer.pad_token_id, keep_unjudged_tokens=True)
    theirs, n_trl = trl_grads(twin, inputs, 4, "dapo")
    n_ours = float(batch.mask.sum())
    assert n_trl > n_ours                               # TRL counts the unjudged completion's tokens
    for a, b in zip(ours, theirs):                      # and so divides the same gradient by more
        assert torch.allclose(a * n_ours / float(n_trl), b, rtol=1e-4, atol=1e-6)


def test_batch_scaled_std_is_over_every_process():
    """scale_rewards=batch: each process's share divided by the std of the whole batch, as TRL
    gathers rewards before its statistics; two shares then equal the one-process result."""
    from proctor.trainer.algo import group_advantages

    rewards = torch.tensor([1.0, 0.0, 0.5, 1.0, 0.2, 0.9, 0.5, 0.0], dtype=torch.float64)
    whole = group_advantages(rewards, G, scale="batch").advantages
    shares = [group_advantages(rewards[i:i + G], G, scale="batch", batch_rewards=rewards).advantages
              for i in (0, G)]
    assert torch.allclose(torch.cat(shares), whole)
    alone = group_advantages(rewards[:G], G, scale="batch").advantages     # the old per-share std
    assert not torch.allclose(alone, whole[:G])
    trl = trl_advantages(rewards.unsqueeze(1), torch.ones(1, dtype=torch.float64), G, "batch", "sum_then_normalize")
    assert torch.allclose(whole, trl[0], atol=1e-6)
