"""The answer probe: a prompt's pass rate predicted by the policy itself, before any rollout.

For an env whose tasks carry a gold ``answer`` written the way the policy writes its reply
(short-answer tasks such as arithmetic; not countdown, whose answers are many expressions), one forward
pass over ``prompt + reference + EOS`` gives the probability that a sample at the rollout
temperature is exactly the reference completion::

    p(x) = prod_t softmax(logits_t / T)[ref_t]        ref = tokens(template.format(answer=...)) + [eos]

That is a lower bound on the sampled pass rate (other accepted replies add to it), and on
the tiny model it tracks it closely (r = 0.79 over training questions). Unlike a pass-rate
memory it is never stale: it is the current policy's own number, for a prompt never seen
before as well as for one seen last step. A prompt's group has signal with probability
``1 - p^G - (1 - p)^G``; the drawer keeps prompts whose ``p`` lies in the target band.

The probe's forward tokens are not generated and cost about one prefill each; they are
counted (``tokens_probed``) beside the token ledger, never in its sums.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import torch

from proctor.envs import SuiteItem

from ..batch import build_batch, token_logps
from ..rollout import Rollout
from ..rollout.base import stop_token_ids


class AnswerProbe:
    """Predicted pass rates of prompts from the policy's probability of their reference reply.

    ``tokenize`` gives a prompt's ids (as the rollout sees them); ``reference`` gives the
    reply text to score, or None when the task has none (its prompt is not probed).
    ``model`` is the policy as a causal LM whose forward returns ``.logits``."""

    def __init__(self, model: torch.nn.Module, tokenizer: Any, tokenize: Callable[[SuiteItem], list[int]],
                 reference: Callable[[SuiteItem], Optional[str]], temperature: float, batch_size: int = 64) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.tokenize = tokenize
        self.reference = reference
        self.temperature = temperature
        self.batch_size = batch_size
        self.eos = stop_token_ids(tokenizer)[:1]
        pad = tokenizer.pad_token_id
        self.pad = pad if pad is not None else (self.eos[0] if self.eos else 0)
        self.tokens = 0    # forward tokens scored so far (prompt + reference)

    def pass_rates(self, items: Sequence[SuiteItem]) -> list[Optional[float]]:
        """Per item: the predicted pass rate, or None where the task has no reference reply."""
        pairs: list[tuple[int, list[int], list[int]]] = []
        for i, item in enumerate(items):
            text = self.reference(item)
            if text is not None:
                ref = self.tokenizer(text, add_special_tokens=False)["input_ids"] + self.eos
                pairs.append((i, self.tokenize(item), ref))
        out: list[Optional[float]] = [None] * len(items)
        for start in range(0, len(pairs), self.batch_size):
            chunk = pairs[start:start + self.batch_size]
            for (i, _, _), logp in zip(chunk, self.sequence_logprobs([(p, r) for _, p, r in chunk])):
                out[i] = float(torch.exp(logp))
        return out

    @torch.no_grad()
    def sequence_logprobs(self, pairs: Sequence[tuple[list[int], list[int]]]) -> torch.Tensor:
        """Per (prompt ids, reply ids) pair: sum_t log p(reply_t | prompt, reply_<t) at the
        temperature, the log-probability that a sample starts with exactly ``reply``; shape [n].
        The learner's own path: the pairs as a ``TrainBatch``, scored by ``token_logps``."""
        rows = [Rollout(tuple(prompt), tuple(reply), (0.0,) * len(reply), "", "stop") for prompt, reply in pairs]
        device = next(self.model.parameters()).device
        batch = build_batch(rows, [0.0] * len(rows), [True] * len(rows), self.pad, device=device)
        self.tokens += int(batch.attention_mask.sum())
        was_training = self.model.training
        self.model.eval()
        try:
            logp, _ = token_logps(self.model, batch, self.temperature)        # [n, L-1]
        finally:
            self.model.train(was_training)
        return (logp * batch.mask).sum(-1).cpu()


def signal_chance(p: float, group_size: int) -> float:
    """P(a group of ``group_size`` samples has both a pass and a fail) at pass rate ``p``."""
    return 1.0 - p ** group_size - (1.0 - p) ** group_size


# rollout.adaptive_group_size: a prompt's group is the smallest size in range whose chance of
# coming back all right or all wrong is at most this (the zero-signal share the issue aims at).
ALL_EQUAL_CHANCE = 0.25


def sized_group(p: Optional[float], sizes: tuple[int, int], default: int) -> int:
    """The group size for a prompt predicted to pass ``p`` of the time: the least g in
    ``sizes`` = [lo, hi] with p^g + (1 - p)^g <= ALL_EQUAL_CHANCE, else hi; ``default``
    (rollout.group_size) for a prompt the probe could not score (p None).

    At the band's middle few samples suffice (p = 0.5: 4 give 1 - 2/16 = 88 % signal); near its
    ends more are needed (p = 0.2: 7 give 79 %)."""
    if p is None:
        return default
    lo, hi = sizes
    for g in range(lo, hi + 1):
        if p ** g + (1.0 - p) ** g <= ALL_EQUAL_CHANCE:
            return g
    return hi


def fit_size(wanted: int, left: int, smallest: int) -> int:
    """The size a prompt gets when ``left`` completions of the step's budget remain: what it
    wants, unless that would leave fewer than ``smallest`` (then it takes the remainder, or
    leaves exactly ``smallest`` for one more prompt). Prompts sized in turn this way spend the
    budget exactly, so a step always has B x G rows whatever the mix (equal across
    data-parallel processes, and within the memory plan)."""
    g = min(wanted, left)
    if 0 < left - g < smallest:
        g = left if left - smallest < smallest else left - smallest
    return g


def answer_reference(template: str) -> Callable[[SuiteItem], Optional[str]]:
    """The reference reply of an item: ``template`` with its task's answer, None without one."""
    def reference(item: SuiteItem) -> Optional[str]:
        answer = item.task.answer
        return None if answer is None else template.format(answer=answer)
    return reference


def agreement_problem(predicted: Sequence[float], observed: Sequence[float], min_r: float = 0.5) -> Optional[str]:
    """Whether the probe's predictions track a model's sampled pass rates, task by task: None when
    their correlation is at least ``min_r`` and their means are within 2x (and 5 points) of each
    other, else what is wrong (``proctor envs check --probe-model``)."""
    import numpy as np

    pred, obs = np.asarray(predicted, dtype=float), np.asarray(observed, dtype=float)
    if len(pred) < 2 or obs.std() == 0 or pred.std() == 0:
        return (f"no spread to predict: over {len(obs)} tasks the model passed {obs.mean():.0%} and the probe "
                f"predicted {pred.mean():.1%} on average, alike for every task; measure with a model that "
                "passes some tasks and not others")
    r = float(np.corrcoef(pred, obs)[0, 1])
    low, high = sorted((pred.mean(), obs.mean()))
    if r < min_r:
        return (f"the probe's predictions barely track the sampled pass rates (r = {r:.2f} < {min_r} over "
                f"{len(obs)} tasks): the reference reply is not how this model answers")
    if high > 2 * low + 0.05:
        return (f"the probe predicts {pred.mean():.1%} on average and the model passes {obs.mean():.1%}: "
                "the reference reply is not how this model answers, or not what the verifier accepts")
    return None


__all__ = ["ALL_EQUAL_CHANCE", "AnswerProbe", "agreement_problem", "answer_reference", "fit_size", "signal_chance",
           "sized_group"]
