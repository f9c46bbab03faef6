"""From scored rollouts to the tensors the learner trains on (token ids exactly as sampled)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from .rollout import Rollout


@dataclass
class TrainBatch:
    """Right-padded prompt+completion rows; per-token tensors are over *target* positions
    (position j predicts token j+1), with ``mask`` set on completion tokens only."""

    input_ids: torch.Tensor        # [B, L]
    attention_mask: torch.Tensor   # [B, L]
    targets: torch.Tensor          # [B, L-1]: input_ids shifted left
    mask: torch.Tensor             # [B, L-1] float: 1 on the completion's tokens
    advantages: torch.Tensor       # [B]
    sampler_logp: torch.Tensor     # [B, L-1]: the sampler's log-probs on the mask, 0 elsewhere

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    def slice(self, rows: slice) -> "TrainBatch":
        return TrainBatch(*(t[rows] for t in self._tensors()))

    def select(self, keep: torch.Tensor) -> "TrainBatch":
        """The rows where ``keep`` (bool [B]) is set."""
        return TrainBatch(*(t[keep] for t in self._tensors()))

    def _tensors(self) -> tuple[torch.Tensor, ...]:
        return (self.input_ids, self.attention_mask, self.targets, self.mask, self.advantages, self.sampler_logp)


def build_batch(rollouts: Sequence[Rollout], advantages: Sequence[float], keep: Sequence[bool], pad_id: int,
                mask_truncated: bool = False, device: Optional[torch.device] = None) -> TrainBatch:
    """Rows for every rollout; a row with ``keep=False`` (not judged) gets an all-zero mask.

    With ``mask_truncated`` a completion that hit the length limit is masked whole: it
    never ended, so its reward says little about its tokens (DAPO's overlong filtering).
    """
    width = max(len(r.prompt_ids) + len(r.completion_ids) for r in rollouts)
    ids = torch.full((len(rollouts), width), pad_id, dtype=torch.long)
    attn = torch.zeros((len(rollouts), width), dtype=torch.long)
    mask = torch.zeros((len(rollouts), width - 1))
    sampler = torch.zeros((len(rollouts), width - 1))
    for i, r in enumerate(rollouts):
        p, c = len(r.prompt_ids), len(r.completion_ids)
        ids[i, :p + c] = torch.tensor(r.prompt_ids + r.completion_ids)
        attn[i, :p + c] = 1
        if keep[i] and c and not (mask_truncated and r.truncated):
            # Completion token k sits at position p + k and is predicted at position p + k - 1;
            # tokens the env inserted (multi-turn feedback) are context, never learned on.
            mask[i, p - 1:p - 1 + c] = torch.tensor(r.learned(), dtype=torch.float32)
            sampler[i, p - 1:p - 1 + c] = torch.tensor(r.logprobs) * mask[i, p - 1:p - 1 + c]
    batch = TrainBatch(ids, attn, ids[:, 1:].clone(), mask, torch.tensor(list(advantages), dtype=torch.float32),
                       sampler)
    return batch if device is None else TrainBatch(*(t.to(device) for t in (
        batch.input_ids, batch.attention_mask, batch.targets, batch.mask, batch.advantages, batch.sampler_logp)))


def token_logps(model: torch.nn.Module, batch: TrainBatch, temperature: float,
                with_entropy: bool = False) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Per-target-token log-probs under ``model`` at the sampling temperature (and entropies)."""
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits[:, :-1].float()
    logits = logits / temperature
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, batch.targets.unsqueeze(-1)).squeeze(-1)
    entropy = None
    if with_entropy:
        entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy
