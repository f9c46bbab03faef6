"""From scored rollouts to the tensors the learner trains on (token ids exactly as sampled)."""

from __future__ import annotations

from typing import Optional, Sequence

import torch

from .records import TrainBatch
from .rollout import Rollout


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
    return batch if device is None else batch.to(device)


# Values per fp32 temporary in the log-softmax: at most 16 MiB, and at most 1/16 of the logits,
# so the few temporaries stay small beside them while each kernel still has real work.
# proctor.plan counts the same.
LOGP_CHUNK_VALUES = 1 << 22
LOGP_CHUNK_FRACTION = 16


def token_logps(model: torch.nn.Module, batch: TrainBatch, temperature: float,
                with_entropy: bool = False, entropy_grad: bool = False
                ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Per-target-token log-probs [B, L-1] under ``model`` at the sampling temperature (and entropies).

    Only the positions from the batch's first masked column on are scored (every position
    under ``batch.mask`` is): the model is asked for those logits alone (``logits_to_keep``),
    and earlier positions read 0. :class:`_TokenLogSoftmax` reduces the logits chunk by chunk
    in fp32 and its backward writes their gradient over them, so a step holds one logits
    tensor over the kept positions plus a few chunk-sized temporaries. The entropy carries a
    gradient only with ``entropy_grad`` (an entropy bonus in the loss); otherwise it is a metric.
    """
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 (got {temperature})")
    start = _first_masked_column(batch.mask)
    kept = batch.targets.shape[1] - start
    logits = model(input_ids=batch.input_ids, attention_mask=batch.attention_mask, logits_to_keep=kept + 1).logits
    if logits.shape[1] < kept + 1:
        raise ValueError(f"{type(model).__name__} returned logits for {logits.shape[1]} positions, fewer than the "
                         f"{kept + 1} asked for with logits_to_keep: use a transformers causal LM")
    logp, entropy = _TokenLogSoftmax.apply(logits, batch.targets[:, start:], temperature, with_entropy, entropy_grad)
    logp = torch.nn.functional.pad(logp, (start, 0))
    return logp, torch.nn.functional.pad(entropy, (start, 0)) if with_entropy else None


def _first_masked_column(mask: torch.Tensor) -> int:
    """The first target column any row learns on; with nothing masked, the last (one position is
    still scored, so the loss stays connected to the model and backward runs as usual)."""
    columns = mask.any(0).nonzero()
    return int(columns[0]) if len(columns) else max(mask.shape[1] - 1, 0)


def _chunks(rows: int, positions: int, vocab: int) -> list[tuple[int, int, int]]:
    """(row, first, end) spans of logits, row by row: each at most LOGP_CHUNK_VALUES values and
    1/LOGP_CHUNK_FRACTION of the whole, and never less than one position."""
    budget = min(LOGP_CHUNK_VALUES, rows * positions * vocab // LOGP_CHUNK_FRACTION)
    step = max(1, budget // max(vocab, 1))
    return [(b, s, min(s + step, positions)) for b in range(rows) for s in range(0, positions, step)]


class _TokenLogSoftmax(torch.autograd.Function):
    """log p(target) and entropy of softmax(logits / T), chunk by chunk in fp32.

    ``logits`` [B, S, V] are the model's last S positions; position ``S-1-K+k`` predicts
    ``targets[:, k]`` (the last position predicts past the row and is not scored). The
    forward saves the logits themselves, not a copy; the backward overwrites them with their
    gradient and returns that, so the peak is one logits tensor. Autograd's version counter
    turns any other reader of the overwritten logits (or a second backward) into an error.
    """

    @staticmethod
    def forward(ctx: torch.autograd.function.FunctionCtx, logits: torch.Tensor, targets: torch.Tensor,
                temperature: float, with_entropy: bool, entropy_grad: bool) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.set_materialize_grads(False)
        rows, positions = targets.shape
        offset = logits.shape[1] - 1 - positions
        logp = logits.new_empty((rows, positions), dtype=torch.float32)
        entropy = logits.new_empty((rows, positions) if with_entropy else (0,), dtype=torch.float32)
        for b, s, e in _chunks(rows, positions, logits.shape[-1]):
            # The plain computation's arithmetic, one chunk at a time: fp32, / T, log_softmax, gather.
            lp = torch.log_softmax(logits[b, offset + s:offset + e].float() / temperature, dim=-1)
            logp[b, s:e] = lp.gather(-1, targets[b, s:e].unsqueeze(-1)).squeeze(-1)
            if with_entropy:
                entropy[b, s:e] = -(lp.exp() * lp).sum(-1)
        ctx.temperature, ctx.offset = temperature, offset
        ctx.save_for_backward(logits, targets, entropy if with_entropy and entropy_grad else None)
        if not (with_entropy and entropy_grad):
            ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: torch.autograd.function.FunctionCtx, grad_logp: Optional[torch.Tensor],
                 grad_entropy: Optional[torch.Tensor]) -> tuple[Optional[torch.Tensor], None, None, None, None]:
        logits, targets, entropy = ctx.saved_tensors
        if entropy is None:
            grad_entropy = None
        if grad_logp is None and grad_entropy is None:
            return None, None, None, None, None
        grad = logits.detach()   # an alias: the gradient is written over the logits
        rows, positions = targets.shape
        offset, temperature = ctx.offset, ctx.temperature
        grad[:, :offset].zero_()
        grad[:, offset + positions:].zero_()
        for b, s, e in _chunks(rows, positions, logits.shape[-1]):
            z = grad[b, offset + s:offset + e]
            lp = torch.log_softmax(z.float() / temperature, dim=-1)
            p = lp.exp()
            # d log p_t / dz_j = 1[j = t] - p_j  and  d H / dz_j = -p_j (log p_j + H), each / T.
            out = None
            if grad_entropy is not None:
                out = lp.add_(entropy[b, s:e].unsqueeze(-1)).mul_(p).mul_(-grad_entropy[b, s:e].unsqueeze(-1))
            if grad_logp is not None:
                g = grad_logp[b, s:e].unsqueeze(-1)
                p = p.mul_(-g).scatter_add_(-1, targets[b, s:e].unsqueeze(-1), g)
                out = p if out is None else p.add_(out)
            z.copy_(out.div_(temperature))
        return grad, None, None, None, None
